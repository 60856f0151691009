"""Forget, update and backfill: taking events out of a memory, correcting one, or inserting some
in the past, in every structure.

Each rebuilds the store from a capture of itself (``store.compact``) and swap the rebuilt
contents in under the store lock: a reader's snapshot keeps the old objects, which are never
written again, and every snapshot taken after the swap has no trace of what was removed.
Rows are renumbered densely; the stable event ids users hold (``EventTable.ids``) are kept,
and a forgotten id is never given out again.

A backfill (``add(..., backfill=True)`` with events older than their stream's last one) is the
same rebuild with the events inserted at their places (``backfill_rows``).

Each changes what the later events of the streams it touches were consolidated with. A
consolidator that restates its links itself (the heuristic: ``restate_facts``) derives them again
during the rebuild. Any other (the LLM consolidator, whose answers depend on the neighbourhood each
event was shown) has the touched streams' events from the first changed place on asked again: the
rebuild drops what their consolidation wrote (``compact.cleared``) and they are queued again, in
stream order, for the slow path (``_asked_again``); the LLM is never called inside the operation.
Once the queue drains their links are those of an in-order ingest of the remaining events.

The write-ahead-log records (``forget_record``, ``update_record``) name events by stable id,
so a replay finds the same rows the original call found; a backfill's record
(``PreparedBatch.to_record``) holds the ids it gives out.
"""
from __future__ import annotations

import difflib
import numbers
from collections.abc import Iterable
from dataclasses import asdict, dataclass

import torch

from magma_torch.errors import MagmaError
from magma_torch.events import UnknownEventError
from magma_torch.ingest import backfill, fast_path
from magma_torch.store import compact, persistence
from magma_torch.store.tables import EventRow, date_span
from magma_torch.text.temporal import parse_timestamp


class ForgetError(MagmaError, ValueError):
    """A ``forget`` refused before anything is forgotten: no filter, a speaker or entity the memory
    does not hold, an unreadable ``before``; the message names it."""


@dataclass(frozen=True)
class Forgotten:
    """What ``MagmaMemory.forget`` removed."""

    ids: tuple[int, ...]          # the forgotten events' ids, ascending
    entities: tuple[str, ...]     # entity nodes left with no event, removed with them
    episodes: int                 # episode nodes left with no event, removed with them


def select(store, ids=None, source_ids=None, speaker: str | None = None, entity: str | None = None,
           before=None) -> list[int]:
    """Rows of the events ``forget`` is asked for: those named by ``ids`` or ``source_ids`` (every
    event when neither is given) that also match each of ``speaker``, ``entity`` (mention an
    entity node of that name) and ``before`` (timestamp strictly earlier). Unknown ids, source
    ids, speakers or entities raise, naming them (the caller has changed nothing yet)."""
    if ids is None and source_ids is None and speaker is None and entity is None and before is None:
        raise ForgetError("forget() needs ids, source_ids, speaker, entity or before (it never forgets everything "
                         "by default)")
    ev = store.events
    rows = set(range(len(ev)))
    if ids is not None or source_ids is not None:
        ids, source_ids = _as_list(ids), _as_list(source_ids)
        bad_ids = [i for i in ids if not is_event_id(i) or i not in ev.row_of]
        bad_sources = [s for s in source_ids if not isinstance(s, str) or s not in ev.by_source]   # a list: unhashable
        if bad_ids or bad_sources:
            what = "; ".join(x for x in (f"ids {bad_ids}" if bad_ids else "",
                                         f"source_ids {bad_sources}" if bad_sources else "") if x)
            raise UnknownEventError(f"forget: this memory holds no event with {what}; nothing was forgotten")
        rows = {ev.row_of[i] for i in ids} | {ev.by_source[s] for s in source_ids}
    if speaker is not None:
        _require_name("speaker", speaker)
        if speaker not in ev.speaker_ids:
            raise ForgetError(f"forget: no event has speaker {speaker!r}; nothing was forgotten")
        rows = {r for r in rows if ev.rows[r].speaker == speaker}
    if entity is not None:
        _require_name("entity", entity)
        found = entities_named(store.entities, entity)
        if not found:
            close = difflib.get_close_matches(" ".join(entity.split()).casefold(), store.entities.names, n=5)
            raise ForgetError(f"forget: no entity named {entity!r}" + (f" (close: {close})" if close else "")
                             + "; nothing was forgotten")
        src, dst, _ = store.graph.edges("entity")
        rows &= set(src[torch.isin(dst, torch.tensor(found, device=dst.device))].tolist())
    if before is not None:
        try:
            # as add stores it: wall clock, offset dropped
            when = fast_path.as_utc(parse_timestamp(before)).timestamp()
        except ValueError as err:
            raise ForgetError(f"forget: before: {err}; nothing was forgotten") from None
        rows = {r for r in rows if ev.rows[r].timestamp < when}
    return sorted(rows)


