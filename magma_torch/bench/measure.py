"""One magma-bench measurement: build a synthetic memory, ingest it in bulk, time the
batched query path against the plain-Python reference and the vector_rag baseline.

Timed retrieval is the tensor part of Algorithm 1 on embedded questions: intent head,
RRF anchors (dense + time + dense temporal-context rankings; synthetic events have no
words, so the keyword signals are off), beam search and salience ordering. Embedding the
question is timed on its own (MiniLM, batch 1) when sentence-transformers is installed.
"""
from __future__ import annotations

import math
import os
import resource
import sys
import time
from dataclasses import dataclass, fields
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import psutil
import torch
from tqdm import tqdm

from magma_torch.bench.reference import RowLists, reference_graph
from magma_torch.bench.synthetic import (SyntheticGraphConfig, SyntheticQueriesConfig, event_rows, make_queries,
                                         synthesize)
from magma_torch.config.resolve import settings, typed, yaml_option
from magma_torch.config.schema import SIGNALS, TEXT_SIGNALS, ConfigError, RetrievalConfig
from magma_torch.hardware import cpu_flags, cpu_model, scan_probe
from magma_torch.ingest import bulk
from magma_torch.provenance import code_commit
from magma_torch.query.anchors import Anchors
from magma_torch.query.beam import BeamResult, salience_order
from magma_torch.query.intent import INTENTS, IntentClassifier
from magma_torch.query.reference import reference_beam_search
from magma_torch.query.retriever import Retriever
from magma_torch.store.packed_half import PackedView
from magma_torch.store.store import MemoryStore
from magma_torch.store.tables import scan_copy_name


def load_config(path: str | Path | None = None):
    """conf/bench/default.yaml (or ``path``, kept as ``config_file``) with the retrieval block of
    the memory config it names (conf/memory/<memory>.yaml next to the bench folder, composed
    against the schema without Hydra) under ``retrieval``, and that config's store settings
    ``chain_span`` and ``scan_dtype``. A memory the timed graph path cannot stand for is refused."""
    from omegaconf import OmegaConf

    if path is None:
        from importlib.resources import files

        path = files("magma_torch.conf") / "bench" / "default.yaml"
    path = Path(str(path))
    cfg = OmegaConf.load(path)
    memory = yaml_option(path.parent.parent / "memory", cfg.memory)
    cfg.retrieval = OmegaConf.merge(memory.retrieval, cfg.retrieval)   # typed: a bad override fails here
    cfg.chain_span, cfg.scan_dtype = memory.chain_span, memory.scan_dtype
    cfg.config_file = str(path)
    cfg.graph = typed(SyntheticGraphConfig, cfg.graph, "graph")
    cfg.queries = typed(SyntheticQueriesConfig, cfg.queries, "queries")
    retrieval = settings(typed(RetrievalConfig, cfg.retrieval, "retrieval"))
    Retriever(None, None, retrieval)   # its own checks (kernel, question_adapter file) now, not after the build
    # The timed path is Algorithm 1 whatever the mode: full_context's figures would be magma's
    if retrieval.mode != "graph":
        raise ConfigError(f"{path}: memory {cfg.memory} has retrieval.mode {retrieval.mode!r}, but magma-bench "
                          "times the graph path only: name a memory whose retrieval.mode is 'graph'")
    # Synthetic questions are embeddings without words: a signal that reads the text would fail after the build
    on = retrieval.active_signals
    reading = [f"retrieval.signal_weights.{s}" for s in TEXT_SIGNALS if s in on]
    if reading:
        raise ConfigError(f"{path}: {', '.join(reading)} above 0, but the synthetic questions have no text to read: "
                          "set them to 0, as conf/bench/default.yaml does")
    # No anchors, nothing retrieved: the reference would agree with the empty result every time
    if not on:
        raise ConfigError(f"{path}: memory {cfg.memory} leaves no retrieval signal on the synthetic questions "
                          f"(retrieval.signal_weights and signal_top_k above 0 for one of "
                          f"{', '.join(s for s in SIGNALS if s not in TEXT_SIGNALS)})")
    return cfg


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _memory_now(device: torch.device) -> int:
    """Bytes the process holds: device allocations on CUDA, resident set size on CPU."""
    if device.type == "cuda":
        _sync(device)
        return torch.cuda.memory_allocated(device)
    return psutil.Process().memory_info().rss


def _by_new_endpoint(column: torch.Tensor, lo: int, hi: int) -> slice:
    """Rows of edges sorted by ``column`` whose value lies in [lo, hi)."""
    a, b = torch.searchsorted(column, torch.tensor([lo, hi])).tolist()
    return slice(a, b)


