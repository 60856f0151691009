"""A captured store without some events, or with some inserted: what ``MagmaMemory.forget``,
``update`` and a backfilling ``add`` rebuild from.

``without(saved, drop, detach)`` returns the capture with the rows ``drop`` removed and every
row renumbered densely (old row -> new row in ``Compacted.new_row``, -1 for a removed one):

- events: their columns lose the rows; the temporal chain (``prev``/``next`` and the temporal
  edges) is re-linked around the gap, each stream's remaining events in order;
- semantic and causal edges touching a removed row are dropped. A causal link through a
  removed event is not bridged: "a caused b" and "b caused c" do not say that a caused c,
  and a bridged edge would keep a trace of what was forgotten;
- entity mentions of removed rows are dropped, and so is an entity left with no mention;
- episodes keep their members' order; an episode left empty is dropped, one that lost
  members gets its first/last/size and summed embedding recomputed (its keyword document is
  rebuilt from its members' tokens on load); the episode chain is re-linked per stream.

The rows ``detach`` stay but lose their semantic, causal and entity edges (an update
re-derives them), and their episodes' sums are recomputed from the (new) embeddings.
Stable event ids (``events.ids``) and ``next_id`` are kept, so ids users hold stay valid.

``relinked(c, rel, rows, edges)`` replaces the ``rel`` edges out of some rows (the supersessions
a lifecycle operation derives again for the streams it touched).

``mentioned(c, rows, mentions, new, vectors)`` replaces the entity mentions of some rows (those a
lifecycle operation derives again), adding the entities they name first and dropping those left
with no mention.

``cleared(c, rows)`` drops what the consolidation of some rows wrote (their causal and supersedes
edges and entity mentions), for those rows to be consolidated again.

``inserted(saved, rows, embeddings, ids, placed)`` is the same rebuild with events added at
their places (``Placement``: the order of all rows, each new event's episode): the chain
and the episodes are re-derived around them as around a gap, and episodes are numbered in
the order of their first event, so an episode a backfilled event opens takes its place in
its stream's episode chain.
"""
from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, replace

import torch

from magma_torch.store.persistence import SavedStore
from magma_torch.store.tables import date_span


@dataclass(frozen=True)
class Compacted:
    saved: SavedStore
    new_row: list[int]           # old row -> new row, -1: removed; past the old rows: the inserted events'
    entities: list[str]          # names of the entities removed (left with no mention)
    episodes: int                # episodes removed (left with no event)


@dataclass(frozen=True)
class Placement:
    """Where inserted events go (``magma_torch.ingest.backfill.place``)."""

    order: list[int]             # the rebuilt rows: old row i, or len(old rows) + j for inserted event j
    episode: list[int]           # per inserted event: its episode (an old one, or one of the new ones)
    new_episodes: int            # episodes the inserted events open, numbered after the old ones


def without(saved: SavedStore, drop: Collection[int], detach: Collection[int] = ()) -> Compacted:
    gone = set(drop)
    return _rebuilt(saved, [i for i in range(len(saved.events)) if i not in gone], detach)


def inserted(saved: SavedStore, rows: Sequence, embeddings: torch.Tensor, ids: Sequence[int],
             placed: Placement) -> Compacted:
    """The capture with events ``rows`` (stable ids ``ids``) inserted as ``placed`` says; they have
    no derived edges yet (the caller links them)."""
    t, n, k = saved.tensors, len(saved.events), len(rows)
    grown = {"events.embeddings": embeddings.detach().cpu().to(t["events.embeddings"].dtype),
             "events.timestamps": torch.tensor([r.timestamp for r in rows], dtype=torch.float64),
             "events.date_spans": torch.tensor([date_span(r) for r in rows], dtype=torch.float64).reshape(-1, 2),
             "events.ids": torch.tensor(list(ids), dtype=torch.long),
             "events.episode": torch.tensor(placed.episode, dtype=torch.long)}
    tensors = {**t, **{c: torch.cat([t[c], v]) for c, v in grown.items()}}
    # Rows for the episodes they open: first/last/size and the sums are derived again from the members.
    for c in ("first", "last", "size", "sums"):
        col = t[f"episodes.{c}"]
        tensors[f"episodes.{c}"] = torch.cat([col, col.new_zeros((placed.new_episodes, *col.shape[1:]))])
    counts = {**saved.state["counts"], "next_id": max([saved.state["counts"].get("next_id", n), *(i + 1 for i in ids)])}
    grown_capture = replace(saved, tensors=tensors, events=[*saved.events, *rows],
                            state={**saved.state, "counts": counts})
    return _rebuilt(grown_capture, placed.order, range(n, n + k))


