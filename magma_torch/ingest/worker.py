"""The slow path: a background worker that consolidates queued events in batches.

For each batch it reads every event's neighbourhood (the preceding events of its stream,
or, for a consolidator that sets ``needs_graph``, its ``hops``-hop graph neighbourhood),
asks the consolidator (heuristic or LLM) for entity mentions and causal links, validates
them and writes them. Every queued event ends ``consolidated`` or ``failed`` with a
reason; a proposal with an ``error`` fails just its own event.

A script may end without closing its memory. The worker thread is a daemon, and a hook that
runs when the main thread ends stops every open worker after the batch it has in flight, before
the interpreter finalises: a daemon thread still inside native code (a torch op that released the
GIL) at finalisation is killed on its way back into Python, and unwinding its C++ frames ends
the process in ``std::terminate`` (exit status 134). The hook is registered with
``threading._register_atexit`` (as ``concurrent.futures`` does), which runs before every
``atexit`` hook: blis, imported with spaCy by the first batch, registers an ``atexit`` hook
later than this module, and ``atexit`` runs last-registered first, so an ``atexit`` hook here
let blis finalise under a worker still inside spaCy (a segfault). Events still queued then stay pending,
unconsolidated; a durable memory's are in its write-ahead log and are queued again on reopen.
"""
from __future__ import annotations

import logging
import numbers
import operator
import re
import threading
import weakref
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime, timezone

import torch

from magma_torch.config.schema import HeuristicConsolidationConfig, LLMConsolidationConfig, SlowPathConfig
from magma_torch.ingest.consolidator import CausalLink, Consolidator, EventView, SupersessionLink, time_order
from magma_torch.store.store import MemoryStore
from magma_torch.text.embedder import Embedder

log = logging.getLogger(__name__)
_WORD = re.compile(r"\w+(?:['-]\w+)*")
_RUNNING: "weakref.WeakSet[SlowPathWorker]" = weakref.WeakSet()   # workers with a live thread


def _stop_at_exit() -> None:
    """Stop every worker still running when the main thread ends, after its batch in flight (see above)."""
    for worker in list(_RUNNING):
        worker.close(finish_queue=False)


threading._register_atexit(_stop_at_exit)


