"""Store invariants, checked: what a crash, a bad file or a race must never break.

``problems(store)`` lists every violation found (empty when the store is sound):

- counts: every event column, both indexes and the row list have one entry per event;
  the entity lists one per entity; ``by_source`` and ``last_of_stream`` point at the
  right events;
- edges: every endpoint is a valid event (entity edges: a valid entity), weights finite;
- temporal chain: each temporal edge joins an event to the next one of its stream
  (``prev``/``next`` agree, timestamps never go backwards) and every event but a
  stream's first has exactly one;
- causal: no self-loops, no duplicates, no cycle;
- traversal views: the CSR snapshots hold exactly the edges of the edge tensors;
- derived columns: the half-precision scan copy and the chain cosines match the embeddings.
"""
from __future__ import annotations

from collections import Counter
from graphlib import CycleError, TopologicalSorter

import torch

from magma_torch.store.store import MemoryStore


class IntegrityError(RuntimeError):
    """A store that breaks its invariants; the message lists each violation."""


def problems(store: MemoryStore) -> list[str]:
    """Every invariant the store breaks (call with no writer running, or hold ``store.lock``)."""
    with store.lock:
        out = _counts(store)
        if out:  # the checks below index columns by event id
            return out
        return out + _edges(store) + _temporal(store) + _causal(store) + _views(store) + _derived(store)


def _counts(store: MemoryStore) -> list[str]:
    ev, en, n = store.events, store.entities, len(store.events)
    out = [f"events.{name} has {len(col)} rows for {n} events"
           for name, col in (("embeddings", ev.embeddings), ("timestamps", ev.timestamps),
                             ("date_spans", ev.date_spans), ("prev", ev.prev), ("next", ev.next),
                           ("scan_embeddings", ev.scan_embeddings), ("chain_dots", ev.chain_dots))
           if len(col) != n]
    out += [f"{name} holds {size} events, the table {n}"
            for name, size in (("vector index", len(store.vector_index)), ("keyword index", len(store.keyword_index)))
            if size != n]
    m = len(en)
    out += [f"entities.{name} has {len(col)} entries for {m} entities"
            for name, col in (("embeddings", en.embeddings), ("kinds", en.kinds), ("surfaces", en.surfaces))
            if len(col) != m]
    out += [f"source_id {sid!r} maps to event {i}, which has source_id {ev.rows[i].source_id!r}"
            for sid, i in ev.by_source.items() if not 0 <= i < n or ev.rows[i].source_id != sid]
    out += [f"stream {s!r} ends at event {i}, which is of stream {ev.rows[i].stream!r} or not its last"
            for s, i in ev.last_of_stream.items()
            if not 0 <= i < n or ev.rows[i].stream != s or int(ev.next.data[i]) != -1]
    return out


def _edges(store: MemoryStore) -> list[str]:
    n, m, out = len(store.events), len(store.entities), []
    for rel, (src, dst, w) in ((r, store.graph.edges(r)) for r in store.graph.counts()):
        dst_limit = m if rel == "entity" else n
        bad = (src < 0) | (src >= n) | (dst < 0) | (dst >= dst_limit) | ~torch.isfinite(w)
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
    for s, d in zip(src.tolist(), dst.tolist()):
        if int(prev[d]) != s or int(nxt[s]) != d or ev.rows[s].stream != ev.rows[d].stream or ts[s] > ts[d]:
            out.append(f"temporal edge {s} -> {d} does not follow its stream's chain")
    for i in range(len(ev)):
        want = int(prev[i] >= 0)
        if incoming.get(i, 0) != want:
            out.append(f"event {i} has {incoming.get(i, 0)} incoming temporal edges, expected {want}")
    return out


def _causal(store: MemoryStore) -> list[str]:
    src, dst, _ = store.graph.edges("causal")
    pairs = list(zip(src.tolist(), dst.tolist()))
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


def _views(store: MemoryStore) -> list[str]:
    n, m = len(store.events), len(store.entities)
    snap = store.graph.snapshot(n, m)
    counts = store.graph.counts()
    expected = {"event_adj": 2 * (counts["temporal"] + counts["semantic"] + counts["causal"]),
                "event_entity": counts["entity"], "entity_event": counts["entity"]}
    rows = {"event_adj": n, "event_entity": n, "entity_event": m}
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
    if not torch.equal(scan, ev.embeddings.data.to(scan.dtype)):
        out.append(f"events.scan_embeddings is not the {scan.dtype} copy of events.embeddings")
    ids = torch.arange(len(ev), device=ev.prev.data.device)
    if not torch.allclose(ev.chain_dots.data, ev.predecessor_cosines(ids, ev.prev.data), atol=1e-5):
        out.append("events.chain_dots differ from the cosines of each event with its chain predecessors")
    return out
