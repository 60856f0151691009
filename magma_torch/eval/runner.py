"""magma-run: build a memory per conversation, run every question, write the run folder.

Outputs (DESIGN.md 3.2): metrics.json, predictions.jsonl (flushed per question),
config.yaml and per-category plots.
"""
from __future__ import annotations

import logging
import random
import signal
import sys
import time
from contextlib import contextmanager
from collections import defaultdict
from collections.abc import Iterable, Sized
from pathlib import Path

import numpy as np
import torch
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf
from tqdm import tqdm

from magma_torch.config.resolve import ConfigError
from magma_torch.errors import MagmaError
from magma_torch.eval import progress
from magma_torch.eval.cli import builds_llm, check_run_config, consolidates_with_reader, fail
from magma_torch.eval.datasets import (Sample, dataset_categories, has_session_evidence, load_dataset, select_samples,
                                      selection_size)
from magma_torch.eval.metrics import (RETRIEVAL_MS, percentile, recall_all_at_k, recall_all_at_tokens,
                                      recall_any_at_k)
from magma_torch.eval.plots import plot_categories
from magma_torch.eval.prompts import judge_prompt_version
from magma_torch.eval.qa import answer_questions, judge_answers, score_answer
from magma_torch.eval.run_folder import RunFolder
from magma_torch.eval.tracking import build_tracker
from magma_torch.files import write_atomic
from magma_torch.llm import build_llm
from magma_torch.memory import MagmaMemory
from magma_torch.provenance import code_commit
from magma_torch.text.embedder import Embedder, resolve_device


log = logging.getLogger("magma_torch.run")
RECALL_EXCLUDED = {"adversarial"}
QA_METRICS = ("f1", "bleu1", "judge")


def records(sample: Sample) -> list[dict]:
    return [{"text": t.text, "timestamp": t.timestamp, "speaker": t.speaker, "source_id": t.source_id,
             "session_id": t.session_id, "stream": sample.sample_id} for t in sample.turns]


def recall_excluded(q) -> bool:
    """Questions that have no evidence recall: abstentions and the excluded categories."""
    return bool(q.abstention) or q.category in RECALL_EXCLUDED


def question_row(sample: Sample, q, r, task) -> dict:
    """One predictions.jsonl line; evidence is used here, after retrieval, only to score it."""
    retrieved = r.source_ids
    row = {"sample_id": sample.sample_id, "question_id": q.question_id, "category": q.category,
           "question": q.question, "gold": q.gold, "evidence": list(q.evidence),
           "retrieved_sources": retrieved,
           "context_sources": [s for n in r.nodes if n.id in set(r.context_ids) for s in n.source_ids],
           "context_tokens": r.context_tokens, "intent": r.intent, "retrieval_ms": r.retrieval_ms,
           "truncated": r.truncated, "abstention": q.abstention}
    if recall_excluded(q):
        return row
    if q.evidence:
        srcs, toks = [n.source_ids for n in r.nodes], [n.tokens for n in r.nodes]
        for k in task.recall_k:
            row[f"recall_all@{k}"] = recall_all_at_k(retrieved, q.evidence, k)
        for k in task.recall_any_k:
            row[f"recall_any@{k}"] = recall_any_at_k(retrieved, q.evidence, k)
        for b in task.recall_tokens:
            row[f"recall_all@{b}tok"] = recall_all_at_tokens(srcs, toks, q.evidence, b)
    if q.evidence_sessions:
        # Sessions ranked by their best retrieved turn.
        session_of = {t.source_id: t.session_id for t in sample.turns}
        sessions = [session_of[s] for s in retrieved if s in session_of]
        row["evidence_sessions"] = list(q.evidence_sessions)
        for k in task.recall_k:
            row[f"session_recall_all@{k}"] = recall_all_at_k(sessions, q.evidence_sessions, k)
        for k in task.recall_any_k:
            row[f"session_recall_any@{k}"] = recall_any_at_k(sessions, q.evidence_sessions, k)
    return row