def relinked(c: Compacted, rel: str, rows: Collection[int], edges: Sequence[tuple[int, int, float]]) -> Compacted:
    """``c`` with its ``rel`` edges out of ``rows`` replaced by ``edges`` (src, dst, weight)."""
    t = c.saved.tensors
    s, d, w = edges_of(t, rel)
    keep = ~torch.isin(s, torch.tensor(sorted(rows), dtype=torch.long))
    new_s, new_d, new_w = (torch.tensor(col, dtype=dt) for col, dt in
                           zip(zip(*edges, strict=True) if edges else ([], [], []), (torch.long, torch.long, w.dtype),
                               strict=True))
    return _with_edges(c, rel, torch.cat([s[keep], new_s]), torch.cat([d[keep], new_d]), torch.cat([w[keep], new_w]))


def mentioned(c: Compacted, rows: Collection[int], mentions: Sequence[tuple[int, object]], new: Sequence,
              vectors: torch.Tensor | None) -> Compacted:
    """``c`` with the entity mentions of ``rows`` replaced by ``mentions`` (row, mention with
    ``name``); ``new`` (mentions with ``name``, ``kind``, ``surface``) are entities added for the
    names not yet known, ``vectors`` their embeddings. An entity that had mentions and has none
    left is dropped and named in ``Compacted.entities``."""
    saved, t = c.saved, c.saved.tensors
    names = [*saved.entities["names"], *(m.name for m in new)]
    index = {name: i for i, name in enumerate(names)}
    s, d, w = edges_of(t, "entity")
    keep = ~torch.isin(s, torch.tensor(sorted(rows), dtype=torch.long))
    src = torch.cat([s[keep], torch.tensor([r for r, _ in mentions], dtype=torch.long)])
    dst = torch.cat([d[keep], torch.tensor([index[m.name] for _, m in mentions], dtype=torch.long)])
    weight = torch.cat([w[keep], torch.ones(len(mentions), dtype=w.dtype)])
    grown = {"names": names, "kinds": [*saved.entities["kinds"], *(m.kind for m in new)],
             "surfaces": [*saved.entities["surfaces"], *(m.surface for m in new)]}
    emb = t["entities.embeddings"]
    if new:
        emb = torch.cat([emb, vectors.detach().cpu().to(emb.dtype)])
    had = torch.cat([torch.bincount(d, minlength=len(saved.entities["names"])), torch.ones(len(new), dtype=torch.long)])
    kept = ~((had > 0) & (torch.bincount(dst, minlength=len(names)) == 0))
    ent_row = torch.full((len(names),), -1, dtype=torch.long)
    ent_row[kept] = torch.arange(int(kept.sum()))
    idx = kept.nonzero().squeeze(1).tolist()
    out = {**t, **_as_edges("entity", src, ent_row[dst], weight), "entities.embeddings": emb[kept]}
    counts = {**saved.state["counts"], "entities": len(idx),
              "edges": {**saved.state["counts"]["edges"], "entity": int(src.numel())}}
    entities = {k: [v[i] for i in idx] for k, v in grown.items()}
    gone = [names[i] for i in (~kept).nonzero().squeeze(1).tolist()]
    restated = replace(saved, tensors=out, entities=entities, state={**saved.state, "counts": counts})
    return replace(c, saved=restated, entities=[*c.entities, *gone])


