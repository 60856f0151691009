"""MagmaMemory: the facade that wires ingest, store and query together."""
from __future__ import annotations

import fcntl
import os
import re
import shutil
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import IO

import hydra.utils
from omegaconf import DictConfig, OmegaConf

from magma_torch import lifecycle
from magma_torch.config import load_group
from magma_torch.eval.prompts import answer_prompt
from magma_torch.events import StoredEvent, UnknownEventError
from magma_torch.ingest import fast_path
from magma_torch.ingest.embedder import Embedder, resolve_device
from magma_torch.ingest.episodes import assign_episodes
from magma_torch.ingest.temporal import parse_timestamp
from magma_torch.ingest.worker import SlowPathWorker
from magma_torch.llm.base import LLM
from magma_torch.query.intent import IntentClassifier
from magma_torch.query.retriever import Retrieval, RetrievalConfig, Retriever
from magma_torch.store import integrity, jsonl, live_read, persistence, validity
from magma_torch.store.store import MemoryStore
from magma_torch.store.wal import WriteAheadLog

CHECKPOINT, WAL, LOCK = "checkpoint", "wal.jsonl", ".lock"
_NAMESPACE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


def _as_config(cfg, group: str, default: str) -> DictConfig | None:
    if cfg is None:
        return load_group(group, default)
    if isinstance(cfg, str):
        return load_group(group, cfg)
    return OmegaConf.create(cfg) if not isinstance(cfg, DictConfig) else cfg