def recall_keys(task, sessions: bool) -> list[str]:
    """The recall columns: turn level always, session level too with ``sessions``."""
    keys = ([f"recall_all@{k}" for k in task.recall_k] + [f"recall_any@{k}" for k in task.recall_any_k]
            + [f"recall_all@{b}tok" for b in task.recall_tokens])
    if not sessions:
        return keys
    return keys + [f"session_recall_all@{k}" for k in task.recall_k] + [
        f"session_recall_any@{k}" for k in task.recall_any_k]


def has_session_columns(rows: list[dict]) -> bool:
    """Whether some question row holds session-level recall (its question named its evidence sessions)."""
    return any(k.startswith("session_recall_") for r in rows for k in r)


def summarise(rows: list[dict], task, keys: list[str]) -> dict:
    out = {}
    for k in keys:
        vals = [r[k] for r in rows if k in r]
        out[k] = sum(vals) / len(vals) if vals else None
    out["n"] = len(rows)
    out["n_recall"] = sum(1 for r in rows if keys and keys[0] in r)
    if any(k.startswith("session_") for k in keys):
        out["n_session_recall"] = sum(1 for r in rows if "evidence_sessions" in r)
    out["context_tokens_mean"] = sum(r["context_tokens"] for r in rows) / len(rows) if rows else None
    # A conversation's questions are retrieved as one batch and each row holds its batch's time
    # divided by the batch size, so the mean is the honest figure. The percentiles stay because
    # DESIGN.md's metrics.json contract names them; they spread over batches, not questions.
    shares = [r["retrieval_ms"] for r in rows]
    out[RETRIEVAL_MS] = sum(shares) / len(shares) if shares else None
    out["retrieval_ms_p50"], out["retrieval_ms_p95"] = percentile(shares, 50), percentile(shares, 95)
    for k in QA_METRICS:
        vals = [r[k] for r in rows if r.get(k) is not None]
        out[k] = sum(vals) / len(vals) if vals else None
    return out


def answer_rows(rows: list[dict], qs: list, results: list, reader, judge, task) -> None:
    """task=qa: answer the questions in one batch, score, judge in one batch. Each row gets its
    share of the two batches' wall time (``answer_s``, ``judge_s``)."""
    t0 = time.perf_counter()
    answers = answer_questions(results, qs, reader, max_tokens=task.answer_max_tokens,
                               temperature=task.answer_temperature, dates=task.answer_dates,
                               prompt=task.answer_prompt)
    t1 = time.perf_counter()
    kinds = ["abstention" if q.abstention else q.category for q in qs]   # picks the judge prompt
    verdicts = judge_answers(judge, [q.question for q in qs], [q.gold for q in qs], kinds,
                             answers, max_tokens=task.judge_max_tokens) if judge is not None else None
    t2 = time.perf_counter()
    for i, (row, q, a) in enumerate(zip(rows, qs, answers, strict=True)):
        row["answer_s"], row["judge_s"] = (t1 - t0) / len(qs), (t2 - t1) / len(qs)
        row["prediction"] = a.prediction
        if a.reader_text != a.prediction:
            row["reader_text"] = a.reader_text
        # A failed answer scores 0 (it is counted in answering.failed, never left out).
        row.update(score_answer(a.prediction, q.gold, q.category, q.abstention))
        row["judge"] = None if verdicts is None else verdicts[i].verdict
        row["answer_prompt_tokens"], row["answer_completion_tokens"] = a.prompt_tokens, a.completion_tokens
        if a.error is not None:
            row["answer_error"] = a.error
        if verdicts is not None:
            v = verdicts[i]
            if v.called:
                row["judge_prompt_tokens"], row["judge_completion_tokens"] = v.prompt_tokens, v.completion_tokens
            if v.error is not None:
                row["judge_error"] = v.error


