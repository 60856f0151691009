"""Read-only adapters that hand a stored graph to the plain-Python reference search.

The reference (magma_torch.query.reference) reads adjacency as ``.get(node, [])`` lists
and embeddings as rows of floats. Building Python lists for 10^7 edges or 10^6 x 384
floats up front would take gigabytes, so these answer each lookup on demand from the
stored edge lists (not from the CSR views the batched search walks).
"""
from __future__ import annotations

import numpy as np
import torch

from magma_torch.store.graph import NODE_HOPS, RELATIONS, TRAVERSED, MultiGraph


class SortedAdjacency:
    """node -> [neighbour] or [(neighbour, label)] from unsorted (key, value[, label]) arrays."""

    def __init__(self, keys: np.ndarray, values: np.ndarray, labels: list[str] | None = None,
                 label_ids: np.ndarray | None = None):
        order = np.argsort(keys, kind="stable")
        self.keys, self.values = keys[order], values[order]
        self.labels = labels
        self.label_ids = None if label_ids is None else label_ids[order]

    def get(self, node: int, default=()):
        lo, hi = np.searchsorted(self.keys, node), np.searchsorted(self.keys, node, side="right")
        if lo == hi:
            return default
        values = self.values[lo:hi].tolist()
        if self.labels is None:
            return values
        return [(v, self.labels[r]) for v, r in zip(values, self.label_ids[lo:hi].tolist(), strict=True)]


class RowLists:
    """embeddings[v] as a list of Python floats, converted when asked."""

    def __init__(self, embeddings: torch.Tensor):
        self.embeddings = embeddings.detach().float().cpu().numpy()

    def __getitem__(self, v: int) -> list[float]:
        return self.embeddings[v].tolist()

    def __len__(self) -> int:
        return self.embeddings.shape[0]


def reference_graph(graph: MultiGraph) -> tuple[SortedAdjacency, dict[str, tuple[SortedAdjacency, SortedAdjacency]]]:
    """What ``query.reference.adjacency_lists`` builds, as lazy lookups: undirected
    event-event lists with relation names, and event->node / node->event lists of the
    entity and episode hops."""
    src, dst, rel = [], [], []
    for r, name in enumerate(RELATIONS):
        if name not in TRAVERSED or name in NODE_HOPS:
            continue
        s, d, _ = (t.cpu().numpy() for t in graph.edges(name))
        src += [s, d]
        dst += [d, s]
        rel += [np.full(2 * s.size, r)]
    event_adj = SortedAdjacency(np.concatenate(src), np.concatenate(dst), list(RELATIONS), np.concatenate(rel))
    hubs = {}
    for name in NODE_HOPS:
        e_src, e_dst, _ = (t.cpu().numpy() for t in graph.edges(name))
        hubs[name] = (SortedAdjacency(e_src, e_dst), SortedAdjacency(e_dst, e_src))
    return event_adj, hubs