def cleared(c: Compacted, rows: Collection[int]) -> Compacted:
    """``c`` without the causal and supersedes edges touching ``rows`` (either end) and without their
    entity mentions: what their consolidation wrote, for rows that are to be consolidated again.
    An entity left with no mention goes, but is not named in ``Compacted.entities`` (nothing was
    forgotten: consolidation that names it again makes it again)."""
    if not rows:
        return c
    picked, unlinked = torch.tensor(sorted(rows), dtype=torch.long), c
    for rel in ("causal", "supersedes"):
        s, d, w = edges_of(unlinked.saved.tensors, rel)
        keep = ~(torch.isin(s, picked) | torch.isin(d, picked))
        unlinked = _with_edges(unlinked, rel, s[keep], d[keep], w[keep])
    return replace(mentioned(unlinked, rows, [], [], None), entities=c.entities)


def uncaused(c: Compacted, rows: Collection[int]) -> Compacted:
    """``c`` without the causal edges into ``rows`` (their effect end): links to be drawn again."""
    if not rows:
        return c
    s, d, w = edges_of(c.saved.tensors, "causal")
    keep = ~torch.isin(d, torch.tensor(sorted(rows), dtype=torch.long))
    return _with_edges(c, "causal", s[keep], d[keep], w[keep])


def _rebuilt(saved: SavedStore, order: Sequence[int], detach: Collection[int]) -> Compacted:
    """The capture's rows ``order`` (in that order: each stream's in stream order), renumbered densely;
    ``detach`` rows lose their derived edges."""
    t, n = saved.tensors, len(saved.events)
    keep, detach_t = torch.tensor(list(order), dtype=torch.long), torch.tensor(sorted(detach), dtype=torch.long)
    alive = torch.zeros(n, dtype=torch.bool)
    alive[keep] = True
    drop_t = (~alive).nonzero().squeeze(1)
    new_row = torch.full((n,), -1, dtype=torch.long)
    new_row[keep] = torch.arange(keep.numel())
    rows = [saved.events[i] for i in keep.tolist()]
    out = {f"events.{c}": t[f"events.{c}"][keep] for c in ("embeddings", "timestamps", "date_spans", "ids")}
    prev = _chain(rows)
    out["events.prev"], out["events.next"] = prev, _successors(prev)
    free = alive.clone()               # rows that keep their derived edges
    free[detach_t] = False
    for rel in ("semantic", "causal", "supersedes"):   # links of forgotten or corrected events go
        s, d, w = edges_of(t, rel)
        ok = free[s] & free[d]
        out.update(_as_edges(rel, new_row[s[ok]], new_row[d[ok]], w[ok]))
    entities, gone_entities = _entities(saved, out, free, new_row)
    episodes, gone_episodes = _episodes(t, out, keep, drop_t, detach_t, rows)
    temporal = (prev >= 0).nonzero().squeeze(1)
    out.update(_as_edges("temporal", prev[temporal], temporal))
    out.update(episodes)
    counts = {**saved.state["counts"], "events": len(rows), "entities": len(entities["names"]),
              "episodes": int(out["episodes.first"].numel()),
              "edges": {rel: int(out[f"graph.{rel}.src"].numel()) for rel in saved.state["counts"]["edges"]}}
    compacted = SavedStore(None, out, rows, entities, {**saved.state, "counts": counts})
    return Compacted(compacted, new_row.tolist(), gone_entities, gone_episodes)