def _require_name(what: str, value) -> None:
    """A ``speaker`` or ``entity`` filter that is no string raises ForgetError (before: a list as speaker was a
    TypeError, unhashable, from the lookup)."""
    if not isinstance(value, str):
        raise ForgetError(f"forget: {what} must be a name (a string), not a {type(value).__name__}: {value!r}; "
                          "nothing was forgotten")


def entities_named(entities, name: str) -> list[int]:
    """Entity nodes named ``name``: its canonical name ("paris", "sock"), or else that name or the
    form first written ("Paris", "socks") with case and spacing aside."""
    if name in entities.by_name:
        return [entities.by_name[name]]
    want = " ".join(name.split()).casefold()
    return [i for i, (canonical, written) in enumerate(zip(entities.names, entities.surfaces, strict=True))
            if want in (canonical.casefold(), " ".join(written.split()).casefold())]


def _as_list(x) -> list:
    """``x`` as a list: None is none; a string, a number (a NumPy integer id too) or anything else
    not iterable is one value (a wrong one is then named as unknown)."""
    if x is None:
        return []
    return [x] if isinstance(x, (str, bytes, numbers.Number)) or not isinstance(x, Iterable) else list(x)


def is_event_id(x) -> bool:
    """An integer that is not a bool: the shape of an event id."""
    return isinstance(x, numbers.Integral) and not isinstance(x, bool)


def forget_rows(mem, rows: list[int]) -> Forgotten:
    """Remove events ``rows`` (caller: ingest lock, worker paused, store lock)."""
    ev = mem.store.events
    ids = tuple(sorted(ev.ids[r] for r in rows))
    streams = {ev.rows[r].stream for r in rows}
    c, again = _rebuild(mem, rows, streams)
    mem.worker.renumber(c.new_row, requeue=again)
    return Forgotten(ids, tuple(c.entities), c.episodes)


def update_row(mem, row: int, new: EventRow, embedding: torch.Tensor) -> int:
    """Give event ``row`` a revised row and embedding; its semantic, causal and entity edges are
    derived again (semantic now, the others by the slow path it is queued for again), and so are
    the semantic edges of the later events whose nearest earlier events it may join or leave
    (and, with a consolidator that does not restate its links, the consolidation of the later
    events of its stream: ``_asked_again``). Returns its row (unchanged: an update keeps the
    event's place). Same locks as ``forget_rows``."""
    store = mem.store
    later = _nearer_or_linked(store.events.embeddings.data, store.graph.edges("semantic"), [row], [embedding],
                              mem.fast_cfg)
    c, again = _rebuild(mem, [], {new.stream}, detach=[row], replaced={row: (new, embedding)}, unlinked=later)
    for r in [row, *later]:   # each by itself: the rows need not be consecutive
        fast_path.link_semantic(store, [r], store.events.embeddings.data[r][None], mem.fast_cfg)
    mem.worker.renumber(c.new_row, requeue=sorted({row, *again}))
    return row


