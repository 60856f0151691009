"""The relation graphs as PyG ``HeteroData`` edge tensors with cached CSR views.

Four relations join events (temporal, semantic, causal, and event-entity mentions); two
more give the episode hierarchy (paper Sec. 3.2): event -> episode membership and the
temporal chain of a stream's episodes. ``supersedes`` (later event -> the earlier event whose
fact it updates, weight = confidence) gives valid time: it is stored, never walked.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import torch
from torch_geometric import EdgeIndex
from torch_geometric.data import HeteroData

from magma_torch.store.csr import CSRSnapshot, IncrementalCSR
from magma_torch.store.growable import GrowableTensor

RELATIONS = ("temporal", "semantic", "causal", "entity", "episode", "episode_chain", "supersedes")
# The relations the beam search walks, each with its intent weight w[T_q, r] (query/beam.py):
# entity and episode hops go event -> entity / episode -> event.
TRAVERSED = RELATIONS[:5]
NODE_HOPS = ("entity", "episode")   # walked event -> node -> event; the others event -> event
REL_ID = {name: i for i, name in enumerate(TRAVERSED)}
EDGE_TYPES = {
    "temporal": ("event", "temporal", "event"),
    "semantic": ("event", "semantic", "event"),
    "causal": ("event", "causal", "event"),
    "entity": ("event", "mentions", "entity"),
    "episode": ("event", "in_episode", "episode"),
    "episode_chain": ("episode", "precedes", "episode"),
    "supersedes": ("event", "supersedes", "event"),
}
REVERSE_ENTITY = ("entity", "rev_mentions", "event")
REVERSE_EPISODE = ("episode", "rev_in_episode", "event")
# The node-mediated hops, with the reverse edge type that carries PyG messages back to events.
REVERSED = {"entity": REVERSE_ENTITY, "episode": REVERSE_EPISODE}


@dataclass(frozen=True)
class GraphSnapshot:
    """What a query needs, taken at one moment; later writes never change it."""

    num_events: int
    event_adj: CSRSnapshot     # event -> event (temporal, semantic, causal; both directions)
    event_entity: CSRSnapshot  # event -> entity
    entity_event: CSRSnapshot  # entity -> event
    event_episode: CSRSnapshot   # event -> its episode
    episode_event: CSRSnapshot   # episode -> its events


class MultiGraph:
    """Temporal, semantic, causal, event-entity and episode edges over event, entity and
    episode nodes.

    Edges are stored once, in the direction the paper gives them (temporal: earlier ->
    later, causal: cause -> effect, semantic: new -> older neighbour, entity: event ->
    entity, episode: event -> episode, episode_chain: earlier -> later episode); traversal
    views hold both directions because the beam search may walk any edge either way.
    """

    def __init__(self, device: torch.device | str = "cpu"):
        self.device = torch.device(device)
        # Each relation's edges as rows of one [rows, capacity] buffer, so that PyG's [2, E]
        # edge_index is a view (no copy). The node-mediated hops keep a second copy of src as
        # a third row: [dst, src], their reverse edge type, is then a view as well.
        self._edges = {rel: (GrowableTensor((), torch.long, device, lead_shape=(3 if rel in REVERSED else 2,)),
                             GrowableTensor((), torch.float32, device)) for rel in RELATIONS}
        self._event_adj = IncrementalCSR(device)
        self._event_entity = IncrementalCSR(device)
        self._entity_event = IncrementalCSR(device)
        self._event_episode = IncrementalCSR(device)
        self._episode_event = IncrementalCSR(device)
        self._causal_out: dict[int, set[int]] = defaultdict(set)
        self._mentions: set[tuple[int, int]] = set()
        self._supersessions: set[tuple[int, int]] = set()

    # ---- writes (ingest and consolidation only) ----
    def add_edges(self, relation: str, src: torch.Tensor, dst: torch.Tensor,
                  weight: torch.Tensor | None = None) -> None:
        src = torch.as_tensor(src, dtype=torch.long, device=self.device)
        dst = torch.as_tensor(dst, dtype=torch.long, device=self.device)
        if src.numel() == 0:
            return
        weight = torch.ones(src.numel(), device=self.device) if weight is None else torch.as_tensor(
            weight, dtype=torch.float32, device=self.device)
        pairs, w = self._edges[relation]
        pairs.extend(torch.stack([src, dst, src][:pairs.data.shape[0]]))
        w.extend(weight)
        self._add_views(relation, src, dst)
        if relation == "entity":
            self._mentions.update(zip(src.tolist(), dst.tolist(), strict=True))
        elif relation == "causal":
            for c, e in zip(src.tolist(), dst.tolist(), strict=True):
                self._causal_out[c].add(e)
        elif relation == "supersedes":
            self._supersessions.update(zip(src.tolist(), dst.tolist(), strict=True))

    def _add_views(self, relation: str, src: torch.Tensor, dst: torch.Tensor) -> None:
        if relation not in REL_ID:  # the episode chain and supersession are stored, not walked
            return
        rel = torch.full_like(src, REL_ID[relation])
        if relation == "entity":
            self._event_entity.add(src, dst, rel)
            self._entity_event.add(dst, src, rel)
        elif relation == "episode":
            self._event_episode.add(src, dst, rel)
            self._episode_event.add(dst, src, rel)
        else:
            self._event_adj.add(torch.cat([src, dst]), torch.cat([dst, src]), torch.cat([rel, rel]))

    def has_mention(self, event: int, entity: int) -> bool:
        return (event, entity) in self._mentions

    def has_supersession(self, later: int, earlier: int) -> bool:
        return (later, earlier) in self._supersessions

    def has_causal(self, cause: int, effect: int) -> bool:
        return effect in self._causal_out.get(cause, ())

    def causal_path_exists(self, src: int, dst: int) -> bool:
        """Whether dst is reachable from src along causal edges (used to keep the DAG)."""
        stack, seen = [src], {src}
        while stack:
            u = stack.pop()
            if u == dst:
                return True
            for v in self._causal_out.get(u, ()):
                if v not in seen:
                    seen.add(v)
                    stack.append(v)
        return False

    # ---- reads ----
    def edges(self, relation: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        pairs, w = self._edges[relation]
        return pairs.data[0], pairs.data[1], w.data

    def num_edges(self, relation: str) -> int:
        return len(self._edges[relation][0])

    def snapshot(self, num_events: int, num_entities: int, num_episodes: int = 0) -> GraphSnapshot:
        return GraphSnapshot(num_events, self._event_adj.snapshot(num_events),
                             self._event_entity.snapshot(num_events),
                             self._entity_event.snapshot(num_entities),
                             self._event_episode.snapshot(num_events),
                             self._episode_event.snapshot(num_episodes))

    def to_hetero_data(self, num_events: int, num_entities: int, num_episodes: int = 0) -> HeteroData:
        """The edges as PyG ``HeteroData`` (node counts, no node features; ``MemoryStore.hetero_data``
        adds those): per relation an ``EdgeIndex`` and an ``edge_weight`` that are views of the
        stored buffers (no copy), plus the reverse mentions and memberships, views too."""
        data = HeteroData()
        sizes = {"event": num_events, "entity": num_entities, "episode": num_episodes}
        for node_type, n in sizes.items():
            data[node_type].num_nodes = n
        for rel, edge_type in EDGE_TYPES.items():
            pairs, w = (t.data for t in self._edges[rel])
            src, _, dst = edge_type
            data[edge_type].edge_index = EdgeIndex(pairs[:2], sparse_size=(sizes[src], sizes[dst]))
            data[edge_type].edge_weight = w
            if rel in REVERSED:
                data[REVERSED[rel]].edge_index = EdgeIndex(pairs[1:], sparse_size=(sizes[dst], sizes[src]))
                data[REVERSED[rel]].edge_weight = w
        return data

    def state(self) -> dict[str, torch.Tensor]:
        out = {}
        for rel in RELATIONS:
            s, d, w = self.edges(rel)
            out[f"{rel}.src"], out[f"{rel}.dst"], out[f"{rel}.weight"] = s, d, w
        return out

    def counts(self) -> dict[str, int]:
        return {rel: self.num_edges(rel) for rel in RELATIONS}

    @classmethod
    def from_state(cls, state: dict[str, torch.Tensor], device) -> "MultiGraph":
        g = cls(device)
        for rel in RELATIONS:
            if f"{rel}.src" in state:  # saves from before episodes have none
                g.add_edges(rel, state[f"{rel}.src"], state[f"{rel}.dst"], state[f"{rel}.weight"])
        return g