def progress_bar(on: bool, total: int, desc: str, unit: str) -> tqdm:
    """A bar on stderr (stdout carries the JSON record), gone when done: the summary follows."""
    return tqdm(total=total, desc=desc, unit=unit, disable=not on, file=sys.stderr, leave=False)


def ingest(mem, cfg, device: torch.device, tick=lambda n: None) -> tuple[MemoryStore, dict]:
    """Bulk-add the synthetic memory in batches of ``run.ingest_batch`` events (``tick(n)`` after
    each, outside the timed part); the first snapshot (the CSR merge) is part of ingest."""
    store = MemoryStore(mem.embeddings.shape[1], device, cfg.run.vector_backend, chain_span=cfg.chain_span,
                        scan_dtype=cfg.scan_dtype)
    n, batch = mem.num_events, cfg.run.ingest_batch
    sem_new, sem_old, sem_cos = mem.semantic
    cause, effect = mem.causal
    m_event, m_entity = mem.mentions
    event_bytes = edge_bytes = 0
    elapsed = 0.0
    start = _memory_now(device)
    t = time.perf_counter()
    bulk.add_entities(store, mem.entity_names, mem.entity_embeddings, kind="synthetic")
    elapsed += time.perf_counter() - t
    entity_bytes = _memory_now(device) - start
    for lo in range(0, n, batch):
        hi = min(n, lo + batch)
        rows = event_rows(mem, lo, hi)            # input records: built outside the timed part
        s, c, e = (_by_new_endpoint(col, lo, hi) for col in (sem_new, effect, m_event))
        before = _memory_now(device)
        t = time.perf_counter()
        bulk.add_events(store, rows, mem.embeddings[lo:hi], tokens=[[]] * (hi - lo))  # no words to index
        elapsed += time.perf_counter() - t
        mid = _memory_now(device)
        t = time.perf_counter()
        bulk.add_links(store, semantic=(sem_new[s], sem_old[s], sem_cos[s]), causal=(cause[c], effect[c]),
                       mentions=(m_event[e], m_entity[e]))
        elapsed += time.perf_counter() - t
        event_bytes += mid - before
        edge_bytes += _memory_now(device) - mid
        tick(hi - lo)
    before = _memory_now(device)
    t = time.perf_counter()
    snap = store.snapshot()
    _sync(device)
    elapsed += time.perf_counter() - t
    edge_bytes += _memory_now(device) - before
    counts = store.graph.counts()
    edges = sum(counts.values())
    return store, {"snapshot": snap, "ingest_s": elapsed, "edges": edges, "edges_by_relation": counts,
                   "bytes_per_event": event_bytes / n, "bytes_per_edge": edge_bytes / max(edges, 1),
                   "entity_bytes": entity_bytes}


class QueryPath:
    """The timed query path: intent head, question-event cosines, RRF anchors, beam search,
    salience order; in the retriever's passes when a batch's similarity matrix would not fit."""

    def __init__(self, snap, retriever: Retriever, device: torch.device):
        self.snap, self.retriever, self.device = snap, retriever, device
        self.phase_s = {"intent": 0.0, "similarity": 0.0, "anchors": 0.0, "beam": 0.0}

    def __call__(self, q: torch.Tensor, windows: list):
        r, snap, clock = self.retriever, self.snap, self._clock
        intents = clock("intent", lambda: r.intents(q))
        passes, anchors, results = r.passes(snap, q.shape[0]), [], []
        for p in passes:
            sim = clock("similarity", lambda: r.similarity(snap, q[p]))
            anchors.append(clock("anchors", lambda: r.anchors(snap, sim, windows[p])))
            results.append(clock("beam", lambda: r.expand(snap, sim, intents[p], anchors[-1])))
        if len(passes) > 1:   # one batch again: query indices of later passes shifted
            anchors = [Anchors(*(None if c[0] is None else torch.cat(c)
                                 for c in zip(*map(_columns, anchors), strict=True)))]
            cols = [torch.cat(c) for c in zip(*map(_columns, results), strict=True)]
            cols[0] = torch.cat([res.query + p.start for res, p in zip(results, passes, strict=True)])
            results = [BeamResult(*cols)]
        order = clock("beam", lambda: salience_order(results[0]))
        return intents, anchors[0], results[0], order

    def _clock(self, phase: str, step):
        # One sync per phase (five per batch): the per-phase split costs that much; the
        # beam search itself syncs on every boolean selection (its frontier sizes vary).
        t = time.perf_counter()
        out = step()
        _sync(self.device)
        self.phase_s[phase] += time.perf_counter() - t
        return out