def _nearer_or_linked(embeddings: torch.Tensor, semantic: tuple[torch.Tensor, ...], rows: list[int],
                      vectors: list[torch.Tensor], cfg) -> list[int]:
    """The rows, other than ``rows``, whose k nearest earlier events may change when each of ``rows``
    gets its vector of ``vectors`` (``embeddings`` [n, d] and the ``semantic`` edges (src, dst, weight)
    as they stand): those linked to one of them now, and the later ones it comes within reach of
    (above ``theta_sim`` and at least as close as their farthest neighbour, or they have fewer than k)."""
    n = embeddings.shape[0]
    src, dst, weight = (x.cpu() for x in semantic)
    degree = torch.bincount(src, minlength=n)
    farthest = torch.full((n,), float("inf")).scatter_reduce(0, src, weight.float(), "amin")
    hit = torch.zeros(n, dtype=torch.bool)
    for row, vector in zip(rows, vectors, strict=True):
        later = torch.arange(row + 1, n)
        scores = (embeddings[row + 1:n] @ vector.reshape(-1).to(embeddings)).float().cpu()
        hit[later[(scores > cfg.theta_sim) & ((degree[later] < cfg.semantic_k) | (scores >= farthest[later]))]] = True
        hit[src[dst == row]] = True
    hit[torch.tensor(rows, dtype=torch.long)] = False
    return hit.nonzero().squeeze(1).tolist()


def backfill_rows(mem, batch: fast_path.PreparedBatch) -> list[int]:
    """Insert the batch's events at their places in their streams (``ingest.backfill``), with fresh
    ids; each gets semantic edges to its nearest earlier events, the later events whose nearest
    earlier events it joins get theirs again, and it is queued for consolidation (with a
    consolidator that does not restate its links, so are the later events of its stream:
    ``_asked_again``). Returns their rows, in batch order. Same locks as ``forget_rows``."""
    store, n = mem.store, len(mem.store)
    ids = range(store.events.next_id, store.events.next_id + len(batch.rows))
    saved, tokens = _captured(mem)
    placed = backfill.place(saved.events, saved.tensors["events.episode"].tolist(),
                            saved.tensors["episodes.first"].numel(), batch.rows, mem.fast_cfg.episodes)
    c = compact.inserted(saved, batch.rows, batch.embeddings, ids, placed)
    rows = c.new_row[n:]
    # later events the new ones come within reach of link again, as if they had come in order
    t = c.saved.tensors
    later = _nearer_or_linked(t["events.embeddings"], compact.edges_of(t, "semantic"), rows,
                              list(batch.embeddings), mem.fast_cfg)
    c = compact.relinked(c, "semantic", later, [])
    tokens += store.keyword_index.tokenize([fast_path.embed_text(r, mem.fast_cfg) for r in batch.rows])
    firsts: dict[str, int] = {}
    for r, j in sorted(zip(rows, batch.rows, strict=True)):
        firsts.setdefault(j.stream, r)
    again = _asked_again(mem, c, firsts)
    nxt = c.saved.tensors["events.next"].tolist()
    redrawn = _redrawn(mem, c, [nxt[r] for r in rows])
    _apply(mem, c, tokens, set(), {r.stream for r in batch.rows}, again, redrawn)
    for r in sorted([*rows, *later]):   # each by itself: the rows need not be consecutive
        fast_path.link_semantic(store, [r], store.events.embeddings.data[r][None], mem.fast_cfg)
    mem.worker.renumber(c.new_row, requeue=sorted({*rows, *again, *redrawn}))
    return rows


def _rebuild(mem, drop: list[int], streams: set[str], detach: Iterable[int] = (),
             replaced: dict[int, tuple[EventRow, torch.Tensor]] | None = None,
             unlinked: Iterable[int] = ()) -> tuple[compact.Compacted, list[int]]:
    """The store without rows ``drop``, with rows ``replaced`` and without the semantic edges out of
    rows ``unlinked`` (to be linked again), swapped in (``_apply``); and the rows (rebuilt numbering)
    to be consolidated again from the first dropped or replaced place of each stream on
    (``_asked_again``)."""
    store = mem.store
    saved, tokens = _captured(mem)
    t = saved.tensors
    for row, (new, emb) in (replaced or {}).items():
        saved.events[row] = new
        t["events.embeddings"][row] = emb.detach().cpu().to(t["events.embeddings"].dtype)
        t["events.timestamps"][row] = new.timestamp
        t["events.date_spans"][row] = torch.tensor(date_span(new), dtype=torch.float64)
        tokens[row] = store.keyword_index.tokenize([fast_path.embed_text(new, mem.fast_cfg)])[0]
    c = compact.relinked(compact.without(saved, drop, detach), "semantic", unlinked, [])
    changed: dict[str, int] = {}            # each stream's first changed place: the rows in order
    for i in sorted({*drop, *(replaced or ())}):
        changed.setdefault(saved.events[i].stream, i)
    firsts: dict[str, int] = {}             # ... and the first row there on that remains, renumbered
    for i, r in enumerate(saved.events):
        if r.stream in changed and i >= changed[r.stream] and c.new_row[i] >= 0:
            firsts.setdefault(r.stream, c.new_row[i])
    again = _asked_again(mem, c, firsts)
    old_next, after = t["events.next"].tolist(), []   # the first remaining event after each changed one
    for i in {*drop, *(replaced or ())}:
        j = old_next[i]
        while j >= 0 and c.new_row[j] < 0:
            j = old_next[j]
        after += [c.new_row[j]] if j >= 0 else []
    redrawn = _redrawn(mem, c, after)
    return _apply(mem, c, tokens, set(drop) | set(replaced or ()), streams, again, redrawn), sorted({*again, *redrawn})


