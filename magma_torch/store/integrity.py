"""Store invariants, checked: what a crash, a bad file or a race must never break.

``problems(store)`` lists every violation found (empty when the store is sound):

- counts: every event column, both indexes and the row list have one entry per event;
  the entity lists one per entity; the stable event ids are unique;
  ``by_source`` and ``last_of_stream`` point at the right events;
- edges: every endpoint is a valid event (entity edges: a valid entity), weights finite;
- temporal chain: each temporal edge joins an event to the next one of its stream
  (``prev``/``next`` agree, timestamps never go backwards) and every event but a
  stream's first has exactly one;
- causal: no self-loops, no duplicates, no cycle;
- supersession: a later event of the same stream (ingest order and time) updates an earlier
  one, at most once per pair;
- episodes: every event is in one episode of its stream, an episode is a run of consecutive
  events of its stream (first .. last, size), the membership edges say the same, the episode
  chain joins each stream's episodes in order, and episode embeddings sum their members';
- traversal views: the CSR snapshots hold exactly the edges of the edge tensors;
- derived columns: the small batches' copy (float32 columns or half-precision rows) and the
  chain cosines match the embeddings.
"""
from __future__ import annotations

from collections import Counter
from graphlib import CycleError, TopologicalSorter
from itertools import pairwise

import torch

from magma_torch.errors import MagmaError
from magma_torch.store.store import MemoryStore


class IntegrityError(MagmaError, RuntimeError):
    """A store that breaks its invariants; the message lists each violation."""


def problems(store: MemoryStore) -> list[str]:
    """Every invariant the store breaks (call with no writer running, or hold ``store.lock``)."""
    with store.lock:
        out = _counts(store)
        if out:  # the checks below index columns by event id
            return out
        return (out + _edges(store) + _temporal(store) + _causal(store) + _supersession(store) + _episodes(store)
                + _views(store) + _derived(store))


def _counts(store: MemoryStore) -> list[str]:
    ev, en, n = store.events, store.entities, len(store.events)
    out = [f"events.{name} has {len(col)} rows for {n} events"
           for name, col in (("embeddings", ev.embeddings), ("timestamps", ev.timestamps),
                             ("date_spans", ev.date_spans), ("prev", ev.prev), ("next", ev.next),
                           ("scan_embeddings", ev.scan_embeddings), ("chain_dots", ev.chain_dots),
                           ("episode", ev.episode))
           if len(col) != n]
    out += [f"{name} holds {size} events, the table {n}"
            for name, size in (("vector index", len(store.vector_index)), ("keyword index", len(store.keyword_index)))
            if size != n]
    p = len(store.episodes)
    out += [f"episodes.{name} has {len(col)} rows for {p} episodes"
            for name, col in (("sums", store.episodes.sums), ("first", store.episodes.first),
                              ("last", store.episodes.last), ("size", store.episodes.size))
            if len(col) != p]
    if len(store.episode_keywords) != p:
        out.append(f"the episode keyword index holds {len(store.episode_keywords)} episodes, the table {p}")
    m = len(en)
    out += [f"entities.{name} has {len(col)} entries for {m} entities"
            for name, col in (("embeddings", en.embeddings), ("kinds", en.kinds), ("surfaces", en.surfaces))
            if len(col) != m]
    # unique, not increasing: a backfilled event takes a fresh id at its place among older ones
    if len(ev.ids) != n or len(set(ev.ids)) != n or any(ev.row_of.get(i) != r for r, i in enumerate(ev.ids)):
        out.append(f"the {len(ev.ids)} stable event ids of {n} events are not unique, or row_of does not map them")
    out += [f"source_id {sid!r} maps to event {i}, which has source_id {ev.rows[i].source_id!r}"
            for sid, i in ev.by_source.items() if not 0 <= i < n or ev.rows[i].source_id != sid]
    out += [f"stream {s!r} ends at event {i}, which is of stream {ev.rows[i].stream!r} or not its last"
            for s, i in ev.last_of_stream.items()
            if not 0 <= i < n or ev.rows[i].stream != s or int(ev.next.data[i]) != -1]
    return out


def _edges(store: MemoryStore) -> list[str]:
    n, m, p, out = len(store.events), len(store.entities), len(store.episodes), []
    for rel, (src, dst, w) in ((r, store.graph.edges(r)) for r in store.graph.counts()):
        src_limit = p if rel == "episode_chain" else n
        dst_limit = {"entity": m, "episode": p, "episode_chain": p}.get(rel, n)
        bad = (src < 0) | (src >= src_limit) | (dst < 0) | (dst >= dst_limit) | ~torch.isfinite(w)
        if bad.any():
            i = int(bad.nonzero()[0])
            out.append(f"{rel} edge {i} ({int(src[i])} -> {int(dst[i])}, weight {float(w[i])}) is invalid; "
                       f"{int(bad.sum())} such edges")
    return out


def _temporal(store: MemoryStore) -> list[str]:
    ev, out = store.events, []
    src, dst, _ = store.graph.edges("temporal")
    prev, nxt, ts = ev.prev.data.cpu(), ev.next.data.cpu(), ev.timestamps.data.cpu()
    incoming = Counter(dst.tolist())
    for s, d in zip(src.tolist(), dst.tolist(), strict=True):
        if int(prev[d]) != s or int(nxt[s]) != d or ev.rows[s].stream != ev.rows[d].stream or ts[s] > ts[d]:
            out.append(f"temporal edge {s} -> {d} does not follow its stream's chain")
    for i in range(len(ev)):
        want = int(prev[i] >= 0)
        if incoming.get(i, 0) != want:
            out.append(f"event {i} has {incoming.get(i, 0)} incoming temporal edges, expected {want}")
    return out


