"""MagmaMemory: the facade that wires ingest, store and query together."""
from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
from collections.abc import Iterable, Iterator, Mapping, Sequence
from datetime import datetime
from functools import partial
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from magma_torch import lifecycle
from magma_torch.config.build import instantiate
from magma_torch.config.resolve import (ConfigError, consolidation_config, memory_config, settings, worker_settings,
                                        saved_memory_config as saved_config)
from magma_torch.config.schema import ConsolidationConfig, MemoryConfig, RetrievalConfig, problems
from magma_torch.errors import MagmaError
from magma_torch.events import StoredEvent, UnknownEventError
from magma_torch.ingest import fast_path
from magma_torch.ingest.consolidator import Unasked
from magma_torch.ingest.episodes import assign_episodes
from magma_torch.ingest.worker import SlowPathWorker
from magma_torch.llm.answer_format import check_date_style, format_answer
from magma_torch.llm.base import LLM
from magma_torch.llm.prompts import DEFAULT_ANSWER_PROMPT, answer_prompt, check_answer_prompt
from magma_torch.query.intent import IntentClassifier
from magma_torch.query.retriever import Retrieval, Retriever
from magma_torch.store import durable as durability
from magma_torch.store import integrity, jsonl, persistence, validity
from magma_torch.store.durable import WAL, DurableFolder, NamespaceNotEmptyError, NoStoreDirError, ReadOnlyError
from magma_torch.store.persistence import CorruptSaveError
from magma_torch.store.store import MemoryStore
from magma_torch.text.embedder import Embedder, resolve_device
from magma_torch.text.temporal import parse_timestamp


class QueryError(MagmaError, ValueError):
    """A question (or its query time) that cannot be retrieved for; names which."""


class AnswerError(MagmaError, RuntimeError):
    """The reader LLM failed to generate an answer."""


class MemoryClosedError(MagmaError, RuntimeError):
    """A change asked of a memory after ``close()``: its slow path is stopped and, with a
    ``store_dir``, its lock released, so the change would be neither consolidated nor kept."""