def _apply(mem, c: compact.Compacted, tokens: list[list[str]], gone: set[int], streams: set[str],
           again: list[int] = (), redrawn: list[int] = ()) -> compact.Compacted:
    """Tell the consolidator what changed, derive the supersessions and entity mentions of ``streams``
    again, drop what the consolidation of rows ``again`` wrote and the causal links into rows ``redrawn``
    (both are queued again) and swap the rebuilt store in; returns the capture adopted."""
    _tell_consolidator(mem, c, gone, streams if gone else set())   # a backfill removes no text
    c = compact.cleared(_mentions_restated(mem, _restated(mem, c, streams), streams), again)
    c = compact.uncaused(c, redrawn)
    _adopt(mem, c, tokens)
    return c


def _asked_again(mem, c: compact.Compacted, firsts: dict[str, int]) -> list[int]:
    """The rows (``c``'s numbering) to be consolidated again: with a consolidator that does not
    restate its links itself (no ``restate_facts``: the LLM consolidator), every event of each
    stream of ``firsts`` from its row there on, consolidated or not, in stream order; none with
    the heuristic (``_restated``) or without a consolidator.

    The whole rest of the stream, not only the events that held a link to a changed one: an
    event's answer depends on the neighbourhood it was shown (its temporal predecessor, the
    neighbours a forgotten event's slot leaves room for, the entity and causal edges earlier
    events' answers made), and those earlier answers change as they are asked again in turn.
    Prompts that come out the same are served by ``consolidation.cache`` when it is set."""
    if mem.consolidator is None or getattr(mem.consolidator, "restate_facts", None) is not None:
        return []
    return [j for j, r in enumerate(c.saved.events) if r.stream in firsts and j >= firsts[r.stream]]


def _redrawn(mem, c: compact.Compacted, starts: Iterable[int]) -> list[int]:
    """With a consolidator that restates its facts and mentions itself (the heuristic), the rows (``c``'s
    numbering) whose window of preceding events, which their causal links are drawn from, a lifecycle
    operation changed: from each of ``starts`` (the first event after a changed one) on, ``window`` events
    along its stream. They are consolidated again for their causal links alone (restated already, they
    propose no mention or fact twice), so that these are an in-order ingest's: before, a link to an
    updated event went for good, and one to a backfilled event never came."""
    if mem.consolidator is None or getattr(mem.consolidator, "restate_facts", None) is None:
        return []
    nxt, out = c.saved.tensors["events.next"].tolist(), set()
    for row in starts:
        for _ in range(mem.worker.shown.window):
            if row < 0:
                break
            out.add(row)
            row = nxt[row]
    return sorted(out)


def _captured(mem) -> tuple[persistence.SavedStore, list[list[str]]]:
    """The store's contents and each row's keyword tokens (kept, not re-tokenised)."""
    store = mem.store
    return persistence.capture_store(store, {}), [store.keyword_index.tokens(i) for i in range(len(store))]


def _adopt(mem, c: compact.Compacted, tokens: list[list[str]]) -> None:
    """Load the rebuilt capture into a new store and swap it in (``tokens``: per captured row)."""
    ordered: list[list[str]] = [[] for _ in c.saved.events]
    for i, j in enumerate(c.new_row):
        if j >= 0:
            ordered[j] = tokens[i]
    rebuilt = mem.new_store()
    persistence.load_store(c.saved, rebuilt, None, tokens=ordered)
    mem.store.adopt(rebuilt)


