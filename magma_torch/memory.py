"""MagmaMemory: the facade that wires ingest, store and query together."""
from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from functools import partial

import hydra.utils
from omegaconf import DictConfig, OmegaConf

from magma_torch.config import load_group
from magma_torch.eval.prompts import answer_prompt
from magma_torch.ingest import fast_path
from magma_torch.ingest.embedder import Embedder, resolve_device
from magma_torch.ingest.temporal import parse_timestamp
from magma_torch.ingest.worker import SlowPathWorker
from magma_torch.llm.base import LLM
from magma_torch.query.intent import IntentClassifier
from magma_torch.query.retriever import Retrieval, RetrievalConfig, Retriever
from magma_torch.store import persistence
from magma_torch.store.store import MemoryStore


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
                 device: str | None = None, embedder: Embedder | None = None, llm: LLM | None = None):
        self.llm, self._owns_llm = llm, False  # the consolidation LLM (consolidation=llm)
        self.config = _as_config(config, "memory", "magma")
        self.consolidation_config = _as_config(consolidation, "consolidation", "heuristic")
        self.namespace = namespace
        cfg = self.config
        self.device = resolve_device(device or cfg.device)
        self.embedder = embedder or Embedder(device=self.device, **cfg.embedder)
        self.store = MemoryStore(self.embedder.dim, self.device, cfg.vector_backend, cfg.bm25.k1, cfg.bm25.b)
        self.fast_cfg = fast_path.FastPathConfig(**cfg.fast_path)
        self.consolidator = self._make_consolidator()
        self.worker = SlowPathWorker(self.store, self.embedder, self.consolidator, cfg.slow_path.batch_size,
                                     cfg.slow_path.window, background=cfg.slow_path.background,
                                     **self._caps())
        self.retriever = Retriever(self.embedder, IntentClassifier.load(device=self.device),
                                   RetrievalConfig.from_mapping(OmegaConf.to_container(cfg.retrieval, resolve=True)))

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
        keys = ("max_causal_per_event", "max_entities_per_event")
        return {k: c[k] for k in keys if c is not None and k in c}

    # ---- fast path ----
    def add(self, text: str, timestamp, speaker: str | None = None, source_id: str | None = None,
            session_id: str | None = None, metadata: Mapping | None = None, stream: str | None = None) -> int:
        """Add one event; returns its id (the existing id when ``source_id`` is known)."""
        rec = {"text": text, "timestamp": timestamp, "speaker": speaker, "source_id": source_id,
               "session_id": session_id, "metadata": metadata, "stream": stream}
        return self.add_many([{k: v for k, v in rec.items() if v is not None or k in ("text", "timestamp")}])[0]

    def add_many(self, records: Iterable[Mapping]) -> list[int]:
        """Batched fast path; validates the whole batch first, then writes it."""
        ids, new = fast_path.ingest(records, self.store, self.embedder, self.fast_cfg)
        self.worker.submit(new)
        return ids

    # ---- slow path ----
    def consolidate(self) -> None:
        """Block until the slow-path queue is drained."""
        self.worker.drain()

    # ---- query ----
    def retrieve(self, question: str, query_time=None, budget_tokens: int | None = None) -> Retrieval:
        return self.retrieve_batch([question], [query_time], budget_tokens)[0]

    def retrieve_batch(self, questions: Sequence[str], query_times: Sequence | None = None,
                       budget_tokens: int | None = None) -> list[Retrieval]:
        questions = list(questions)
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

    def stats(self) -> dict:
        s = self.store.stats()
        s["queue"] = self.worker.pending()
        s["namespace"] = self.namespace
        return s

    def close(self) -> None:
        self.worker.close()
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
        # Paused between batches and under the store lock, queue, statuses, consolidator
        # state and store agree; the files are then written without holding either.
        with self.worker.paused(), self.store.lock:
            c = self.consolidation_config
            files = persistence.encode_store(self.store, {
                "namespace": self.namespace,
                "config": OmegaConf.to_container(self.config, resolve=True),
                "consolidation": {} if c is None else OmegaConf.to_container(c, resolve=True),
                "worker": self.worker.state_dict(len(self.store)),
                "consolidator": None if self.consolidator is None else self.consolidator.state_dict()})
        persistence.write_save(path, files)

    @classmethod
    def load(cls, path: str | os.PathLike, *, embedder: Embedder | None = None,
             device: str | None = None, llm: LLM | None = None) -> "MagmaMemory":
        """Rebuild a memory written by ``save``; its pending events are consolidated by the
        worker as usual. Raises ``CorruptSaveError`` naming a missing or damaged file."""
        saved = persistence.read_save(path)
        s = saved.state
        mem = cls(s["config"], s["consolidation"], namespace=s["namespace"], device=device, embedder=embedder,
                  llm=llm)
        try:
            persistence.load_store(saved, mem.store, partial(fast_path.embed_text, cfg=mem.fast_cfg))
            if mem.consolidator is not None:
                mem.consolidator.load_state_dict(s["consolidator"])
            # Last: a background worker starts on the queue as soon as it has one.
            mem.worker.load_state_dict(s["worker"])
        except BaseException:
            mem.close()
            raise
        return mem