def _columns(record) -> list:
    return [getattr(record, f.name) for f in fields(record)]


def _percentile(values: list[float], p: float) -> float:
    return float(np.percentile(np.asarray(values), p)) if values else math.nan


def _timed_batches(fn, q: torch.Tensor, windows: list, batch: int, device: torch.device, keep=None,
                   tick=lambda n: None):
    """Run ``fn`` over q in batches; per-batch seconds, and fn's outputs for batches
    ``keep`` says to keep (by start index). ``tick(questions)`` after each batch, untimed."""
    times, kept = [], {}
    for a in range(0, q.shape[0], batch):
        _sync(device)
        t = time.perf_counter()
        out = fn(q[a:a + batch], windows[a:a + batch])
        _sync(device)
        times.append(time.perf_counter() - t)
        if keep is not None and keep(a):
            kept[a] = out
        tick(min(batch, q.shape[0] - a))
    return times, kept


def _question_embedding_ms(device: torch.device, runs: int = 30) -> float | None:
    """p50 of embedding one question with the bundled MiniLM; None without sentence-transformers."""
    try:
        from magma_torch.text.embedder import Embedder

        embedder = Embedder(device=device)
    except ImportError:
        return None
    question = "What did Caroline say about the charity race she ran last Saturday?"
    return _p50_call_ms(lambda: embedder.encode([question]), device, runs)


def _question_adapter_ms(retriever: Retriever, dim: int, device: torch.device, runs: int = 30) -> float | None:
    """p50 of one question through the question adapter (retrieval.question_adapter), the step between
    the embedding and the timed path; None without a map or with one of another width than ``dim``."""
    adapter = retriever.adapter
    if adapter is None or adapter.dim != dim:
        return None
    q = torch.nn.functional.normalize(torch.randn(1, dim, device=device), dim=1)
    return _p50_call_ms(lambda: adapter(q), device, runs)


def _p50_call_ms(call, device: torch.device, runs: int) -> float:
    """p50 in ms of ``call()`` over ``runs`` timed calls, after one untimed warm-up call."""
    call()
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        call()
        _sync(device)
        times.append((time.perf_counter() - t) * 1000)
    return _percentile(times, 50)


def reference_agreement(store: MemoryStore, retriever: Retriever, q: torch.Tensor, intents, anchors, res,
                        n_queries: int, tick=lambda n: None) -> tuple[float, float]:
    """(fraction of the first ``n_queries`` whose reference node set equals the batched one,
    reference queries/s). Both searches get the same graph, anchors, start scores and intents.
    ``tick(1)`` after each question, untimed."""
    event_adj, entity_lists = reference_graph(store.graph)
    emb = RowLists(store.events.embeddings.data)
    start = retriever.start_scores(retriever.similarity(store.snapshot(), q), anchors).cpu()
    ids, intents_l = anchors.ids.cpu(), intents.cpu().tolist()
    q_cpu = q.float().cpu()
    rows = retriever.cfg.intent_rows(INTENTS)
    res_q, res_n = res.query.cpu(), res.node.cpu()
    equal, elapsed = 0, 0.0
    for b in range(n_queries):
        a = [(int(x), float(s)) for x, s in zip(ids[b], start[b], strict=True) if x >= 0]
        t = time.perf_counter()
        ref = reference_beam_search(event_adj, entity_lists, emb, q_cpu[b].tolist(), rows[INTENTS[intents_l[b]]], a,
                                    retriever.cfg.beam)
        elapsed += time.perf_counter() - t
        equal += set(ref) == set(res_n[res_q == b].tolist())
        tick(1)
    return equal / max(n_queries, 1), n_queries / elapsed if elapsed else math.nan