class MagmaMemory:
    """A multi-graph memory: ``add`` events, ``consolidate``, ``retrieve``.

    ``config`` is a memory config (a name under ``conf/memory``, a mapping or a
    DictConfig); ``consolidation`` a consolidation config (``conf/consolidation``:
    "heuristic" by default, "none" for no slow path, "llm" for LLM consolidation, which
    uses ``llm`` — or, when that is None, an LLM built from the config's ``llm`` entry).
    """

    def __init__(self, config: str | Mapping | DictConfig | None = None,
                 consolidation: str | Mapping | DictConfig | None = None, *, namespace: str = "default",
                 device: str | None = None, embedder: Embedder | None = None, llm: LLM | None = None,
                 store_dir: str | os.PathLike | None = None, durable: bool = False):
        if durable and store_dir is None:
            raise ValueError("durable=True needs a store_dir")
        # A persistent memory lives in store_dir/<namespace>: its last checkpoint (a save
        # folder) and, when durable, the write-ahead log of what came after it.
        self.path = None if store_dir is None else Path(store_dir) / check_namespace(namespace)
        self._wal, self._since_checkpoint, self._folder_lock = None, 0, None
        self._read_only_view_of: Path | None = None  # the folder open_readonly read
        saved = None
        if self.path is not None:
            saved = self._open_folder()
            if saved is not None:
                config = saved_config(saved.state["config"]) if config is None else config
                consolidation = saved.state["consolidation"] if consolidation is None else consolidation
        self.llm, self._owns_llm = llm, False  # the consolidation LLM (consolidation=llm)
        self.config = _as_config(config, "memory", "magma")
        self.consolidation_config = _as_config(consolidation, "consolidation", "heuristic")
        self.namespace = namespace
        cfg = self.config
        self.device = resolve_device(device or cfg.device)
        self.embedder = embedder or Embedder(device=self.device, **cfg.embedder)
        self.store = self.new_store()
        self.fast_cfg = fast_path.FastPathConfig(**cfg.fast_path)
        self.consolidator = self._make_consolidator()
        self.worker = SlowPathWorker(self.store, self.embedder, self.consolidator, cfg.slow_path.batch_size,
                                     cfg.slow_path.window, background=cfg.slow_path.background,
                                     **self._caps())
        self.retriever = Retriever(self.embedder, IntentClassifier.load(device=self.device),
                                   RetrievalConfig.from_mapping(OmegaConf.to_container(cfg.retrieval, resolve=True)))
        if self.path is not None:
            self._open_store(saved, durable)

    def new_store(self) -> MemoryStore:
        """An empty store with this memory's settings."""
        cfg = self.config
        return MemoryStore(self.embedder.dim, self.device, cfg.vector_backend, cfg.bm25.k1, cfg.bm25.b,
                           cfg.chain_span, cfg.scan_dtype)

    # ---- persistent stores ----
    def _open_folder(self) -> persistence.SavedStore | None:
        """Lock the store folder, finish a checkpoint a crash interrupted, read the checkpoint."""
        self.path.mkdir(parents=True, exist_ok=True)
        self._folder_lock = _lock_folder(self.path)
        try:
            persistence.recover_interrupted_save(self.path / CHECKPOINT)
            return persistence.read_save(self.path / CHECKPOINT) if (self.path / CHECKPOINT).exists() else None
        except BaseException:
            self._folder_lock.close()
            self._folder_lock = None
            raise

    def _open_store(self, saved: persistence.SavedStore | None, durable: bool) -> None:
        """Load the last checkpoint (or write an empty first one) and replay the log onto it."""
        try:
            if saved is None:
                if (self.path / WAL).exists():
                    raise persistence.CorruptSaveError(
                        f"{self.path / WAL}: a write-ahead log without its checkpoint {self.path / CHECKPOINT}")
                self.checkpoint()
                seq = 0
            else:
                _check_holds(saved, self.namespace)
                _check_same_ingest(saved, self.config)
                self._restore(saved)
                seq = saved.state.get("wal_seq", 0)  # 0: a folder written by save()
            if durable or (self.path / WAL).exists():
                self._wal = WriteAheadLog(self.path / WAL, seq)
                self._replay(self._wal.records, self._wal.path, seq)
                if not durable:  # fold the log into a checkpoint: no later add is logged after it
                    self.checkpoint()
                    self._wal.close()
                    self._wal = None
        except BaseException:
            self.close(checkpoint=False)
            raise

    def _replay(self, records: list[dict], log: Path, checkpoint_seq: int) -> None:
        for rec in records:
            if rec["seq"] <= checkpoint_seq:  # already in the checkpoint (a crash before the log was emptied)
                continue
            if rec.get("op") in ("forget", "update", "backfill"):
                try:
                    with self.store.ingest_lock, self.worker.paused(), self.store.lock:
                        lifecycle.replay(self, rec)
                except persistence.CorruptSaveError as err:
                    raise persistence.CorruptSaveError(f"{log}: {err}; nothing was changed on disk") from None
                continue
            if rec.get("op") != "add" or rec.get("first") != len(self.store):
                raise persistence.CorruptSaveError(
                    f"{log}: record {rec['seq']} ({rec.get('op')!r} at event {rec.get('first')}) does not "
                    f"follow the checkpoint's {len(self.store)} events; nothing was changed on disk")
            self.worker.submit(fast_path.apply(fast_path.PreparedBatch.from_record(rec, self.store), self.store,
                                               self.fast_cfg))
        self._since_checkpoint = len(records)

    def _log(self, batch: fast_path.PreparedBatch) -> None:
        self._log_record(batch.to_record(self.store))

    def _log_record(self, record: dict) -> None:
        """Append one record (an add batch, a forget, an update) to the log, fsynced, and count it
        towards the next checkpoint; a memory without a log has nothing to do."""
        if self._wal is not None:
            self._wal.append([record])
            self._since_checkpoint += 1

    def checkpoint(self) -> None:
        """Write the whole memory as ``store_dir/<namespace>/checkpoint`` (atomically: temporary
        folder, fsync, rename), then empty the write-ahead log. Adds wait meanwhile."""
        if self.path is None:
            raise ValueError("checkpoint() needs a memory opened with store_dir")
        with self.store.ingest_lock:  # every logged add is in the store, and none starts
            files = self._encode(wal_seq=0 if self._wal is None else self._wal.seq)
            try:
                persistence.write_save(self.path / CHECKPOINT, files)
            except OSError as err:
                raise OSError(err.errno, f"checkpoint of {self.path} failed ({err.strerror or err}); the previous "
                                         "checkpoint and the write-ahead log are intact") from err
            if self._wal is not None:
                self._wal.reset()
            self._since_checkpoint = 0

    def check(self) -> None:
        """Raise ``IntegrityError`` when the store or the slow-path bookkeeping breaks an
        invariant (see ``magma_torch.store.integrity``)."""
        with self.worker.paused(), self.store.lock:
            found = integrity.problems(self.store)
            state = self.worker.state_dict(len(self.store))
        queue = state["queue"]
        if len(set(queue)) != len(queue) or not all(0 <= i < len(self.store) for i in queue):
            found.append(f"slow-path queue holds duplicate or unknown events: {queue[:20]}")
        pending = {i for i, (s, _) in enumerate(state["status"]) if s == "pending"}
        if pending != set(queue):
            found.append(f"pending events {sorted(pending ^ set(queue))[:20]} are not queued, or queued ones not pending")
        if found:
            raise integrity.IntegrityError(f"{len(found)} integrity problem(s): " + "; ".join(found[:20]))

    def _make_consolidator(self):
        c = self.consolidation_config
        if c is None or c.get("_target_") is None:
            return None
        if "llm" not in c.keys():  # (`in c` is False for a missing "???" value)
            return hydra.utils.instantiate(c)
        # An LLM consolidator: the LLM passed in, else one built from the config's `llm` entry.
        if self.llm is None:
            spec = None if OmegaConf.is_missing(c, "llm") else c.llm
            if not spec:
                raise ValueError("this consolidation config needs an LLM: pass MagmaMemory(..., llm=...) "
                                 "or set consolidation.llm to an llm config")
            from magma_torch.llm import build_llm   # lazy: backends pull heavy optional deps

            self.llm = build_llm(spec)
            self._owns_llm = True
        return hydra.utils.instantiate(c, llm=self.llm)

    def _caps(self) -> dict:
        c = self.consolidation_config
        keys = ("max_causal_per_event", "max_entities_per_event", "max_supersedes_per_event")
        return {k: c[k] for k in keys if c is not None and k in c}

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
                                  journal=None if self._wal is None else self._log, submit=self.worker.submit,
                                  insert=self._insert if backfill else None)
        self._checkpoint_when_due()
        return ids

    def _insert(self, batch: fast_path.PreparedBatch) -> list[int]:
        with self.worker.paused(), self.store.lock:
            return lifecycle.backfill_rows(self, batch)

    def _check_writable(self) -> None:
        if self._read_only_view_of is not None:
            raise RuntimeError(f"{self._read_only_view_of}: opened with open_readonly, which never changes it; "
                               "open it with MagmaMemory(store_dir=..., namespace=...) to change it")

    def _checkpoint_when_due(self) -> None:
        if self._wal is not None and self._since_checkpoint >= self.config.durability.checkpoint_every:
            self.checkpoint()

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
        if self.path is not None:
            self.checkpoint()
        return out

    def update(self, event_id: int, text: str | None = None, timestamp=None) -> StoredEvent:
        """Correct an event's ``text`` and/or ``timestamp``; it keeps its id. It is embedded again,
        its semantic edges are derived again, its entity and causal edges dropped and the event
        queued for consolidation again; its episode's embedding and keyword document follow.
        Validated as ``add`` validates (``IngestError``: empty text, a time past the future
        horizon, or one that would break its stream's order: an update keeps the event's place,
        between its stream's previous and next event). Durable like ``add``."""
        self._check_writable()
        if text is None and timestamp is None:
            raise ValueError("update() needs a new text or timestamp")
        with self.store.ingest_lock:
            row = self._row(event_id)
            new = fast_path.revise(self.store, row, text, timestamp, self.fast_cfg)
            emb = self.embedder.encode([fast_path.embed_text(new, self.fast_cfg)])
            emb = emb.to(self.store.device, self.store.events.embeddings.data.dtype)
            with self.worker.paused(), self.store.lock:
                self._log_record(lifecycle.update_record(event_id, new, emb))
                lifecycle.update_row(self, row, new, emb)
        self._checkpoint_when_due()
        return self.event(event_id)

    @staticmethod
    def forget_namespace(store_dir: str | os.PathLike, namespace: str) -> None:
        """Delete a tenant: the folder ``store_dir/<namespace>`` with its checkpoint and log. Refuses
        (RuntimeError) while a memory holds it open, in this or another process."""
        path = Path(store_dir) / check_namespace(namespace)
        if not (path / CHECKPOINT).is_dir() and not (path / WAL).exists():
            raise FileNotFoundError(f"{path}: no namespace {namespace!r} in {store_dir}")
        lock = _lock_folder(path)
        try:
            # One rename takes the namespace away at once; what a crash leaves of the deletion is a
            # hidden folder, removed by the next call.
            doomed = path.with_name(f".{namespace}.deleting-{uuid.uuid4().hex}")
            os.rename(path, doomed)
            persistence.fsync_dir(path.parent)
        finally:
            lock.close()
        for leftover in path.parent.glob(f".{namespace}.deleting-*"):
            shutil.rmtree(leftover)

    # ---- slow path ----
    def consolidate(self) -> None:
        """Block until the slow-path queue is drained; a persistent memory then checkpoints,
        so the consolidation is on disk (it is not logged: after a crash, what was
        consolidated since the last checkpoint is queued again, never applied twice)."""
        self._check_writable()
        self.worker.drain()
        if self.path is not None:
            self.checkpoint()

    # ---- query ----
    def retrieve(self, question: str, query_time=None, budget_tokens: int | None = None) -> Retrieval:
        return self.retrieve_batch([question], [query_time], budget_tokens)[0]

    def retrieve_batch(self, questions: Sequence[str], query_times: Sequence | None = None,
                       budget_tokens: int | None = None) -> list[Retrieval]:
        questions = list(questions)
        for i, q in enumerate(questions):
            if not isinstance(q, str) or not q.strip():
                what = "empty" if isinstance(q, str) else f"a {type(q).__name__}, not a string"
                where = f"question {i}" if len(questions) > 1 else "the question"
                raise ValueError(f"{where} is {what}: {q!r}")
        times = [None] * len(questions) if query_times is None else list(query_times)
        if len(times) != len(questions):
            raise ValueError(f"query_times has {len(times)} entries for {len(questions)} questions")
        times = [None if t is None else (t if isinstance(t, datetime) else parse_timestamp(t)) for t in times]
        return self.retriever.retrieve_batch(self.store.snapshot(), questions, times, budget_tokens)

    def answer(self, question: str, llm: LLM, query_time=None, max_tokens: int = 128) -> tuple[str, Retrieval]:
        """Retrieve for ``question`` and let ``llm`` answer from the context with the prompt of
        the predicted intent. Returns (answer text, retrieval); raises RuntimeError when the
        generation failed."""
        r = self.retrieve(question, query_time)
        t = query_time if query_time is None or isinstance(query_time, datetime) else parse_timestamp(query_time)
        g = llm.generate([answer_prompt(question, r.context, r.intent, t)], max_tokens=max_tokens,
                         temperature=0.0)[0]
        if g.error is not None:
            raise RuntimeError(f"answer generation failed: {g.error}")
        return g.text.strip(), r

    @property
    def graph(self):
        """The live multigraph as a zero-copy PyG ``HeteroData`` snapshot (``MemoryStore.hetero_data``)."""
        return self.store.hetero_data()

    def stats(self) -> dict:
        s = self.store.stats()
        s["queue"] = self.worker.pending()
        s["namespace"] = self.namespace
        return s

    def close(self, checkpoint: bool = True) -> None:
        """Stop the slow path (a persistent memory checkpoints first, unless ``checkpoint`` is
        False) and release the LLM this memory built."""
        try:
            if checkpoint and self._folder_lock is not None and (self.path / CHECKPOINT).exists():
                self.checkpoint()
        finally:
            self.worker.close()
            if self._wal is not None:
                self._wal.close()
                self._wal = None
            if self._folder_lock is not None:
                self._folder_lock.close()  # releases the lock
                self._folder_lock = None
            if self._owns_llm and self.llm is not None:
                self.llm.close()
                self._owns_llm = False

    def __enter__(self) -> "MagmaMemory":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def save(self, path: str | os.PathLike) -> None:
        """Write the memory to folder ``path``: store, configs, slow-path queue and
        consolidator state (format: ``magma_torch.store.persistence``). Atomic: an
        earlier save at ``path`` is replaced only once the new one is on disk."""
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
        """Every stored event, oldest first (by timestamp, then id), as of this call."""
        with self.store.lock:
            ev = self.store.events
            n = len(ev)
            rows, ts, ids = ev.rows[:n], ev.timestamps.data[:n].tolist(), ev.ids[:n]
            episodes = ev.episode.data[:n].tolist()
            status = self.worker.statuses(range(n))
            later = self._superseders(n)
        for i in sorted(range(n), key=lambda i: (ts[i], ids[i])):
            yield StoredEvent.from_row(ids[i], rows[i], episodes[i], status[i],
                                       None if i not in later else (ids[later[i][0]], ts[later[i][0]]))

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
        root = Path(store_dir)
        if not root.is_dir():
            raise FileNotFoundError(f"{root}: no such store_dir")
        return sorted(p.name for p in root.iterdir()
                      if _NAMESPACE.fullmatch(p.name) and (p / CHECKPOINT).is_dir())

    @classmethod
    def load(cls, path: str | os.PathLike, *, embedder: Embedder | None = None,
             device: str | None = None, llm: LLM | None = None) -> "MagmaMemory":
        """Rebuild a memory written by ``save``; its pending events are consolidated by the
        worker as usual. Raises ``CorruptSaveError`` naming a missing or damaged file."""
        return cls._from_saved(persistence.read_save(path), embedder=embedder, device=device, llm=llm)

    @classmethod
    def open_readonly(cls, store_dir: str | os.PathLike, namespace: str = "default", *,
                      embedder: Embedder | None = None, device: str | None = None) -> "MagmaMemory":
        """The memory of ``store_dir/<namespace>`` as its checkpoint and write-ahead log hold it
        now, to read (``retrieve``, ``events``, ``magma-explain``) while a writer may hold it
        open and go on adding. It takes no lock and writes no file: a torn last log line is left
        out, not cut, and a checkpoint a crash cut short is named, not recovered. It is a copy
        in memory as of this call (open it again to see later writes). Events the checkpoint
        holds unconsolidated stay pending: nothing consolidates here and no consolidation LLM is
        built. ``add``, ``forget``, ``update`` and ``consolidate`` raise RuntimeError."""
        path = Path(store_dir) / check_namespace(namespace)
        saved, records = live_read.read_checkpoint_and_log(path / CHECKPOINT, path / WAL)
        _check_holds(saved, namespace)
        config = saved_config(saved.state["config"])
        config.slow_path.background = False  # no worker thread: the queue is kept, not worked on
        mem = cls(config, "none", namespace=namespace, device=device, embedder=embedder)
        try:
            mem._restore(saved)
            mem._replay(records, path / WAL, saved.state.get("wal_seq", 0))
        except BaseException:
            mem.close(checkpoint=False)
            raise
        mem._read_only_view_of = path
        return mem

    @classmethod
    def _from_saved(cls, saved: persistence.SavedStore, *, embedder: Embedder | None, device: str | None,
                    llm: LLM | None, store_dir: str | os.PathLike | None = None,
                    durable: bool = False) -> "MagmaMemory":
        s = saved.state
        mem = cls(saved_config(s["config"]), s["consolidation"], namespace=s["namespace"], device=device,
                  embedder=embedder, llm=llm, store_dir=store_dir, durable=durable)
        try:
            if len(mem.store):
                raise FileExistsError(f"{mem.path}: namespace {mem.namespace!r} holds {len(mem.store)} events; "
                                      "import into a new or empty namespace")
            mem._restore(saved)
            if mem.path is not None:
                mem.checkpoint()
        except BaseException:
            mem.close(checkpoint=False)
            raise
        return mem

    def _restore(self, saved: persistence.SavedStore) -> None:
        tokens = persistence.load_store(saved, self.store, partial(fast_path.embed_text, cfg=self.fast_cfg))
        if len(self.store) and not len(self.store.episodes):  # a save from before episodes
            with self.store.lock:
                assign_episodes(self.store, range(len(self.store)), self.store.events.embeddings.data,
                                self.fast_cfg.episodes, tokens)
        if self.consolidator is not None:
            self.consolidator.load_state_dict(saved.state["consolidator"])
        # Last: a background worker starts on the queue as soon as it has one.
        self.worker.load_state_dict(saved.state["worker"])