class MagmaMemory:
    """A multi-graph memory: ``add`` events, ``consolidate``, ``retrieve``.

    ``config`` is a memory config: a ``MemoryConfig``, a partial mapping or DictConfig merged
    onto its defaults, or a name under ``conf/memory`` (None: the defaults, magma's).
    ``consolidation`` a consolidation config, the same ways (``HeuristicConsolidationConfig``
    by default; "none" for no slow path; "llm" for LLM consolidation, which uses ``llm`` — or,
    when that is None, an LLM built from the config's ``llm`` entry). An unknown key or a
    wrong type raises ``ConfigError`` naming the key (magma_torch.config).
    """

    def __init__(self, config: str | Mapping | DictConfig | MemoryConfig | None = None,
                 consolidation: str | Mapping | DictConfig | ConsolidationConfig | None = None, *,
                 namespace: str = "default",
                 device: str | None = None, embedder: Embedder | None = None, llm: LLM | None = None,
                 store_dir: str | os.PathLike | None = None, durable: bool = False):
        self._closed = False
        if durable and store_dir is None:
            raise NoStoreDirError("durable=True needs a store_dir")
        # A persistent memory lives in store_dir/<namespace> (magma_torch.store.durable).
        self._folder = None if store_dir is None else DurableFolder(store_dir, namespace)
        self.path = None if self._folder is None else self._folder.path
        self._read_only_view_of: Path | None = None  # the folder open_readonly read
        saved = None
        self.llm, self._owns_llm = llm, False  # the consolidation LLM (consolidation=llm)
        self.worker: SlowPathWorker | None = None
        if self._folder is not None:
            saved = self._folder.lock_and_read()
        try:
            if saved is not None:
                config = saved_config(saved.state["config"]) if config is None else config
                consolidation = saved.state["consolidation"] if consolidation is None else consolidation
            self.config = memory_config(config)
            self.consolidation_config = consolidation_config(consolidation)
            self.namespace = namespace
            cfg: MemoryConfig = settings(self.config)
            self.device = resolve_device(device or cfg.device)
            self.embedder = embedder or Embedder(device=self.device, **dataclasses.asdict(cfg.embedder))
            self.store = self.new_store()
            self.fast_cfg = cfg.fast_path
            self.consolidator = self._make_consolidator()
            self.worker = SlowPathWorker(self.store, self.embedder, self.consolidator, cfg.slow_path,
                                         worker_settings(self.consolidation_config))
            self.retriever = Retriever(self.embedder, IntentClassifier.load(device=self.device), cfg.retrieval)
        except BaseException:
            # a bad setting must not leave the folder locked (a retry in this process would be refused
            # while the traceback keeps the half-built memory alive) nor an LLM server running
            self._close_unopened()
            raise
        if self._folder is not None:
            self._open_store(saved, durable)

    def new_store(self) -> MemoryStore:
        """An empty store with this memory's settings."""
        cfg = self.config
        return MemoryStore(self.embedder.dim, self.device, cfg.vector_backend, cfg.bm25.k1, cfg.bm25.b,
                           cfg.chain_span, cfg.scan_dtype)

    # ---- persistent stores (magma_torch.store.durable) ----
    def _open_store(self, saved: persistence.SavedStore | None, durable: bool) -> None:
        """Load the last checkpoint (or write an empty first one) and replay the log onto it."""
        try:
            stored = None if saved is None else OmegaConf.to_container(saved_config(saved.state["config"]),
                                                                       resolve=True)
            with self.worker.paused():   # the restored queue waits until the store is open ...
                try:
                    self._folder.open(saved, durable, config=OmegaConf.to_container(self.config, resolve=True),
                                      stored_config=stored, restore=self._restore, apply=self._apply,
                                      checkpoint=self.checkpoint)
                except BaseException:
                    self.worker.stop(finish_queue=False)   # ... and is not worked on if it fails to open
                    raise
        except BaseException:
            self._close_unopened()
            raise

    def _apply(self, rec: dict) -> None:
        """Replay one log record onto the store."""
        if rec.get("op") in ("forget", "update", "backfill"):
            with self.store.ingest_lock, self.worker.paused(), self.store.lock:
                lifecycle.replay(self, rec)
            return
        if rec.get("op") != "add" or rec.get("first") != len(self.store):
            raise CorruptSaveError(f"record {rec['seq']} ({rec.get('op')!r} at event {rec.get('first')}) does not "
                                   f"follow the checkpoint's {len(self.store)} events")
        self.worker.submit(fast_path.apply(fast_path.PreparedBatch.from_record(rec, self.store), self.store,
                                           self.fast_cfg))

    def _logs(self) -> bool:
        return self._folder is not None and self._folder.wal is not None

    def _journal(self, batch: fast_path.PreparedBatch) -> None:
        """Log an add batch; called under the ingest lock before the batch is applied, so an add that
        raced ``close()`` is refused here, not applied to a closed memory."""
        if self._logs():
            self._log_record(batch.to_record(self.store))
        else:
            self._check_open()

    def _log_record(self, record: dict) -> None:
        """Append one record (an add batch, a forget, an update) to the log; a memory without a log
        has nothing to do. The caller holds the ingest lock, under which ``close()`` marks a memory closed."""
        self._check_open()
        if self._folder is not None:
            self._folder.log(record)

    def checkpoint(self) -> None:
        """Write the whole memory as ``store_dir/<namespace>/checkpoint`` (atomically: temporary
        folder, fsync, rename), then empty the write-ahead log. Adds wait meanwhile."""
        if self._folder is None:
            raise NoStoreDirError("checkpoint() needs a memory opened with store_dir")
        with self.store.ingest_lock:  # every logged add is in the store, and none starts
            self._check_open()
            self._folder.checkpoint(self._encode)

    def check(self) -> None:
        """Raise ``IntegrityError`` when the store or the slow-path bookkeeping breaks an
        invariant (see ``magma_torch.store.integrity``)."""
        with self.worker.paused(), self.store.lock:
            found = integrity.problems(self.store) + _queue_problems(self.worker.state_dict(len(self.store)),
                                                                     len(self.store))
        if found:
            raise integrity.IntegrityError(f"{len(found)} integrity problem(s): " + "; ".join(found[:20]))

    def _make_consolidator(self):
        c = self.consolidation_config
        if c is None or c.get("_target_") is None:
            return None
        if "llm" not in c.keys():
            return instantiate(c, "consolidation")
        # An LLM consolidator: the LLM passed in, else one built from the config's `llm` entry.
        if self.llm is None:
            spec = c.llm
            if not spec:
                raise ConfigError("this consolidation config needs an LLM: pass MagmaMemory(..., llm=...) "
                                 "or set consolidation.llm to an llm config")
            from magma_torch.llm import build_llm   # lazy: backends pull heavy optional deps

            self.llm = build_llm(spec, "consolidation.llm")
            self._owns_llm = True
        return instantiate(c, "consolidation", llm=self.llm)

    # ---- fast path ----
    def add(self, text: str, timestamp, speaker: str | None = None, source_id: str | None = None,
            session_id: str | None = None, metadata: Mapping | None = None, stream: str | None = None, *,
            backfill: bool = False) -> int:
        """Add one event; returns its id (the existing id when ``source_id`` is known). ``backfill``:
        see ``add_many``."""
        rec = {"text": text, "timestamp": timestamp, "speaker": speaker, "source_id": source_id,
               "session_id": session_id, "metadata": metadata, "stream": stream}
        return self.add_many([{k: v for k, v in rec.items() if v is not None or k in ("text", "timestamp")}],
                             backfill=backfill)[0]

    def add_many(self, records: Iterable[Mapping], *, backfill: bool = False) -> list[int]:
        """Batched fast path; validates the whole batch first, then writes it.

        A record older than its stream's last event is refused (``IngestError``), unless
        ``backfill``: then, when the batch holds such a record, all its new events are inserted
        at their places in their streams' temporal chains (``magma_torch.ingest.backfill``) in
        one rebuild of the store, like ``update``'s (time linear in the store's size); a batch
        in time order is appended as without it. Durable like an add."""
        self._check_writable()
        ids, _ = fast_path.ingest(records, self.store, self.embedder, self.fast_cfg,
                                  journal=self._journal, submit=self.worker.submit,
                                  insert=self._insert if backfill else None)
        self._checkpoint_after_change(only_when_due=True)
        return ids

    def _insert(self, batch: fast_path.PreparedBatch) -> list[int]:
        with self.worker.paused(), self.store.lock:
            return lifecycle.backfill_rows(self, batch)

    def _check_writable(self) -> None:
        self._check_open()
        if self._read_only_view_of is not None:
            raise ReadOnlyError(f"{self._read_only_view_of}: opened read-only, which never changes it; open it with "
                                "MagmaMemory(store_dir=..., namespace=...) or MagmaMemory.load to change it")

    def _check_open(self) -> None:
        # Before, a closed memory took adds and gave them ids: with a store_dir they were written
        # past its released lock and lost on reopening; without one they were never consolidated.
        if self._closed:
            raise MemoryClosedError("this memory is closed (close() was called, or its with-block ended): it takes "
                                    "no add, forget, update, consolidate or checkpoint; open it again to change it "
                                    "(MagmaMemory(store_dir=...) or MagmaMemory.load); reading it still works")

    def _checkpoint_after_change(self, only_when_due: bool = False) -> None:
        """The checkpoint that ends a change (forget, consolidate; an add or update every
        ``durability.checkpoint_every`` log records). None once the memory is closed: a ``close()``
        that came after the change wrote it (before, the change was applied, and then reported
        refused with ``MemoryClosedError``, so a caller that retried added it twice)."""
        if self._folder is None:
            return
        with self.store.ingest_lock:
            if self._closed or (only_when_due and not self._folder.checkpoint_due(
                    self.config.durability.checkpoint_every)):
                return
            self._folder.checkpoint(self._encode)

    # ---- forget and update (magma_torch/lifecycle.py) ----
    def forget(self, ids: int | Iterable[int] | None = None, *, source_ids: str | Iterable[str] | None = None,
               speaker: str | None = None, entity: str | None = None, before=None) -> lifecycle.Forgotten:
        """Remove events from every structure: the events named by ``ids`` or ``source_ids`` (all
        events when neither is given) that match each of ``speaker``, ``entity`` (mention that
        entity node) and ``before`` (a timestamp: strictly earlier). Returns a ``Forgotten`` (their
        ids, and the entity and episode nodes left empty and removed with them).

        The temporal chain is re-linked around the gap; causal links through a forgotten event
        are dropped, not bridged (its cause does not become a cause of its effect: that link
        was never stated, and it would keep a trace of the forgotten event). Other events keep
        their ids. Unknown ids, source ids, speakers or entities raise, naming them, and
        nothing is forgotten. A durable memory logs the forget before applying it; a memory
        with a ``store_dir`` then checkpoints, so once this returns no file of the memory
        holds the events' text or embeddings."""
        self._check_writable()
        with self.store.ingest_lock:
            with self.worker.paused(), self.store.lock:
                rows = lifecycle.select(self.store, ids, source_ids, speaker, entity, before)
                if not rows:
                    return lifecycle.Forgotten((), (), 0)
                self._log_record(lifecycle.forget_record(tuple(self.store.events.ids[r] for r in rows)))
                out = lifecycle.forget_rows(self, rows)
        self._checkpoint_after_change()
        return out

    def update(self, event_id: int, text: str | None = None, timestamp=None) -> StoredEvent:
        """Correct an event's ``text`` and/or ``timestamp``; it keeps its id. It is embedded again,
        its semantic edges are derived again, its entity and causal edges dropped and the event
        queued for consolidation again (with the LLM consolidator, so are the later events of its
        stream: ``lifecycle._asked_again``); its episode's embedding and keyword document follow.
        Validated as ``add`` validates (``IngestError``: empty text, a time past the future
        horizon, or one that would break its stream's order: an update keeps the event's place,
        between its stream's previous and next event). Durable like ``add``."""
        self._check_writable()
        if text is None and timestamp is None:
            raise fast_path.IngestError(f"event {event_id}: update() needs a new text or timestamp")
        with self.store.ingest_lock:
            row = self._row(event_id)
            new = fast_path.revise(self.store, row, text, timestamp, self.fast_cfg)
            emb = self.embedder.encode([fast_path.embed_text(new, self.fast_cfg)])
            emb = emb.to(self.store.device, self.store.events.embeddings.data.dtype)
            with self.worker.paused(), self.store.lock:
                self._log_record(lifecycle.update_record(event_id, new, emb))
                lifecycle.update_row(self, row, new, emb)
            updated = self.event(event_id)   # before a forget in another thread can take it
        self._checkpoint_after_change(only_when_due=True)
        return updated

    @staticmethod
    def forget_namespace(store_dir: str | os.PathLike, namespace: str) -> None:
        """Delete a tenant: the folder ``store_dir/<namespace>`` with its checkpoint and log. Refuses
        (``StoreInUseError``, a RuntimeError) while a memory holds it open, in this or another process."""
        durability.forget_namespace(store_dir, namespace)

    # ---- slow path ----
    def consolidate(self) -> None:
        """Block until the slow-path queue is drained; a persistent memory then checkpoints,
        so the consolidation is on disk (it is not logged: after a crash, what was
        consolidated since the last checkpoint is queued again, never applied twice). A
        ``close(finish_queue=False)`` in another thread meanwhile ends the wait with
        ``MemoryClosedError`` (before, it never ended)."""
        self._check_writable()
        self.worker.drain()
        left = self.worker.pending()
        if self._closed and left:
            raise MemoryClosedError(f"this memory was closed while consolidate() waited: {left} events stay pending")
        self._checkpoint_after_change()

    # ---- query ----
    def retrieve(self, question: str, query_time=None, budget_tokens: int | None = None) -> Retrieval:
        return self.retrieve_batch([question], [query_time], budget_tokens)[0]

    def retrieve_batch(self, questions: Sequence[str], query_times: Sequence | None = None,
                       budget_tokens: int | None = None) -> list[Retrieval]:
        if isinstance(questions, str):
            raise QueryError(f"questions is one string, not a sequence of them (retrieve takes one): {questions!r}")
        questions = list(questions)
        for i, q in enumerate(questions):
            where = f"question {i}" if len(questions) > 1 else "the question"
            if not isinstance(q, str) or not q.strip():
                what = "empty" if isinstance(q, str) else f"a {type(q).__name__}, not a string"
                raise QueryError(f"{where} is {what}: {q!r}")
            try:   # a lone surrogate (a bad decode): the tokenizer's bare TypeError named no question
                q.encode("utf-8")
            except UnicodeEncodeError as err:
                raise QueryError(f"{where} is not valid Unicode ({err.reason} at character {err.start})") from None
        times = [None] * len(questions) if query_times is None else list(query_times)
        if len(times) != len(questions):
            raise QueryError(f"query_times has {len(times)} entries for {len(questions)} questions")
        times = [_query_time(t, i, len(questions)) for i, t in enumerate(times)]
        problem = next(problems(RetrievalConfig, {"budget_tokens": budget_tokens}, "retrieve"), None)
        if problem is not None:   # -3 gave a 14-token context of a header and "[cut]"; "x" a TypeError
            raise QueryError(problem)
        return self.retriever.retrieve_batch(self.store.snapshot(), questions, times, budget_tokens)

    def answer(self, question: str, llm: LLM, query_time=None, max_tokens: int = 128,
               dates: str = "words", prompt: str = DEFAULT_ANSWER_PROMPT) -> tuple[str, Retrieval]:
        """Retrieve for ``question`` and let ``llm`` answer from the context with the prompt of
        the predicted intent. Returns (answer text, retrieval), the answer's ISO dates written in
        the style ``dates`` (``magma_torch.llm.answer_format``: "words" or "as_written", else
        ``UnknownDateStyleError``, a ValueError); raises ``AnswerError`` (a RuntimeError) when the
        generation failed. ``prompt`` is the answer
        prompt's version (``magma_torch.llm.prompts.ANSWER_PROMPTS``)."""
        check_answer_prompt(prompt)
        check_date_style(dates)
        r = self.retrieve(question, query_time)
        t = None if query_time is None else parse_timestamp(query_time)
        g = llm.generate([answer_prompt(question, r.context, r.intent, t, prompt)], max_tokens=max_tokens,
                         temperature=0.0)[0]
        if g.error is not None:
            raise AnswerError(f"answer generation failed: {g.error}")
        return format_answer(g.text.strip(), dates), r

    @property
    def graph(self):
        """The live multigraph as a zero-copy PyG ``HeteroData`` snapshot (``MemoryStore.hetero_data``)."""
        return self.store.hetero_data()

    def stats(self) -> dict:
        s = self.store.stats()
        s["queue"] = self.worker.pending()
        s["namespace"] = self.namespace
        return s

    def close(self, checkpoint: bool = True, finish_queue: bool = True) -> None:
        """Stop the slow path, then checkpoint a persistent memory (unless ``checkpoint`` is False),
        and release the LLM this memory built. ``finish_queue`` False: the slow path stops after its
        batch in flight, and the events still queued stay pending (a durable memory consolidates them
        when it is opened again). Closing a closed memory does nothing; a closed memory can still be
        read (``retrieve``, ``events``, ``save``), and raises ``MemoryClosedError`` for any change.

        All of it under the ingest lock: an add, forget or update in flight ends first and is in the
        checkpoint, a later one is refused before it is logged or applied, and a second close waits
        and returns. Before, the checkpoint came first, outside it: an add between the two was
        acknowledged and, without a log, lost; the slow path's last consolidation never reached the
        checkpoint (an LLM consolidator was asked again on reopening); two closes at once closed the
        log's descriptor twice."""
        store = getattr(self, "store", None)   # None: the memory failed to build before its store
        with store.ingest_lock if store is not None else contextlib.nullcontext():
            if self._closed:
                return
            self._closed = True
            try:
                if self.worker is not None:   # None: the memory failed to build before its slow path
                    self.worker.close(finish_queue)
                if checkpoint and self._folder is not None and self._folder.holds_checkpoint():
                    self._folder.checkpoint(self._encode)
            finally:
                if self._folder is not None:
                    self._folder.close()
                if self._owns_llm and self.llm is not None:
                    self.llm.close()
                    self._owns_llm = False

    def _close_unopened(self) -> None:
        """Close a memory that failed to build or open: no checkpoint, and the queue its checkpoint restored
        stays pending, for the caller never gets this memory (before: the worker consolidated all of it
        first, calling the LLM for each event, and the error waited for that)."""
        self.close(checkpoint=False, finish_queue=False)

    def __enter__(self) -> "MagmaMemory":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def save(self, path: str | os.PathLike) -> None:
        """Write the memory to folder ``path``: store, configs, slow-path queue and
        consolidator state (format: ``magma_torch.store.persistence``). Atomic: an
        earlier save at ``path`` is replaced only once the new one is on disk; anything else at
        ``path`` is left and the save refused (``SaveWouldOverwriteError``, a FileExistsError)."""
        persistence.write_save(path, self._encode())

    def _encode(self, wal_seq: int = 0) -> dict[str, bytes]:
        return persistence.encode_save(self._capture(wal_seq))

    def _capture(self, wal_seq: int = 0) -> persistence.SavedStore:
        # Paused between batches and under the store lock, queue, statuses, consolidator
        # state and store agree; they are copied out and encoded without holding either.
        with self.worker.paused(), self.store.lock:
            c = self.consolidation_config
            return persistence.capture_store(self.store, {
                "namespace": self.namespace,
                "config": OmegaConf.to_container(self.config, resolve=True),
                "consolidation": {} if c is None else OmegaConf.to_container(c, resolve=True),
                "worker": self.worker.state_dict(len(self.store)),
                "consolidator": None if self.consolidator is None else self.consolidator.state_dict(),
                "wal_seq": wal_seq})

    # ---- inspect, export, import ----
    def events(self) -> Iterator[StoredEvent]:
        """Every stored event, oldest first (by timestamp, then id), as of this call: read now, not
        at the first ``next()``."""
        with self.store.lock:
            ev = self.store.events
            n = len(ev)
            rows, ts, ids = ev.rows[:n], ev.timestamps.data[:n].tolist(), ev.ids[:n]
            episodes = ev.episode.data[:n].tolist()
            status = self.worker.statuses(range(n))
            later = self._superseders(n)
        return iter([StoredEvent.from_row(ids[i], rows[i], episodes[i], status[i],
                                          None if i not in later else (ids[later[i][0]], ts[later[i][0]]))
                     for i in sorted(range(n), key=lambda i: (ts[i], ids[i]))])

    def event(self, event_id: int) -> StoredEvent:
        """One stored event; ``UnknownEventError`` (a KeyError) when there is no such id (never
        given out, or forgotten)."""
        with self.store.lock:
            row = self._row(event_id)
            ev = self.store.events
            episode = int(ev.episode.data[row])
            status = self.worker.statuses([row])[0]
            later = self._superseders(len(ev)).get(row, [None])[0]
            until = None if later is None else (ev.ids[later], ev.rows[later].timestamp)
            return StoredEvent.from_row(event_id, ev.rows[row], episode, status, until)

    def _row(self, event_id: int) -> int:
        """The row of stable id ``event_id`` (caller holds a store lock)."""
        ev = self.store.events
        row = ev.row_of.get(event_id) if lifecycle.is_event_id(event_id) else None
        if row is None:
            raise UnknownEventError(f"no event {event_id!r} in this memory (forgotten, or never added)"
                                    if len(ev) else f"no event {event_id!r}: this memory is empty")
        return row

    def _superseders(self, n: int) -> dict[int, list[int]]:
        """Row -> the rows that supersede it, first first (caller holds the store lock)."""
        later, earlier, _ = self.store.graph.edges("supersedes")
        return validity.superseders(later, earlier, self.store.events.timestamps.data, n)

    def export_jsonl(self, path: str | os.PathLike) -> None:
        """Write the memory as portable JSON lines (format: ``magma_torch.store.jsonl``): configs,
        events with their embeddings, every relation's edges, entities, episodes, the slow-path
        queue and statuses, the consolidator's state. Atomic, like ``save``."""
        jsonl.write_jsonl(self._capture(), path)

    @classmethod
    def import_jsonl(cls, path: str | os.PathLike, *, namespace: str | None = None,
                     store_dir: str | os.PathLike | None = None, durable: bool = False,
                     embedder: Embedder | None = None, device: str | None = None, llm: LLM | None = None
                     ) -> "MagmaMemory":
        """A memory exactly as ``export_jsonl`` wrote it, under its own or another ``namespace``;
        with ``store_dir``, that namespace must hold no events yet, and the import is checkpointed
        there. Raises ``CorruptSaveError`` naming the file and line of a damaged export."""
        saved = jsonl.read_jsonl(path)
        if namespace is not None:
            saved.state["namespace"] = namespace
        return cls._from_saved(saved, embedder=embedder, device=device, llm=llm, store_dir=store_dir,
                               durable=durable)

    @staticmethod
    def namespaces(store_dir: str | os.PathLike) -> list[str]:
        """The namespaces (tenants) of ``store_dir`` that hold a checkpoint, sorted."""
        return durability.namespaces(store_dir)

    @classmethod
    def load(cls, path: str | os.PathLike, *, embedder: Embedder | None = None,
             device: str | None = None, llm: LLM | None = None, read_only: bool = False) -> "MagmaMemory":
        """Rebuild a memory written by ``save``; its pending events are consolidated by the
        worker as usual. With ``read_only`` it is a view to read as ``open_readonly`` gives one:
        no LLM is built (a memory an LLM consolidated opens without one; its consolidator's state
        is kept for a save), its pending events stay pending, and the calls that change it raise
        ``ReadOnlyError``.
        Raises ``CorruptSaveError`` naming a missing or damaged file, ``SaveNotFoundError`` (a
        FileNotFoundError) when there is no folder at ``path`` or it is a ``store_dir`` or namespace folder."""
        durability.refuse_memory_folder(path)
        saved = persistence.read_save(path)
        if read_only:
            return cls._read_only_view(saved, Path(path), saved.state["namespace"], embedder=embedder, device=device,
                                       verify=True)
        return cls._from_saved(saved, embedder=embedder, device=device, llm=llm)

    @classmethod
    def open_readonly(cls, store_dir: str | os.PathLike, namespace: str = "default", *,
                      embedder: Embedder | None = None, device: str | None = None) -> "MagmaMemory":
        """The memory of ``store_dir/<namespace>`` as its checkpoint and write-ahead log hold it
        now, to read (``retrieve``, ``events``, ``magma-explain``) while a writer may hold it
        open and go on adding. It takes no lock and writes no file: a torn last log line is left
        out, not cut, and a checkpoint a crash cut short is named, not recovered. It is a copy
        in memory as of this call (open it again to see later writes). Events the checkpoint
        holds unconsolidated stay pending: nothing consolidates here and no consolidation LLM is
        built (a consolidator that needs none is, so that the log's update, forget and backfill
        records restate what they restated in the writer). ``add``, ``forget``, ``update`` and
        ``consolidate`` raise ``ReadOnlyError`` (a RuntimeError)."""
        path, saved, records = durability.read_live(store_dir, namespace)
        wal_seq = saved.state.get("wal_seq", 0)
        return cls._read_only_view(saved, path, namespace, embedder=embedder, device=device, verify=False,
                                   then=lambda mem: durability.replay(records, path / WAL, wal_seq, mem._apply))

    @classmethod
    def _read_only_view(cls, saved: persistence.SavedStore, path: Path, namespace: str, *, embedder: Embedder | None,
                        device: str | None, verify: bool, then=None) -> "MagmaMemory":
        """``saved`` in a memory without a consolidator or worker thread (its queue is kept, not
        worked on) that refuses every change; ``then(mem)`` runs on it before it is marked read-only."""
        config = saved_config(saved.state["config"])
        config.slow_path.background = False
        # Its consolidator is built, so that replayed lifecycle records restate or requeue as in the writer,
        # unless it needs an LLM: a stand-in then keeps its state. Before, none was, and a view replaying an
        # update or forget differed from the writer (supersessions, causal links, queue); its save lost the
        # consolidation.
        consolidation = saved.state["consolidation"]
        asks_llm = "llm" in consolidation
        mem = cls(config, "none" if asks_llm else consolidation, namespace=namespace, device=device,
                  embedder=embedder)
        if asks_llm:
            mem.consolidation_config = consolidation_config(consolidation)
            mem.consolidator = mem.worker.consolidator = Unasked()
        try:
            mem._restore(saved, verify=verify)
            if then is not None:
                then(mem)
        except BaseException:
            mem._close_unopened()
            raise
        mem._read_only_view_of = path
        return mem

    @classmethod
    def _from_saved(cls, saved: persistence.SavedStore, *, embedder: Embedder | None, device: str | None,
                    llm: LLM | None, store_dir: str | os.PathLike | None = None,
                    durable: bool = False) -> "MagmaMemory":
        s = saved.state
        # a namespace this import makes is removed when the import is refused: nothing is stored
        folder = None if store_dir is None else Path(store_dir) / s["namespace"]
        fresh = folder if folder is not None and not folder.exists() else None
        mem = cls(saved_config(s["config"]), s["consolidation"], namespace=s["namespace"], device=device,
                  embedder=embedder, llm=llm, store_dir=store_dir, durable=durable)
        try:
            if len(mem.store):
                raise NamespaceNotEmptyError(f"{mem.path}: namespace {mem.namespace!r} holds {len(mem.store)} events; "
                                      "import into a new or empty namespace")
            mem._restore(saved, verify=True)
            if mem.path is not None:
                mem.checkpoint()
        except BaseException:
            mem._close_unopened()
            if fresh is not None:
                shutil.rmtree(fresh, ignore_errors=True)
            raise
        return mem

    def _restore(self, saved: persistence.SavedStore, verify: bool = False) -> None:
        """Load ``saved`` into the empty store; with ``verify`` (a save or export from outside,
        which a hand edit may have broken) its integrity is checked before anything works on it."""
        # a hand-edited field of the wrong type
        with persistence.named_damage(saved.path, (TypeError, ValueError, KeyError)):
            try:
                tokens = persistence.load_store(saved, self.store, partial(fast_path.embed_text, cfg=self.fast_cfg))
            except IndexError as err:       # a node index out of range: load_store places rows by index
                raise CorruptSaveError(f"{saved.path}: an index points past its table: {err}") from None
        if len(self.store) and not len(self.store.episodes):  # a save from before episodes
            with self.store.lock:
                assign_episodes(self.store, range(len(self.store)), self.store.events.embeddings.data,
                                self.fast_cfg.episodes, tokens)
        if verify:
            # a link past its table (prev=99) fails in the derived columns
            with persistence.named_damage(saved.path, (IndexError, TypeError, ValueError, KeyError)):
                found = integrity.problems(self.store) + _queue_problems(saved.state["worker"], len(self.store))
            if found:
                raise CorruptSaveError(f"{saved.path}: {len(found)} integrity problem(s): " + "; ".join(found[:5]))
        if self.consolidator is not None:
            with persistence.named_damage(saved.path, (TypeError, ValueError, KeyError, AttributeError),
                                          "the consolidator's state: "):   # e.g. a hand-edited export
                self.consolidator.load_state_dict(saved.state["consolidator"])
        # Last: a background worker starts on the queue as soon as it has one.
        self.worker.load_state_dict(saved.state["worker"])


def _query_time(t, i: int, n: int) -> datetime | None:
    """Question ``i``'s query time read as events are stored (the wall clock); a bad one names it."""
    try:
        return None if t is None else parse_timestamp(t)
    except ValueError as err:
        raise QueryError(f"query_time{f' of question {i}' if n > 1 else ''}: {err}") from None


def _queue_problems(worker_state: dict, n: int) -> list[str]:
    """What breaks the slow-path bookkeeping's invariants: every pending event queued once."""
    queue, out = worker_state["queue"], []
    if len(set(queue)) != len(queue) or not all(0 <= i < n for i in queue):
        out.append(f"slow-path queue holds duplicate or unknown events: {queue[:20]}")
    pending = {i for i, (s, _) in enumerate(worker_state["status"]) if s == "pending"}
    if pending != set(queue):
        out.append(f"pending events {sorted(pending ^ set(queue))[:20]} are not queued, or queued ones not pending")
    return out
