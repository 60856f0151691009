"""The re-ranker's graph support (query/rerank.py ``_support``) as compiled loops (numba), on CPU.

The tensor version looks a question's ten best candidates' edges up among its 300 candidates
with sorts, ``unique`` and ``searchsorted``, some 60 tensor operations whose fixed cost is most of
its time for one question. Here the same counts are plain loops, a question at a time: the same
features, up to the last bits of the entity column's sum (tests/test_rerank.py checks them
against each other). Imported lazily when ``retrieval.kernel`` picks numba (query/kernel.py).
"""
from __future__ import annotations

import numba
import numpy as np
import torch

from magma_torch.query.beam_numba import specificity
from magma_torch.store.csr_numba import csr_arrays, gather_rows
from magma_torch.store.graph import GraphSnapshot


def support(graph: GraphSnapshot, episode_of: torch.Tensor, ids: torch.Tensor, m: int, column: torch.Tensor,
            episode_column: int, entity_column: int, num_features: int) -> torch.Tensor:
    """[B, P, num_features] float64 support of the candidates ``ids`` [B, P] (-1 padded) from their
    row's first ``m``; ``column`` maps a direct edge's relation id to its feature (-1: none), and the
    episode and entity columns are -1 when those relations are removed."""
    out = np.zeros((*ids.shape, num_features))
    _support(csr_arrays(graph.event_adj), csr_arrays(graph.event_entity), csr_arrays(graph.entity_event),
             episode_of.numpy(), ids.numpy(), m, column.numpy(), episode_column, entity_column, graph.num_events, out)
    return torch.from_numpy(out)


@numba.njit(cache=True, nogil=True)
def _support(adj, ev_ent, ent_ev, episode_of, ids, m, column, ep_col, ent_col, n, out):
    b_size, p = ids.shape
    m = min(m, p)
    if m == 0 or n == 0:
        return
    counted = np.full((p, out.shape[2]), -1, dtype=np.int64)   # per feature, the last (question, top anchor) counted
    for b in range(b_size):
        by_id = np.argsort(ids[b])                  # candidates looked up by id (pads first, never matched)
        sorted_ids = ids[b][by_id]
        top = ids[b, :m]
        # temporal, semantic, causal: each distinct (top anchor, neighbour, relation) edge once
        for j in range(m):
            if top[j] < 0:
                continue
            _, nbr, rel = gather_rows(adj, top[j:j + 1])
            for e in range(nbr.shape[0]):
                col = column[rel[e]]
                k = np.searchsorted(sorted_ids, nbr[e])
                if col < 0 or k == p or sorted_ids[k] != nbr[e]:
                    continue
                c = by_id[k]
                if counted[c, col] != b * m + j:
                    counted[c, col] = b * m + j
                    out[b, c, col] += 1.0 / m
        if ep_col >= 0:   # the same episode as a top anchor (the candidate itself aside)
            for c in range(p):
                if ids[b, c] < 0:
                    continue
                same = 0
                for j in range(m):
                    if top[j] >= 0 and episode_of[top[j]] == episode_of[ids[b, c]] and ids[b, c] != top[j]:
                        same += 1
                out[b, c, ep_col] = same / m
        if ent_col >= 0:  # per top anchor, the specificity of the rarest entity it shares
            # the top anchors' (entity, position) pairs sorted by entity, each candidate's entities looked up in them
            t_pos = np.nonzero(top >= 0)[0]
            t_seg, t_ent, _ = gather_rows(ev_ent, top[t_pos])
            order = np.argsort(t_ent)
            t_ent, t_pos = t_ent[order], t_pos[t_seg[order]]
            t_spec = np.empty(t_ent.shape[0])
            for k in range(t_ent.shape[0]):
                t_spec[k] = specificity(ent_ev, t_ent[k], n)
            c_seg, c_ent, _ = gather_rows(ev_ent, np.maximum(ids[b], 0))
            best = np.zeros((p, m))
            for e in range(c_ent.shape[0]):
                c = c_seg[e]
                if ids[b, c] < 0:
                    continue
                for k in range(np.searchsorted(t_ent, c_ent[e]), np.searchsorted(t_ent, c_ent[e], side="right")):
                    if ids[b, c] != top[t_pos[k]]:
                        best[c, t_pos[k]] = max(best[c, t_pos[k]], t_spec[k])
            for c in range(p):
                if ids[b, c] >= 0:
                    total = 0.0
                    for j in range(m):
                        total += best[c, j]
                    out[b, c, ent_col] = total / m