class SlowPathWorker:
    def __init__(self, store: MemoryStore, embedder: Embedder, consolidator: Consolidator | None,
                 slow_path: SlowPathConfig,
                 consolidation: HeuristicConsolidationConfig | LLMConsolidationConfig):
        """``consolidation``: what the consolidator is shown (its ``window`` of preceding events, or
        for one that ``needs_graph`` its ``hops``-hop neighbourhood of ``max_neighbours`` events) and
        the caps its proposals are cut to."""
        self.store, self.embedder, self.consolidator = store, embedder, consolidator
        self.batch_size, self.shown = slow_path.batch_size, consolidation
        self.max_causal_per_event = consolidation.max_causal_per_event
        self.max_entities_per_event = consolidation.max_entities_per_event
        self.max_supersedes_per_event = consolidation.max_supersedes_per_event
        self.queue: deque[int] = deque()
        self.status: dict[int, tuple[str, str]] = {}
        self.busy_s = 0.0
        self._cv = threading.Condition()
        self._inflight = 0
        self._holds = 0  # paused() callers: no new batch starts while any is waiting or inside
        self._stop = False
        self._abandon = False   # stop without consolidating the queue (interpreter exit)
        self._thread = None
        if slow_path.background:
            self._thread = threading.Thread(target=self._run, name="magma-slow-path", daemon=True)
            self._thread.start()
            _RUNNING.add(self)

    def submit(self, ids: Sequence[int]) -> None:
        with self._cv:
            for i in ids:
                self.status[i] = ("pending", "")
            self.queue.extend(ids)
            self._cv.notify_all()

    def pending(self) -> int:
        with self._cv:
            return len(self.queue) + self._inflight

    def drain(self) -> None:
        """Block until every queued event is consolidated or failed, or, once the worker is told to
        leave its queue (``close(finish_queue=False)``, interpreter exit), until its batch in flight
        ends: the rest stays pending (before, that wait never ended)."""
        if self._thread is None or not self._thread.is_alive():  # foreground, or after close()
            while self._step():
                pass
            return
        with self._cv:
            self._cv.wait_for(lambda: (not self.queue or self._abandon) and self._inflight == 0)

    @contextmanager
    def paused(self) -> Iterator[None]:
        """Hold the worker between batches: none is in flight or starts inside the block. The
        worker's lock is not held inside it: callers take the store's lock next, and a reader that
        holds the store's lock asks for statuses (``MagmaMemory.events``), so holding both the
        other way round deadlocked the two."""
        with self._cv:
            # Announce the hold first, so a busy worker cannot start batch after batch ahead of it.
            self._holds += 1
        try:
            with self._cv:
                self._cv.wait_for(lambda: self._inflight == 0)
            yield
        finally:
            with self._cv:
                self._holds -= 1
                self._cv.notify_all()

    def statuses(self, ids: Iterable[int]) -> list[tuple[str, str]]:
        """(status, reason) of each event; one the fast path has written but not yet submitted is pending."""
        with self._cv:
            return [self.status.get(i, ("pending", "")) for i in ids]

    def state_dict(self, num_events: int) -> dict:
        """Queue (in order) and status of events ``0..num_events-1``; call while paused.

        Events the fast path has written but not yet submitted are queued last and
        pending, as their imminent ``submit`` would leave them.
        """
        with self._cv:
            unsubmitted = [i for i in range(num_events) if i not in self.status]
            return {"queue": list(self.queue) + unsubmitted,
                    "status": [list(self.status.get(i, ("pending", ""))) for i in range(num_events)]}

    def load_state_dict(self, state: dict) -> None:
        """Restore a saved queue and statuses into an idle, empty worker."""
        with self._cv:
            if self.queue or self.status:
                raise RuntimeError("load_state_dict needs a worker that has seen no events")
            self.status = {i: (s, reason) for i, (s, reason) in enumerate(state["status"])}
            self.queue.extend(state["queue"])
            self._cv.notify_all()

    def renumber(self, new_row: Sequence[int], requeue: Iterable[int] = ()) -> None:
        """The store was rebuilt without some events (``new_row[old]``: the new row, -1 for a forgotten
        one): queue and statuses follow; ``requeue`` (new rows whose text changed) go pending again,
        merged into the queue in row order, so that each is consolidated before its stream's later
        events, as in an in-order ingest (the heuristic's mentions depend on what the stream has
        seen; before, they went last). Call while paused."""
        with self._cv:
            requeue = set(requeue)
            kept = {new_row[i] for i in self.queue} - {-1}
            self.queue = deque(sorted(kept | requeue))
            self.status = {new_row[i]: s for i, s in self.status.items() if new_row[i] >= 0}
            for i in requeue:
                self.status[i] = ("pending", "")
            self._cv.notify_all()

    def cancel(self) -> int:
        """Drop the queued events that no batch has taken yet; returns how many. For a memory
        being thrown away (an aborted run), so that closing it waits for one batch at most."""
        with self._cv:
            n = len(self.queue)
            for i in self.queue:
                self.status[i] = ("failed", "cancelled")
            self.queue.clear()
            self._cv.notify_all()
            return n

    def close(self, finish_queue: bool = True) -> None:
        """Stop the background thread: after consolidating the queue, or with ``finish_queue``
        False after the batch in flight (queued events stay pending)."""
        self.stop(finish_queue)
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()
        _RUNNING.discard(self)

    def stop(self, finish_queue: bool = True) -> None:
        """Tell the background thread to stop, as ``close`` does, without waiting for it: callable
        while paused, so that no batch starts once the hold ends."""
        with self._cv:
            self._stop = True
            self._abandon = self._abandon or not finish_queue
            self._cv.notify_all()

    def _run(self) -> None:
        while True:
            with self._cv:
                self._cv.wait_for(lambda: (self.queue and not self._holds) or self._stop)
                if self._stop and (not self.queue or self._abandon):
                    return
            self._step()

    def _step(self) -> bool:
        with self._cv:
            self._cv.wait_for(lambda: not self._holds)
            if not self.queue:
                return False
            batch = [self.queue.popleft() for _ in range(min(self.batch_size, len(self.queue)))]
            self._inflight = len(batch)
        started = datetime.now(timezone.utc)
        try:
            self._consolidate(batch)
        except Exception as err:  # a worker must not die: record the failure per event
            log.exception("slow path batch failed")
            with self._cv:
                for i in batch:
                    self.status[i] = ("failed", f"{type(err).__name__}: {err}")
        finally:
            with self._cv:
                self._inflight = 0
                self.busy_s += (datetime.now(timezone.utc) - started).total_seconds()
                self._cv.notify_all()
        return True

    def _view(self, i: int) -> EventView:
        r = self.store.events.rows[i]
        return EventView(i, r.text, r.speaker, r.stream, datetime.fromtimestamp(r.timestamp, timezone.utc))

    def _consolidate(self, batch: list[int]) -> None:
        if self.consolidator is None:
            with self._cv:
                for i in batch:
                    self.status[i] = ("consolidated", "no consolidator")
            return
        with self.store.lock:
            views = [self._view(i) for i in batch]
            shown = self.shown
            if shown.needs_graph:
                context = self._neighbourhoods(batch, shown.hops, shown.max_neighbours)
            else:
                context = {i: [self._view(j) for j in self.store.events.preceding(i, shown.window)] for i in batch}
        proposals = self.consolidator.propose(views, context)
        # A proposal may report its own event failed (``error``) or carry notes on what the
        # consolidator rejected (``notes``); a failed event gets nothing written.
        failed = {p.event_id: str(p.error) for p in proposals if getattr(p, "error", None)}
        notes = {p.event_id: list(getattr(p, "notes", ()) or ()) for p in proposals}
        proposals = [p for p in proposals if p.event_id not in failed]
        mentions = [(p.event_id, m) for p in proposals for m in p.entities[: self.max_entities_per_event]]
        backfill = getattr(self.consolidator, "backfill", None)
        mentions += backfill() if backfill is not None else []
        # Mentions of events that do not exist are dropped before any entity node is made for them.
        n = len(self.store.events)
        mentions = [(e, m) for e, m in mentions if _node_id(e, n) is not None and isinstance(m.name, str)]
        causal = [(p.event_id, c) for p in proposals for c in p.causal[: self.max_causal_per_event]]
        updates = [(p.event_id, u) for p in proposals
                   for u in getattr(p, "supersedes", [])[: self.max_supersedes_per_event]]
        new_names = self._new_entity_names(mentions)
        name_emb = self.embedder.encode([surface for _, _, surface in new_names])
        with self.store.lock:
            self._write(batch, mentions, causal, new_names, name_emb, failed, notes, updates)

    def _new_entity_names(self, mentions) -> list[tuple[str, str, str]]:
        seen, out = set(), []
        for _, m in mentions:
            if m.name not in seen and self.store.entity_id(m.name) is None:
                seen.add(m.name)
                out.append((m.name, m.kind, m.surface))
        return out

    def _neighbourhoods(self, batch: list[int], hops: int, cap: int) -> dict[int, list[EventView]]:
        """Each event's ``hops``-hop neighbourhood among earlier events (caller holds the lock).

        A hop follows a temporal, semantic or causal edge (either direction) or a shared
        entity. At most ``cap`` events per event: nearer hops first, within a hop the
        temporal-chain predecessor, then the most similar, then the most recent; only the
        kept events are expanded further. Returned oldest first. The event's own entity
        edges do not exist yet, so its first hop also goes through the known entities its
        text names (word 1-3-grams). Speakers are not entity nodes.
        """
        store = self.store
        n, m = len(store.events), len(store.entities)
        g = store.graph.snapshot(n, m)
        emb = store.events.embeddings.data
        dev = emb.device
        out: dict[int, list[EventView]] = {}
        for i in batch:
            prev = int(store.events.prev.data[i])
            kept: list[int] = []
            seen = {i}
            frontier = torch.tensor([i], dtype=torch.long, device=dev)
            seeds = torch.tensor(self._named_entities(i), dtype=torch.long, device=dev)
            for hop in range(hops):
                if len(kept) >= cap or frontier.numel() == 0:
                    break
                _, nb, _ = g.event_adj.gather(frontier)
                _, ents, _ = g.event_entity.gather(frontier)
                if hop == 0:
                    ents = torch.cat([ents, seeds])
                if ents.numel():
                    _, via, _ = g.entity_event.gather(torch.unique(ents))
                    nb = torch.cat([nb, via])
                nb = torch.unique(nb[nb < i])
                fresh = [j for j in nb.tolist() if j not in seen]
                if not fresh:
                    break
                sims = (emb[torch.tensor(fresh, device=dev)].float() @ emb[i].float()).tolist()
                ranked = sorted(zip(fresh, sims, strict=True), key=lambda t: (t[0] != prev, -t[1], -t[0]))
                new = [j for j, _ in ranked[: cap - len(kept)]]
                seen.update(fresh)
                kept += new
                frontier = torch.tensor(new, dtype=torch.long, device=dev)
            views = [self._view(j) for j in kept]
            out[i] = sorted(views, key=time_order)
        return out

    def _named_entities(self, i: int) -> list[int]:
        """Ids of existing entity nodes whose name is a word 1-3-gram of event i's text."""
        r = self.store.events.rows[i]
        words = _WORD.findall(r.text.replace("’", "'").lower())
        grams = {" ".join(words[a:a + k]) for k in (1, 2, 3) for a in range(len(words) - k + 1)}
        ids = (self.store.entity_id(gr) for gr in grams)
        return sorted(e for e in ids if e is not None)

    def _write(self, batch, mentions, causal: list[tuple[int, CausalLink]], new_names, name_emb: torch.Tensor,
               failed: dict[int, str] | None = None, notes: dict[int, list[str]] | None = None,
               updates: list[tuple[int, SupersessionLink]] = ()) -> None:
        store = self.store
        n = len(store.events)
        reasons: dict[int, list[str]] = {i: list(v) for i, v in (notes or {}).items()}
        if new_names:
            store.entities.append([a for a, _, _ in new_names], [b for _, b, _ in new_names],
                                  [c for _, _, c in new_names], name_emb.to(store.device))
        ev, en = [], []
        pairs = set()
        for event_id, m in mentions:
            event_id, ent = int(event_id), store.entity_id(m.name)
            if not store.graph.has_mention(event_id, ent) and (event_id, ent) not in pairs:
                pairs.add((event_id, ent))
                ev.append(event_id)
                en.append(ent)
        store.graph.add_edges("entity", torch.tensor(ev, dtype=torch.long), torch.tensor(en, dtype=torch.long))
        for proposer, link in causal:
            problem = self._causal_problem(link, n)
            if problem:  # noted on the status of the event whose proposal held the link
                reasons.setdefault(proposer, []).append(
                    f"rejected causal link {link.cause!r}->{link.effect!r}: {problem}")
                log.debug("rejected causal link %s -> %s: %s", link.cause, link.effect, problem)
                continue
            store.graph.add_edges("causal", torch.tensor([int(link.cause)]), torch.tensor([int(link.effect)]),
                                  torch.tensor([float(link.confidence)]))
        for proposer, link in updates:
            problem = self._supersession_problem(proposer, link, n)
            if problem:
                reasons.setdefault(proposer, []).append(
                    f"rejected supersession {link.later!r}->{link.earlier!r}: {problem}")
                continue
            store.graph.add_edges("supersedes", torch.tensor([int(link.later)]), torch.tensor([int(link.earlier)]),
                                  torch.tensor([float(link.confidence)]))
        with self._cv:
            for i in batch:
                if failed and i in failed:
                    self.status[i] = ("failed", failed[i])
                else:
                    self.status[i] = ("consolidated", "; ".join(reasons.get(i, ())))

    def _causal_problem(self, link: CausalLink, n: int) -> str:
        g = self.store.graph
        cause, effect = _node_id(link.cause, n), _node_id(link.effect, n)
        if cause is None or effect is None:
            return "unknown node"
        if not isinstance(link.confidence, numbers.Real) or not 0.0 < link.confidence <= 1.0:
            return f"confidence {link.confidence!r} not in (0, 1]"
        if cause == effect:
            return "self-loop"
        if self.store.events.rows[cause].stream != self.store.events.rows[effect].stream:
            return "cause and effect are in different streams"
        if time_order(self._view(cause)) > time_order(self._view(effect)):
            return "cause is later than effect"
        if g.has_causal(cause, effect):
            return "duplicate"
        if g.causal_path_exists(effect, cause):
            return "would create a cycle"
        return ""

    def _supersession_problem(self, proposer: int, link: SupersessionLink, n: int) -> str:
        """Why a proposed supersession may not be stored ("" when it may): only the proposing
        event may update, and only an earlier event of its own stream."""
        later, earlier = _node_id(link.later, n), _node_id(link.earlier, n)
        if later is None or earlier is None:
            return "unknown node"
        if later != proposer:
            return "only the proposing event can supersede"
        if not isinstance(link.confidence, numbers.Real) or isinstance(link.confidence, bool) \
                or not 0.0 < link.confidence <= 1.0:
            return f"confidence {link.confidence!r} not in (0, 1]"
        rows = self.store.events.rows
        if earlier >= later or rows[earlier].stream != rows[later].stream \
                or rows[earlier].timestamp > rows[later].timestamp:
            return "not an earlier event of the same stream"
        if self.store.graph.has_supersession(later, earlier):
            return "duplicate"
        return ""


def _node_id(x, n: int) -> int | None:
    """``x`` as an event id in [0, n), or None (wrong type or out of range)."""
    if isinstance(x, bool):
        return None
    try:
        i = operator.index(x)
    except TypeError:
        return None
    return i if 0 <= i < n else None
