"""The part of a retrieval worth looking at: the most salient events, each with the reason
it was retrieved (an anchor's RRF ranks, or the edge the beam search reached it by), and
the anchors and path edges that lead to them."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

from magma_torch.events import StoredEvent
from magma_torch.query.retriever import SIGNALS, Anchor, PathEdge, RetrievedNode, Retrieval


@dataclass(frozen=True)
class ShownNode:
    node: RetrievedNode
    rank: int                        # 1-based place among all retrieved events, in ``listing_order``
    depth: int                       # beam-search depth: 0 for anchors
    anchor_rank: int | None          # 1-based position in the fused anchor list, None if not an anchor
    reached_by: PathEdge | None      # the edge the beam search reached the event by; None for anchors
    in_context: bool                 # its block is in the linearised context


@dataclass(frozen=True)
class Update:
    """An event that supersedes a retrieved event, directly or down its chain of updates, and that
    the retrieval does not hold, as the store has it."""
    ref: str                         # as the context names it: its source id, else E<id>
    superseded_by: int | None        # the event that superseded it in turn


@dataclass(frozen=True)
class Explanation:
    retrieval: Retrieval
    query_time: datetime | None
    nodes: list[ShownNode]           # salience order: the top events and the paths' events leading to them
    anchors: list[Anchor]            # the best anchors, in ANCHOR_ORDER
    signals: tuple[str, ...]         # RRF rankings, in the order the ranks are reported
    hidden_nodes: int                # retrieved events not shown
    entity_names: dict[str, str] = field(default_factory=dict)   # entity key -> the name as written
    updates: dict[int, Update] = field(default_factory=dict)     # event id -> Update (``updates_outside``)

    def hop(self, relation: str) -> tuple[str, str | None]:
        """A path relation as (kind, what it went through): an entity by its name as written in the
        memory ("Biscuit's vet", not the key "biscuit vet"), an episode by its start time."""
        kind, via = split_relation(relation)
        return kind, self.entity_names.get(via, via) if kind == "entity" else via

    def ref(self, event: int) -> str:
        """The reference the context uses for ``event``, also for an update the retrieval does not hold."""
        node = next((n for n in self.retrieval.nodes if n.id == event), None)
        if node is not None:
            return event_ref(node)
        return self.updates[event].ref if event in self.updates else f"E{event}"

    def updated(self, event: int) -> tuple[RetrievedNode, list[int]] | None:
        """The retrieved event that ``event`` updates, with the events between them on its chain of
        updates (the nearest such event); None when it updates none."""
        later = {n.id: n.superseded_by for n in self.retrieval.nodes} | {
            i: u.superseded_by for i, u in self.updates.items()}
        found = []
        for n in self.retrieval.nodes:
            between, v = [], n.superseded_by
            while v is not None and v != event:   # updates are later events: the chain ends
                between.append(v)
                v = later.get(v)
            if v == event:
                found.append((n, between))
        return min(found, key=lambda f: len(f[1]), default=None)

    @property
    def edges(self) -> list[PathEdge]:
        """Path edges between shown events, in salience order of their target."""
        return [n.reached_by for n in self.nodes if n.reached_by is not None]


def explain(retrieval: Retrieval, top: int, expansions: int, query_time: datetime | None = None,
            signals: tuple[str, ...] = SIGNALS, entity_names: dict[str, str] | None = None,
            updates: dict[int, Update] | None = None) -> Explanation:
    """Keep the ``top`` most salient events and the ``expansions`` most salient events the
    beam search reached from an anchor, plus every event on their paths back to an anchor
    (so each shown event's reason is shown too), and the ``top`` best anchors; ``signals``
    are the rankings the memory fuses (``RetrievalConfig.active_signals``); ``entity_names``
    maps entity keys to their names as written (``entity_names`` below), ``updates`` the
    superseding events the retrieval does not hold (``updates_outside`` below)."""
    if top < 1 or expansions < 0:
        raise ValueError(f"need top >= 1 and expansions >= 0, got top={top}, expansions={expansions}")
    in_context = set(retrieval.context_ids)
    # a memory that ranks nothing lists every event oldest first, and its context keeps the newest
    listed = retrieval.nodes if retrieval.anchors else sorted(retrieval.nodes, key=lambda n: n.id not in in_context)
    rank = {n.id: i for i, n in enumerate(listed, 1)}
    by_id = {n.id: n for n in retrieval.nodes}
    parent = {e.dst: e for e in retrieval.paths}
    anchor_rank = {a.id: i for i, a in enumerate(retrieval.anchors, 1)}
    picked = [n.id for n in listed[:top]] + [n.id for n in retrieval.nodes if n.id in parent][:expansions]
    shown: set[int] = set()
    for v in picked:
        while v not in shown:          # walk up to the anchor the path started from
            shown.add(v)
            if v not in parent:
                break
            v = parent[v].src
    depth: dict[int, int] = {}

    def depth_of(v: int) -> int:
        if v not in depth:
            depth[v] = 0 if v not in parent else depth_of(parent[v].src) + 1
        return depth[v]

    nodes = [ShownNode(by_id[v], rank[v], depth_of(v), anchor_rank.get(v), parent.get(v), v in in_context)
             for v in sorted(shown, key=rank.__getitem__)]
    return Explanation(retrieval, query_time, nodes, retrieval.anchors[:top], signals,
                       len(retrieval.nodes) - len(nodes), dict(entity_names or {}), dict(updates or {}))


def entity_names(store, retrieval: Retrieval) -> dict[str, str]:
    """The entities a retrieval's paths go through: key -> the name as first written in the memory."""
    keys = {via for kind, via in map(split_relation, (e.relation for e in retrieval.paths)) if kind == "entity"}
    return {k: store.entities.surfaces[i] for k in keys if (i := store.entity_id(k)) is not None}


def updates_outside(event: Callable[[int], StoredEvent], retrieval: Retrieval) -> dict[int, Update]:
    """The events that supersede a retrieved event, directly or down its chain of updates, and that
    the retrieval does not hold, by id; ``event`` looks one up (``MagmaMemory.event``)."""
    held = {n.id for n in retrieval.nodes}
    out: dict[int, Update] = {}
    todo = [n.superseded_by for n in retrieval.nodes]
    while todo:
        v = todo.pop()
        if v is None or v in held or v in out:
            continue
        stored = event(v)
        out[v] = Update(stored.source_id or f"E{v}", stored.superseded_by)
        todo.append(stored.superseded_by)
    return out


# The re-ranker (retrieval.rerank, on in magma) reorders the fused candidates before the beam: the list
# is not in fused-score order.
ANCHOR_ORDER = "in the order handed to the beam search (the re-ranker's where it is on)"


def listing_order(retrieval: Retrieval) -> str:
    """The order the views list the retrieved events in."""
    return "by salience" if retrieval.anchors else "the context's first (this memory does not rank events)"


def why_no_anchors(retrieval: Retrieval) -> str:
    """Why a retrieval has no anchors, as the views say it."""
    if retrieval.nodes:
        return "this memory does not rank events"
    if retrieval.time_window is not None:
        return "no event falls in the question's time window"
    return "no event was retrieved"


def event_ref(node: RetrievedNode) -> str:
    """The reference the context uses for an event: its dataset id, else E<id>."""
    return node.source_ids[0] if node.source_ids else f"E{node.id}"


def split_relation(relation: str) -> tuple[str, str | None]:
    """"entity:<name>" -> ("entity", name), "episode:<start>" -> ("episode", start); any other
    relation -> (relation, None)."""
    kind, _, entity = relation.partition(":")
    return kind, entity or None