def _cost_block(rows: list[dict], prefix: str, calls: int, failed: int) -> dict:
    """Totals and per-question means of the ``<prefix>_*_tokens`` and ``<prefix>_s`` columns."""
    n = len(rows)
    pt = sum(r.get(f"{prefix}_prompt_tokens", 0) for r in rows)
    ct = sum(r.get(f"{prefix}_completion_tokens", 0) for r in rows)
    seconds = sum(r.get(f"{prefix}_s", 0.0) for r in rows)

    def per_question(x: float) -> float:
        return x / n if n else 0.0

    return {"calls": calls, "prompt_tokens": pt, "completion_tokens": ct, "failed": failed, "seconds": seconds,
            "per_question": {"calls": per_question(calls), "prompt_tokens": per_question(pt),
                             "completion_tokens": per_question(ct), "seconds": per_question(seconds)}}


def llm_costs(rows: list[dict]) -> tuple[dict, dict]:
    """The answering and judging blocks of metrics.json (calls = generations)."""
    answering = _cost_block(rows, "answer", len(rows), sum("answer_error" in r for r in rows))
    judging = _cost_block(rows, "judge", sum("judge_prompt_tokens" in r for r in rows),
                          sum("judge_error" in r for r in rows))
    return answering, judging


def _consolidation_usage(mem: MagmaMemory) -> dict:
    """Counters of the consolidation LLM (an LLM consolidator's ``usage``); zeros without one. With
    ``consolidation.cache``, ``cache_hits`` counts the generations its file gave back: they cost
    neither calls nor seconds here (the file keeps what each cost, ``llm.cache.cost``)."""
    u = getattr(mem.consolidator, "usage", None)
    d = u.as_dict() if u is not None else {}
    out = {k: int(d.get(k, 0)) for k in ("calls", "prompt_tokens", "completion_tokens")}
    hits = getattr(getattr(mem.consolidator, "llm", None), "hits", None)
    if hits is not None:
        out["cache_hits"] = hits
    return out


def seed_everything(seed: int | None) -> None:
    """The run's ``seed`` (None: left as they are) for Python's, NumPy's and torch's global generators,
    set at the start of each attempt for whatever draws from them (a consolidator, logger or model of
    your own): the query path draws nothing, and an LLM's sampling takes ``llm.seed``."""
    if seed is not None:
        random.seed(seed)
        np.random.seed(seed)
        torch.manual_seed(seed)


def save_hydra_files(cfg: DictConfig) -> None:
    """Hydra's own record of the run in ``.hydra/`` of its output folder (the composed config, Hydra's
    and the overrides), as Hydra writes it before the app starts but for conf/config.yaml's
    ``output_subdir: null``: written here, once the run folder has accepted the run, so a refused run
    leaves an existing folder's as they were. Nothing outside a Hydra app (``run`` called directly)."""
    if not HydraConfig.initialized():
        return
    hydra_cfg = HydraConfig.get()
    where = Path(hydra_cfg.runtime.output_dir) / ".hydra"
    where.mkdir(exist_ok=True)
    for name, node in (("config.yaml", cfg), ("hydra.yaml", {"hydra": hydra_cfg}),
                       ("overrides.yaml", hydra_cfg.overrides.task)):
        write_atomic(where / name, OmegaConf.to_yaml(node))