def _tell_consolidator(mem, c: compact.Compacted, gone: set[int], streams: set[str]) -> None:
    """A stateful consolidator drops what it learned from text that is no longer stored (the
    ``gone`` rows' text, of ``streams``)."""
    forget = getattr(mem.consolidator, "forget", None)
    if forget is not None:
        forget(c.new_row, gone, {s: [r for r in c.saved.events if r.stream == s] for s in streams})


def _restated(mem, c: compact.Compacted, streams: set[str]) -> compact.Compacted:
    """A consolidator that tracks facts observes the events of ``streams`` again in time order, so
    their supersedes edges are those an in-order ingest of the remaining events gives: an update,
    forget or backfill changes which fact held when (the links of every event, consolidated or
    still queued, as the worker would keep them)."""
    restate = getattr(mem.consolidator, "restate_facts", None)
    if restate is None or not streams:
        return c
    rows = [i for i, r in enumerate(c.saved.events) if r.stream in streams]   # each stream in time order
    found = restate({s: [(i, c.saved.events[i]) for i in rows if c.saved.events[i].stream == s] for s in streams})
    links = [link for i in sorted(found) for link in found[i][:mem.worker.max_supersedes_per_event]]
    return compact.relinked(c, "supersedes", rows, [(l.later, l.earlier, l.confidence) for l in links])


def _mentions_restated(mem, c: compact.Compacted, streams: set[str]) -> compact.Compacted:
    """A consolidator whose entities depend on counts over a stream (the heuristic's
    ``min_phrase_count``) derives the mentions of the events of ``streams`` again, as an in-order
    ingest of the remaining events gives them; an entity it now names first is embedded from its
    surface, as the worker does, and one left with no mention goes."""
    restate = getattr(mem.consolidator, "restate_mentions", None)
    if restate is None or not streams:
        return c
    rows = [i for i, r in enumerate(c.saved.events) if r.stream in streams]
    found = restate({s: [(i, c.saved.events[i]) for i in rows if c.saved.events[i].stream == s] for s in streams})
    if found is None:
        return c
    mentions = [(i, m) for i in rows for m in found[i][:mem.worker.max_entities_per_event]]
    known, new = set(c.saved.entities["names"]), {}
    for _, m in mentions:
        if m.name not in known:
            new.setdefault(m.name, m)        # named as its first mention writes it
    vectors = mem.embedder.encode([m.surface for m in new.values()]) if new else None
    return compact.mentioned(c, rows, mentions, list(new.values()), vectors)


# ---- write-ahead-log records ----

def forget_record(ids: tuple[int, ...]) -> dict:
    return {"op": "forget", "ids": list(ids)}


def update_record(event_id: int, row: EventRow, embedding: torch.Tensor) -> dict:
    """The revised row and its embedding (logged, not recomputed on replay: see PreparedBatch)."""
    return {"op": "update", "id": event_id, "row": asdict(row),
            "embedding": persistence.float32_to_base64(embedding)}


def replay(mem, record: dict) -> None:
    """Apply a logged forget, update or backfill (caller: ingest lock, worker paused, store lock)."""
    ev = mem.store.events
    if record["op"] == "backfill":
        if record["first"] != ev.next_id:
            raise persistence.CorruptSaveError(f"record {record['seq']} (backfill) gives out ids from "
                                               f"{record['first']}, the memory's next id is {ev.next_id}")
        backfill_rows(mem, fast_path.PreparedBatch.from_record(record, mem.store))
        return
    named = record["ids"] if record["op"] == "forget" else [record["id"]]
    unknown = [i for i in named if i not in ev.row_of]
    if unknown:
        raise persistence.CorruptSaveError(f"record {record['seq']} ({record['op']}) names events {unknown} "
                                           "the memory does not hold")
    if record["op"] == "forget":
        forget_rows(mem, [ev.row_of[i] for i in named])
        return
    emb = persistence.float32_from_base64(record["embedding"], (1, mem.store.dim))
    update_row(mem, ev.row_of[named[0]], EventRow(**record["row"]), emb.to(mem.store.device))