def edges_of(t: dict, rel: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A capture's ``rel`` edges: (src, dst, weight)."""
    return t[f"graph.{rel}.src"], t[f"graph.{rel}.dst"], t[f"graph.{rel}.weight"]


def _with_edges(c: Compacted, rel: str, src: torch.Tensor, dst: torch.Tensor, weight: torch.Tensor) -> Compacted:
    """``c`` with its ``rel`` edges replaced by (src, dst, weight), its edge count following."""
    counts = c.saved.state["counts"]
    counts = {**counts, "edges": {**counts["edges"], rel: int(src.numel())}}
    return replace(c, saved=replace(c.saved, tensors={**c.saved.tensors, **_as_edges(rel, src, dst, weight)},
                                    state={**c.saved.state, "counts": counts}))


def _as_edges(rel: str, src: torch.Tensor, dst: torch.Tensor, weight: torch.Tensor | None = None) -> dict:
    weight = torch.ones(src.numel(), dtype=torch.float32) if weight is None else weight
    return {f"graph.{rel}.src": src, f"graph.{rel}.dst": dst, f"graph.{rel}.weight": weight}


def _chain(rows) -> torch.Tensor:
    """Each row's predecessor in its stream (rows are in stream order within a stream), -1 at a start."""
    last: dict[str, int] = {}
    prev = []
    for i, r in enumerate(rows):
        prev.append(last.get(r.stream, -1))
        last[r.stream] = i
    return torch.tensor(prev, dtype=torch.long)


def _successors(prev: torch.Tensor) -> torch.Tensor:
    nxt = torch.full_like(prev, -1)
    linked = (prev >= 0).nonzero().squeeze(1)
    nxt[prev[linked]] = linked
    return nxt


def _entities(saved: SavedStore, out: dict, free: torch.Tensor, new_row: torch.Tensor) -> tuple[dict, list[str]]:
    """Mentions of the remaining, not detached rows; entities left with none are dropped."""
    s, d, w = edges_of(saved.tensors, "entity")
    ok = free[s]
    m = len(saved.entities["names"])
    before = torch.bincount(d, minlength=m)
    after = torch.bincount(d[ok], minlength=m)
    kept = ~((before > 0) & (after == 0))
    ent_row = torch.full((m,), -1, dtype=torch.long)
    ent_row[kept] = torch.arange(int(kept.sum()))
    out.update(_as_edges("entity", new_row[s[ok]], ent_row[d[ok]], w[ok]))
    out["entities.embeddings"] = saved.tensors["entities.embeddings"][kept]
    idx = kept.nonzero().squeeze(1).tolist()
    entities = {k: [v[i] for i in idx] for k, v in saved.entities.items()}
    gone = [saved.entities["names"][i] for i in (~kept).nonzero().squeeze(1).tolist()]
    return entities, gone


def _episodes(t: dict, out: dict, keep: torch.Tensor, drop: torch.Tensor, detach: torch.Tensor,
              rows) -> tuple[dict, int]:
    """The remaining rows' episodes, renumbered in the order of their first event (the order they
    were opened in, unless an inserted event opened one); sums recomputed where members left,
    changed or came."""
    old_of = t["events.episode"][keep]
    p, k = t["episodes.first"].numel(), keep.numel()
    ids = torch.arange(k)
    old_first = torch.full((p,), k, dtype=torch.long).scatter_reduce(0, old_of, ids, "amin")
    present = old_first < k
    ranked = present.nonzero().squeeze(1)
    ranked = ranked[old_first[ranked].argsort()]
    q = ranked.numel()
    ep_row = torch.full((p,), -1, dtype=torch.long)
    ep_row[ranked] = torch.arange(q)
    episode = ep_row[old_of]
    first = old_first[ranked]
    last = torch.full((q,), -1, dtype=torch.long).scatter_reduce(0, episode, ids, "amax")
    size = torch.bincount(episode, minlength=q)
    sums = t["episodes.sums"][ranked].clone()
    touched = ep_row[t["events.episode"][torch.cat([drop, detach])]]
    touched = torch.unique(touched[touched >= 0])
    if touched.numel():
        emb = out["events.embeddings"]
        redo = torch.isin(episode, touched)
        fresh = torch.zeros_like(sums).index_add_(0, episode[redo], emb[redo].to(sums.dtype))
        sums[touched] = fresh[touched]
    streams = [rows[f].stream for f in first.tolist()]
    last_of: dict[str, int] = {}
    chain = []
    for e, stream in enumerate(streams):
        if stream in last_of:
            chain.append((last_of[stream], e))
        last_of[stream] = e
    cs, cd = (torch.tensor(c, dtype=torch.long) for c in (zip(*chain, strict=True) if chain else ([], [])))
    eps = {"events.episode": episode, "episodes.first": first, "episodes.last": last, "episodes.size": size,
           "episodes.sums": sums, **_as_edges("episode", ids, episode), **_as_edges("episode_chain", cs, cd)}
    return eps, p - q
