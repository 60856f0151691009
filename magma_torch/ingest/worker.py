"""The slow path: a background worker that consolidates queued events in batches.

For each batch it reads every event's preceding neighbourhood, asks the consolidator
(heuristic today, an LLM later) for entity mentions and causal links, validates them
and writes them. Every queued event ends ``consolidated`` or ``failed`` with a reason.
"""
from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Sequence
from datetime import datetime, timezone
from typing import Protocol

import torch

from magma_torch.ingest.embedder import Embedder
from magma_torch.ingest.heuristic import CausalLink, EntityMention, EventView, Proposal
from magma_torch.store.store import MemoryStore

log = logging.getLogger(__name__)


class Consolidator(Protocol):
    def propose(self, batch: Sequence[EventView], context: dict[int, Sequence[EventView]]) -> list[Proposal]: ...

    def backfill(self) -> list[tuple[int, EntityMention]]: ...


class SlowPathWorker:
    def __init__(self, store: MemoryStore, embedder: Embedder, consolidator: Consolidator | None,
                 batch_size: int = 64, window: int = 6, max_causal_per_event: int = 3,
                 max_entities_per_event: int = 12, background: bool = True):
        self.store, self.embedder, self.consolidator = store, embedder, consolidator
        self.batch_size, self.window = batch_size, window
        self.max_causal_per_event, self.max_entities_per_event = max_causal_per_event, max_entities_per_event
        self.queue: deque[int] = deque()
        self.status: dict[int, tuple[str, str]] = {}
        self.busy_s = 0.0
        self._cv = threading.Condition()
        self._inflight = 0
        self._stop = False
        self._thread = None
        if background:
            self._thread = threading.Thread(target=self._run, name="magma-slow-path", daemon=True)
            self._thread.start()

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
        """Block until every queued event is consolidated or failed."""
        if self._thread is None:
            while self._step():
                pass
            return
        with self._cv:
            self._cv.wait_for(lambda: not self.queue and self._inflight == 0)

    def close(self) -> None:
        with self._cv:
            self._stop = True
            self._cv.notify_all()
        if self._thread is not None:
            self._thread.join()

    def _run(self) -> None:
        while True:
            with self._cv:
                self._cv.wait_for(lambda: self.queue or self._stop)
                if self._stop and not self.queue:
                    return
            self._step()

    def _step(self) -> bool:
        with self._cv:
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
            context = {i: [self._view(j) for j in self.store.events.preceding(i, self.window)] for i in batch}
        proposals = self.consolidator.propose(views, context)
        mentions = [(p.event_id, m) for p in proposals for m in p.entities[: self.max_entities_per_event]]
        mentions += self.consolidator.backfill()
        causal = [c for p in proposals for c in p.causal[: self.max_causal_per_event]]
        new_names = self._new_entity_names(mentions)
        name_emb = self.embedder.encode([surface for _, _, surface in new_names])
        with self.store.lock:
            self._write(batch, mentions, causal, new_names, name_emb)

    def _new_entity_names(self, mentions) -> list[tuple[str, str, str]]:
        seen, out = set(), []
        for _, m in mentions:
            if m.name not in seen and self.store.entity_id(m.name) is None:
                seen.add(m.name)
                out.append((m.name, m.kind, m.surface))
        return out

    def _write(self, batch, mentions, causal: list[CausalLink], new_names, name_emb: torch.Tensor) -> None:
        store = self.store
        n = len(store.events)
        reasons: dict[int, str] = {}
        if new_names:
            store.entities.append([a for a, _, _ in new_names], [b for _, b, _ in new_names],
                                  [c for _, _, c in new_names], name_emb.to(store.device))
        ev, en = [], []
        for event_id, m in mentions:
            ent = store.entity_id(m.name)
            if 0 <= event_id < n and not store.graph.has_mention(event_id, ent) and (event_id, ent) not in zip(ev, en):
                ev.append(event_id)
                en.append(ent)
        store.graph.add_edges("entity", torch.tensor(ev, dtype=torch.long), torch.tensor(en, dtype=torch.long))
        for link in causal:
            problem = self._causal_problem(link, n)
            if problem:
                reasons.setdefault(link.effect, problem)
                log.debug("rejected causal link %s -> %s: %s", link.cause, link.effect, problem)
                continue
            store.graph.add_edges("causal", torch.tensor([link.cause]), torch.tensor([link.effect]),
                                  torch.tensor([link.confidence]))
        with self._cv:
            for i in batch:
                self.status[i] = ("consolidated", reasons.get(i, ""))

    def _causal_problem(self, link: CausalLink, n: int) -> str:
        g = self.store.graph
        if not (0 <= link.cause < n and 0 <= link.effect < n):
            return "unknown node"
        if link.cause == link.effect:
            return "self-loop"
        if g.has_causal(link.cause, link.effect):
            return "duplicate"
        if g.causal_path_exists(link.effect, link.cause):
            return "would create a cycle"
        return ""