@dataclass
class Bench:
    """A built synthetic memory with its questions, ready to be measured at any batch size."""

    cfg: object
    device: torch.device
    store: MemoryStore
    snap: object
    retriever: Retriever
    questions: torch.Tensor          # [Q, d] on the device
    windows: list
    built: dict                      # ingest figures
    commit: str | None               # the code measured (provenance.code_commit), read before the build

    @classmethod
    def build(cls, cfg, events: int, queries: int, device: str = "cpu", progress: bool = False) -> "Bench":
        commit = code_commit()   # now: a long run must not record a commit made while it ran
        dev = torch.device(device)
        if dev.type == "cuda":
            torch.cuda.reset_peak_memory_stats(dev)
        with progress_bar(progress, events, f"build {events:,} events", "event") as bar:
            bar.set_postfix_str("synthesize")
            t = time.perf_counter()
            mem = synthesize(events, cfg.graph, cfg.run.seed)
            q, windows = make_queries(mem, queries, cfg.graph, cfg.queries, cfg.run.seed)
            generate_s = time.perf_counter() - t
            bar.set_postfix_str("bulk ingest")
            store, built = ingest(mem, cfg, dev, bar.update)
        built["generate_s"] = generate_s
        rcfg = typed(RetrievalConfig, cfg.retrieval, "retrieval")
        retriever = Retriever(None, IntentClassifier.load(device=dev), settings(rcfg))
        return cls(cfg, dev, store, built.pop("snapshot"), retriever, q.to(dev), windows, built, commit)

    def measure(self, batch: int, reference: bool = True, embed_question: bool = True,
                queries: int | None = None, progress: bool = False) -> dict:
        """The magma-bench JSON record for batches of ``batch`` questions (the first
        ``queries`` of the built ones; None: all); ``progress``: a bar on stderr, in questions."""
        rc, dev, snap = self.cfg.run, self.device, self.snap
        q_all, windows = self.questions[:queries], self.windows[:queries]
        queries, events = q_all.shape[0], snap.num_events
        n_ref = min(rc.reference_queries, queries) if reference else 0
        single = min(rc.single_queries, queries)
        total = 2 * (queries + single) + n_ref
        with progress_bar(progress, total, f"measure {events:,} events", "question") as bar:
            bar.set_postfix_str("warm-up")
            path = QueryPath(snap, self.retriever, dev)
            for _ in range(rc.warmup_batches):
                path(q_all[:batch], windows[:batch])
            path.phase_s = dict.fromkeys(path.phase_s, 0.0)
            bar.set_postfix_str(f"batches of {batch}")
            batch_s, kept = _timed_batches(path, q_all, windows, batch, dev, keep=lambda a: a < n_ref, tick=bar.update)
            phases = dict(path.phase_s)
            bar.set_postfix_str("batch 1")
            single_s, _ = _timed_batches(path, q_all[:single], windows[:single], 1, dev, tick=bar.update)

            def vector(qb, _windows):   # vector_rag: the same exact dense search, its top-k alone
                return self.retriever.similarity(snap, qb).top_k(self.cfg.vector_rag_k)

            bar.set_postfix_str("vector_rag")
            vector(q_all[:batch], None)
            vec_s, _ = _timed_batches(vector, q_all, windows, batch, dev, tick=bar.update)
            vec_single_s, _ = _timed_batches(vector, q_all[:single], windows[:single], 1, dev, tick=bar.update)
            bar.set_postfix_str("Python reference")
            agreement, ref_qps = _agreement_over_batches(self.store, self.retriever, q_all, kept, batch, n_ref,
                                                         bar.update)
        retrieval_qps = queries / sum(batch_s)
        vector_qps = queries / sum(vec_s)
        b = self.built
        import torch_geometric

        return {
            "events": events, "entities": len(self.store.entities), "edges": b["edges"],
            "edges_by_relation": b["edges_by_relation"], "edges_per_event": b["edges"] / events,
            "generate_s": b["generate_s"], "ingest_s": b["ingest_s"],
            "ingest_events_per_s": events / b["ingest_s"], "ingest_edges_per_s": b["edges"] / b["ingest_s"],
            "memory": self.cfg.memory, "bench_config": self.cfg.config_file,
            "queries": queries, "batch": batch, "device": str(dev),
            "retrieval_qps": retrieval_qps,
            "batch_ms_p50": _percentile([s * 1000 for s in batch_s], 50),
            "retrieval_ms_p50": _percentile([s * 1000 for s in single_s], 50),
            "retrieval_ms_p95": _percentile([s * 1000 for s in single_s], 95),
            "single_queries": single,
            "phase_ms_per_query": {k: v * 1000 / queries for k, v in phases.items()},
            "reference_queries": n_ref, "reference_qps": ref_qps,
            "speedup_vs_reference": retrieval_qps / ref_qps,
            "beam_speedup_vs_reference": queries / phases["beam"] / ref_qps if phases["beam"] else math.nan,
            "agreement_with_reference": agreement,
            "vector_rag_qps": vector_qps,
            "vector_rag_ms_p50": _percentile([s * 1000 for s in vec_single_s], 50),
            "magma_over_vector_rag_time": vector_qps / retrieval_qps,
            "question_embedding_ms_p50": _question_embedding_ms(dev) if embed_question else None,
            "question_adapter_ms_p50": _question_adapter_ms(self.retriever, q_all.shape[1], dev),
            "bytes_per_event": b["bytes_per_event"], "bytes_per_edge": b["bytes_per_edge"],
            "bytes_per_entity": b["entity_bytes"] / max(len(self.store.entities), 1),
            "memory_measured_as": "torch.cuda.memory_allocated deltas" if dev.type == "cuda" else "RSS deltas",
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "gpu_peak_mb": torch.cuda.max_memory_allocated(dev) / 2**20 if dev.type == "cuda" else None,
            # every timed batch holds min(batch, queries) questions
            "similarity_mode": {"batch": self.retriever.similarity_mode(snap, min(batch, queries)),
                                "batch_1": self.retriever.similarity_mode(snap, 1)},
            "beam_kernel": dict.fromkeys(("batch", "batch_1"), self.retriever.search_kernel(dev)),
            "vector_backend": snap.vector_index.backend,
            "machine": _machine(dev), "cpu_flags": cpu_flags(),
            "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "scan_dtype": scan_copy_name(snap.scan_embeddings),
            "scan_probe_ms": scan_probe() if dev.type == "cpu" else None,   # what scan_dtype: auto decided on
            "load_average_1_5_15": [round(x, 2) for x in os.getloadavg()], "torch": torch.__version__,
            "torch_geometric": torch_geometric.__version__,
            "threads": torch.get_num_threads(),
            "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "commit": self.commit,
        }