def run(cfg: DictConfig, out_dir: Path) -> dict:
    """Run one experiment and write its folder (resuming what it already holds); returns the metrics dict."""
    check_run_config(cfg)
    seed_everything(cfg.get("seed"))
    commit = code_commit()   # the code this attempt runs, read before a long run gives time to change it
    qa = cfg.task.name == "qa"
    shared = consolidates_with_reader(cfg)
    d = cfg.dataset
    limit, sample_ids, shard = d.get("limit"), d.get("sample_ids"), d.get("shard")
    samples = load_dataset(d.name, d.get("path"))
    # a bad shard or sample id fails before the folder exists
    selection = select_samples(samples, limit, sample_ids, shard)
    total = selection_size(len(samples) if isinstance(samples, Sized) else None, limit, sample_ids, shard)
    reader = judge = tracker = None
    folder = RunFolder(out_dir)
    try:
        if qa or shared:
            reader = build_llm(cfg.llm)
        if qa:
            # A judge set up exactly like the reader is the reader: one engine (one GPU's memory) or
            # one server, not two copies of the same model.
            same = cfg.get("judge") is not None and OmegaConf.to_container(cfg.judge, resolve=True) \
                == OmegaConf.to_container(cfg.llm, resolve=True)
            judge = reader if same else build_llm(cfg.get("judge"), "judge")
            if judge is None:
                log.info("task=qa without judge=...: the judge metric is null")
        folder.open(cfg)
        save_hydra_files(cfg)
        tracker = build_tracker(cfg.get("logger"), cfg, out_dir)
        folder.start()
        selected = _run(cfg, folder, selection, total, reader if qa else None, judge, reader if shared else None)
        # A folder resumed with a smaller dataset.limit keeps, but does not count, the other samples.
        rows = [r for r in folder.rows if r["sample_id"] in selected]
        builds = [b for sid, b in folder.builds.items() if sid in selected]
        metrics = summarise_run(cfg, rows, builds, reader, judge, commit)
        plot = out_dir / "recall_by_category.png"
        plot_categories(metrics, plot)
        tracker.log_run(metrics, rows, [plot])
        tracker.close(ok=True)
        tracker = None
        folder.finish(metrics)  # last: only now is the folder presented as finished
        return metrics
    finally:
        folder.close()
        if tracker is not None:
            tracker.close(ok=False)
        for m in {id(m): m for m in (reader, judge) if m is not None}.values():  # a judge may be the reader
            m.close()


class Terminated(BaseException):
    """SIGTERM (Slurm preemption, scancel, kill) arrived during a run. A BaseException, as
    KeyboardInterrupt is, so that no ``except Exception`` on its way up takes it for a failure:
    a foreground slow path records a failed batch that way and goes on."""


class _Stop:
    """SIGTERM handling. A signal raises at once only inside ``interruptible()`` (long waits on the
    slow path or an LLM); elsewhere (e.g. while a thread starts) it is noted and raised at the
    next ``stop_point()``, so no library is left half-way through its own bookkeeping."""

    requested = False
    interruptible = False


def _terminate(signum, frame) -> None:
    _Stop.requested = True
    if _Stop.interruptible:
        raise Terminated("SIGTERM")


def stop_point() -> None:
    if _Stop.requested:
        raise Terminated("SIGTERM")


@contextmanager
def interruptible():
    _Stop.interruptible = True
    try:
        stop_point()
        yield
    finally:
        _Stop.interruptible = False


def _sample_build(sample: Sample, mem: MagmaMemory, fast_path_s: float, consolidation_s: float, usage: dict) -> dict:
    """One memory's line of samples.jsonl: what building it cost and produced."""
    stats = mem.stats()
    failed = [reason for status, reason in mem.worker.statuses(range(stats["events"])) if status == "failed"]
    if failed:
        log.warning("%s: %d of %d events failed consolidation (first: %s)", sample.sample_id, len(failed),
                    stats["events"], failed[0])
    return {"sample_id": sample.sample_id, "events": stats["events"], "entities": stats["entities"],
            "edges": dict(stats["edges"]), "fast_path_s": fast_path_s, "consolidation_s": consolidation_s,
            "consolidation_failed": len(failed), **{f"llm_{k}": v for k, v in usage.items()}}


def _build_and_retrieve(cfg: DictConfig, sample: Sample, mem: MagmaMemory, qs: list, bar: tqdm) -> tuple[dict, list]:
    """Ingest and consolidate one sample's turns, then retrieve for its questions ``qs``."""
    usage0 = _consolidation_usage(mem)
    bar.set_postfix_str(f"ingest {len(sample.turns)} turns")
    t0 = time.perf_counter()
    mem.add_many(records(sample))
    t1 = time.perf_counter()
    stop_point()
    bar.set_postfix_str("consolidate")
    with interruptible():
        progress.consolidate(mem, cfg.progress)
    t2 = time.perf_counter()
    usage = {k: v - usage0[k] for k, v in _consolidation_usage(mem).items()}
    build = _sample_build(sample, mem, t1 - t0, t2 - t1, usage)
    bar.set_postfix_str(f"retrieve {len(qs)} questions")
    results = mem.retrieve_batch([q.question for q in qs], [q.query_time for q in qs]) if qs else []
    return build, results