def _lock_folder(path: Path) -> IO:
    """An exclusive lock on the store folder for as long as this memory is open: two writers
    appending to one log would interleave their event ids. The kernel drops it when the
    process dies, so a killed process never leaves the folder locked."""
    f = open(path / LOCK, "a+b")
    try:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        f.close()
        raise RuntimeError(f"{path}: this memory is open elsewhere (another MagmaMemory or process holds "
                           f"{path / LOCK}); close that one first") from None
    return f


def check_config(config: DictConfig) -> None:
    """Build the typed fast-path and retrieval settings of a memory config: an unknown relation,
    signal or episode setting raises ValueError in one line before any work starts."""
    fast_path.FastPathConfig(**config.fast_path)
    RetrievalConfig.from_mapping(OmegaConf.to_container(config.retrieval, resolve=True))


def check_namespace(namespace: str) -> str:
    """A namespace names a folder of its own: letters, digits, ``._-``, no path tricks."""
    if not isinstance(namespace, str) or not _NAMESPACE.fullmatch(namespace):
        raise ValueError(f"namespace {namespace!r}: use 1-128 letters, digits, '.', '_' or '-', "
                         "starting with a letter or digit")
    return namespace


def saved_config(config: Mapping) -> DictConfig:
    """A memory config as a save recorded it, with settings added to the toolkit since then
    (e.g. ``chain_span``, ``retrieval.similarity``) at their defaults."""
    defaults = load_group("memory", "magma")
    OmegaConf.set_struct(defaults, False)   # a key this version no longer has is kept, not refused
    return OmegaConf.merge(defaults, config)


def _check_holds(saved: persistence.SavedStore, namespace: str) -> None:
    if saved.state["namespace"] != namespace:
        raise ValueError(f"{saved.path}: holds namespace {saved.state['namespace']!r}, opened as {namespace!r}")


def _check_same_ingest(saved: persistence.SavedStore, config: DictConfig) -> None:
    """Replaying the log with other fast-path settings would give other edges: refuse. Settings
    added since the save are compared at their defaults, and the future horizon, which refuses
    records but makes no edge, not at all."""
    stored = saved_config(saved.state["config"])
    for key in ("embedder", "fast_path"):
        was, now = (OmegaConf.to_container(c[key], resolve=True) for c in (stored, config))
        if key == "fast_path":
            was.pop("future_horizon_days", None)
            now.pop("future_horizon_days", None)
        if was != now:
            raise ValueError(f"{saved.path}: stored with memory.{key}={was}, opened with memory.{key}={now}; "
                             "open it with the stored config (config=None)")