def traffic_per_query(bench: Bench, batch: int) -> dict:
    """Estimate of the memory traffic of one batch, per question.

    Similarity: a pass streams the embeddings once for all its questions (fp32 rows for the
    matrix, the fp32 columns copy for ``columns``, the half-precision copy for the scan) and
    writes, then top-k reads, each question's row of N scores. Beam, an upper bound: every kept
    node below max_depth counts as expanded; its candidates are its neighbours and the events of
    its entities and of its episode (as query/beam.py gathers them), and each costs its CSR entry
    (neighbour + relation, int64 each), a visited-set probe (int64) and its score (a matrix
    read, columns included; on the scan, a
    half-precision read, plus a 4-byte-per-dimension row for those near the drop threshold,
    not counted).
    """
    snap, q, windows = bench.snap, bench.questions[:batch], bench.windows[:batch]
    r = bench.retriever
    _, _, res, _ = QueryPath(snap, r, bench.device)(q, windows)
    g = snap.graph
    frontier = res.node[res.depth < r.cfg.beam.max_depth]
    candidates = int(g.event_adj.degree(frontier).sum())
    for to_node, to_events in ((g.event_entity, g.entity_event), (g.event_episode, g.episode_event)):
        _, nodes, _ = to_node.gather(frontier)   # event -> node -> event: both CSR entries count
        candidates += int(to_events.degree(nodes).sum()) + nodes.numel()
    b, n, d = q.shape[0], snap.num_events, snap.embeddings.shape[1]
    per_pass, mode = min(r.passes(snap, b)[0].stop, b), r.similarity_mode(snap, b)
    copy = snap.scan_embeddings   # FBGEMM's product over the packed copy writes float32 scores
    score_bytes = (4 if isinstance(copy, PackedView) else copy.dtype.itemsize) if mode == "scan" else r.dtype.itemsize
    scan_bytes = snap.embeddings.element_size() if mode == "matrix" else copy.dtype.itemsize
    similarity = n * d * scan_bytes / per_pass + 2 * n * score_bytes
    beam = candidates * (8 + 8 + 8 + score_bytes) / b
    return {"batch": b, "similarity_mode": mode, "candidates_per_query": candidates / b,
            "similarity_bytes_per_query": similarity, "beam_bytes_per_query": beam,
            "bytes_per_query": similarity + beam}


def _agreement_over_batches(store, retriever, q_all, kept, batch, n_ref, tick=lambda n: None) -> tuple[float, float]:
    """Reference agreement over the first n_ref queries, from the kept batch outputs."""
    agree, time_s = [], 0.0
    for a, (intents, anchors, res, _order) in sorted(kept.items()):
        n = min(batch, n_ref - a)
        frac, qps = reference_agreement(store, retriever, q_all[a:a + batch], intents, anchors, res, n, tick)
        agree.append(frac * n)
        time_s += n / qps
    return (sum(agree) / n_ref if n_ref else math.nan), (n_ref / time_s if time_s else math.nan)


def _machine(dev: torch.device) -> str:
    if dev.type == "cuda":
        return torch.cuda.get_device_name(dev)
    return f"{cpu_model()}, {psutil.cpu_count()} CPUs, {psutil.virtual_memory().total / 2**30:.0f} GiB RAM"