def _run(cfg: DictConfig, folder: RunFolder, samples: Iterable[Sample], total: int | None, reader, judge,
         consolidation_llm) -> set[str]:
    """Build, retrieve and answer every sample the folder has not finished; returns the ids of all samples."""
    mem_cfg = cfg.memory
    selected = set()
    embedder = Embedder(device=resolve_device(mem_cfg.device), **mem_cfg.embedder)
    done = folder.done_questions
    with tqdm(samples, desc="memories", unit="memory", total=total, disable=not cfg.progress) as bar:
        for sample in bar:
            stop_point()
            selected.add(sample.sample_id)
            if sample.sample_id in folder.builds:
                continue  # finished by an earlier attempt in this folder
            with MagmaMemory(mem_cfg, cfg.consolidation, namespace=sample.sample_id, embedder=embedder,
                             **({"llm": consolidation_llm} if consolidation_llm is not None else {})) as mem:
                try:
                    # every question in one batch, as in an attempt that was never stopped: batched
                    # float kernels may round by batch size, and a near tie would then flip on resume
                    build, results = _build_and_retrieve(cfg, sample, mem, sample.questions, bar)
                except BaseException:
                    mem.worker.cancel()  # the memory is thrown away: closing it must not consolidate the rest
                    raise
            todo = [i for i, q in enumerate(sample.questions) if q.question_id not in done]
            qs, results = [sample.questions[i] for i in todo], [results[i] for i in todo]
            rows = [question_row(sample, q, r, cfg.task) for q, r in zip(qs, results, strict=True)]
            if reader is not None:
                # answered and flushed a chunk at a time: a stopped run keeps every finished chunk
                chunk = cfg.task.answer_chunk
                for start in range(0, len(qs), chunk):
                    part = slice(start, start + chunk)
                    bar.set_postfix_str(f"answer {start + 1}-{min(start + chunk, len(qs))}/{len(qs)}")
                    with interruptible():
                        answer_rows(rows[part], qs[part], results[part], reader, judge, cfg.task)
                    folder.append(rows[part])
                rows = []
            folder.append(rows, build)
    return selected


def summarise_run(cfg: DictConfig, rows: list[dict], builds: list[dict], reader, judge, commit: str | None) -> dict:
    """metrics.json from question rows and memory builds, this attempt's and earlier ones'; ``commit``:
    the code they were computed with (provenance.code_commit)."""
    edges: dict[str, int] = defaultdict(int)
    for b in builds:
        for rel, n in b["edges"].items():
            edges[rel] += n

    def total(key: str):
        return sum(b[key] for b in builds)

    keys = recall_keys(cfg.task, has_session_columns(rows))
    # sample_ids: the samples counted, so that readers of the folder's lines (compare, magma-aggregate)
    # leave out what a resume with a smaller dataset.limit kept but does not count
    # commit: the code of the attempt that finished the run (a resumed run's earlier attempts may differ)
    metrics = {"dataset": cfg.dataset.name, "memory": cfg.memory.name, "n_questions": len(rows),
               "commit": commit, "sample_ids": [b["sample_id"] for b in builds],
               "overall": summarise([r for r in rows if r["category"] not in RECALL_EXCLUDED], cfg.task, keys),
               "by_category": {c: summarise([r for r in rows if r["category"] == c], cfg.task, keys)
                               for c in dataset_categories(cfg.dataset.name)},
               "build": {"events": total("events"), "entities": total("entities"), "edges": dict(edges),
                         "fast_path_s": total("fast_path_s"), "consolidation_s": total("consolidation_s"),
                         "llm_calls": total("llm_calls"),
                         "llm_tokens": total("llm_prompt_tokens") + total("llm_completion_tokens"),
                         "llm_prompt_tokens": total("llm_prompt_tokens"),
                         "llm_completion_tokens": total("llm_completion_tokens")}}
    # counted where the build lines have them: consolidation.cache's hits, and the events whose
    # consolidation failed (lines written before that count existed lack it)
    for key in ("llm_cache_hits", "consolidation_failed"):
        if any(key in b for b in builds):
            metrics["build"][key] = sum(b.get(key, 0) for b in builds)
    abstention = [r for r in rows if r.get("abstention")]
    if abstention:
        metrics["abstention"] = summarise(abstention, cfg.task, keys)
    # task=qa only: a retrieval run whose consolidation borrows the reader (consolidates_with_reader)
    # has one too, and no answers or answer prompt (before, its summary raised after all the work)
    if reader is not None and cfg.task.name == "qa":
        metrics["answering"], metrics["judging"] = llm_costs(rows)
        metrics["answering"]["llm"] = getattr(reader, "name", type(reader).__name__)
        metrics["judging"]["llm"] = None if judge is None else getattr(judge, "name", type(judge).__name__)
        metrics["prompts"] = {"answer": cfg.task.answer_prompt, "judge": judge_prompt_version(cfg.dataset.name)}
    return metrics