def _causal(store: MemoryStore) -> list[str]:
    src, dst, _ = store.graph.edges("causal")
    pairs = list(zip(src.tolist(), dst.tolist(), strict=True))
    out = [f"causal self-loop on event {s}" for s, d in pairs if s == d]
    out += [f"causal edge {p[0]} -> {p[1]} appears {k} times" for p, k in Counter(pairs).items() if k > 1]
    ts = TopologicalSorter()
    for s, d in pairs:
        ts.add(d, s)
    try:
        ts.prepare()
    except CycleError as err:
        out.append(f"causal cycle through events {err.args[1]}")
    return out


def _supersession(store: MemoryStore) -> list[str]:
    src, dst, _ = store.graph.edges("supersedes")
    rows, pairs = store.events.rows, list(zip(src.tolist(), dst.tolist(), strict=True))
    out = [f"supersession {s} -> {d}: not a later event of the same stream" for s, d in pairs
           if s <= d or rows[s].stream != rows[d].stream or rows[s].timestamp < rows[d].timestamp]
    out += [f"supersession {p[0]} -> {p[1]} appears {k} times" for p, k in Counter(pairs).items() if k > 1]
    return out


def _episodes(store: MemoryStore) -> list[str]:
    ev, ep, out = store.events, store.episodes, []
    episode, nxt = ev.episode.data.cpu().tolist(), ev.next.data.cpu().tolist()
    first, last, size = (col.data.cpu().tolist() for col in (ep.first, ep.last, ep.size))
    p = len(ep)
    bad = [i for i, e in enumerate(episode) if not 0 <= e < p or ev.rows[i].stream != ep.streams[e]]
    out += [f"event {i} is in episode {episode[i]}, not one of its stream's" for i in bad[:5]]
    if bad:
        return out
    members = Counter(episode)
    for e in range(p):
        run, cur = [], first[e]
        while cur >= 0 and cur < len(episode) and episode[cur] == e:
            run.append(cur)
            cur = nxt[cur]
        if not run or run[-1] != last[e] or len(run) != size[e] or members[e] != size[e]:
            out.append(f"episode {e} is not the run of its stream's events {first[e]}..{last[e]} ({size[e]} events)")
    src, dst, _ = store.graph.edges("episode")
    if sorted(zip(src.tolist(), dst.tolist(), strict=True)) != list(enumerate(episode)):
        out.append("the event -> episode edges differ from the events' episodes")
    order: dict[str, list[int]] = {}
    for e in range(p):
        order.setdefault(ep.streams[e], []).append(e)
    want = sorted((a, b) for eps in order.values() for a, b in pairwise(eps))
    src, dst, _ = store.graph.edges("episode_chain")
    if sorted(zip(src.tolist(), dst.tolist(), strict=True)) != want:
        out.append("the episode chain does not join each stream's episodes in order")
    sums = torch.zeros_like(ep.sums.data).index_add_(0, ev.episode.data, ev.embeddings.data.to(ep.sums.data.dtype))
    if not torch.allclose(sums, ep.sums.data, atol=1e-4):
        out.append("episodes.sums differ from the sums of their events' embeddings")
    return out


def _views(store: MemoryStore) -> list[str]:
    n, m, p = len(store.events), len(store.entities), len(store.episodes)
    snap = store.graph.snapshot(n, m, p)
    counts = store.graph.counts()
    expected = {"event_adj": 2 * (counts["temporal"] + counts["semantic"] + counts["causal"]),
                "event_entity": counts["entity"], "entity_event": counts["entity"],
                "event_episode": counts["episode"], "episode_event": counts["episode"]}
    rows = {"event_adj": n, "event_entity": n, "entity_event": m, "event_episode": n, "episode_event": p}
    out = []
    for name, want in expected.items():
        view = getattr(snap, name)
        got = int(view.degree(torch.arange(rows[name], device=store.device)).sum())
        if got != want:
            out.append(f"traversal view {name} holds {got} edges, the edge tensors {want}")
    return out


def check(store: MemoryStore) -> None:
    """Raise ``IntegrityError`` listing every violated invariant."""
    found = problems(store)
    if found:
        raise IntegrityError(f"{len(found)} integrity problem(s): " + "; ".join(found[:20])
                             + (" ..." if len(found) > 20 else ""))


def _derived(store: MemoryStore) -> list[str]:
    ev, out = store.events, []
    scan = ev.scan_embeddings.data
    if ev.scan_packed:
        if not torch.equal(scan.unpacked(), ev.embeddings.data[:scan.packed_rows].half().float()):
            out.append("events.scan_embeddings' packed blocks are not the float16 copy of events.embeddings")
    elif not torch.equal(scan.T if ev.scan_columns else scan, ev.embeddings.data.to(scan.dtype)):
        out.append(f"events.scan_embeddings is not the {scan.dtype} copy of events.embeddings")
    ids = torch.arange(len(ev), device=ev.prev.data.device)
    if not torch.allclose(ev.chain_dots.data, ev.predecessor_cosines(ids, ev.prev.data), atol=1e-5):
        out.append("events.chain_dots differ from the cosines of each event with its chain predecessors")
    return out