def format_table(metrics: dict) -> str:
    cols = [k for k in metrics["overall"] if "recall_" in k] + ["context_tokens_mean", RETRIEVAL_MS]
    rows = [("overall", metrics["overall"]), *metrics["by_category"].items()]
    cols += [k for k in QA_METRICS if any(m.get(k) is not None for _, m in rows)]
    lines = [f"{metrics['dataset']} / {metrics['memory']}: {metrics['n_questions']} questions",
             "| category | n | " + " | ".join(cols) + " |", "|" + "---|" * (len(cols) + 2)]
    for name, m in rows:
        cells = ["-" if m.get(c) is None else f"{m[c]:.3f}" if "recall_" in c or c in QA_METRICS else f"{m[c]:.1f}"
                 for c in cols]
        lines.append(f"| {name} | {m['n']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def objective_value(metrics: dict, key: str) -> float | None:
    """The ``overall`` metric a sweeper optimises (config ``objective``); None when no question counts in it."""
    if key not in metrics["overall"]:
        raise ConfigError(f"objective={key} is not a metric of this run; its overall metrics: "
                          f"{', '.join(k for k in metrics['overall'] if not k.startswith('n'))}")
    return metrics["overall"][key]


def run_and_report(cfg: DictConfig) -> float | None:
    """magma-run's run (eval/cli.py): the run, its table and folder printed, and its objective
    (``cfg.objective`` of metrics.json's ``overall`` block) returned; a stop by signal or a
    MagmaError ends the process in one line."""
    out = Path(cfg.out_dir)
    # Raised in the main thread: the run unwinds, closing its memory and files; what finished is on disk.
    _Stop.requested = False
    previous = signal.signal(signal.SIGTERM, _terminate)
    try:
        # the objective's name checked before the run, against the names its overall block can hold
        # (no session columns where no question can name its sessions)
        keys = recall_keys(cfg.task, has_session_evidence(cfg.dataset.name))
        objective_value({"overall": summarise([], cfg.task, keys)}, cfg.objective)
        # answer metrics are null without answers (task=retrieval) and the judge's without a judge: a sweep
        # ran its every trial and then failed on the null ("Return value must be float-castable")
        without = ("task=" + cfg.task.name if cfg.task.name != "qa"
                   else "task=qa without judge=..." if cfg.objective == "judge" and not builds_llm(cfg.get("judge"))
                   else None)
        if cfg.objective in QA_METRICS and without is not None:
            raise ConfigError(f"objective={cfg.objective} is null in every run of {without}: name a recall metric, "
                              "or run task=qa (with a judge for objective=judge)")
        metrics = run(cfg, out)
        value = objective_value(metrics, cfg.objective)
    except (Terminated, KeyboardInterrupt) as err:
        # (libraries may re-wrap the exception on its way up, so its type says which signal it was)
        sig = signal.SIGTERM if isinstance(err, Terminated) else signal.SIGINT
        print(f"magma-run: stopped by {sig.name}; finished questions are kept in {out}, "
              f"rerun with out_dir={out} to resume", file=sys.stderr)
        sys.exit(128 + sig.value)
    except MagmaError as err:
        fail(err)
    finally:
        signal.signal(signal.SIGTERM, previous)
    print(format_table(metrics))
    print(f"run folder: {out}")
    return value
