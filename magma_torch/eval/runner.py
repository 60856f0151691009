"""magma-run: build a memory per conversation, run every question, write the run folder.

Outputs (DESIGN.md 3.2): metrics.json, predictions.jsonl (flushed per question),
config.yaml and per-category plots.
"""
from __future__ import annotations

import json
import logging
import sys
import time
from collections import defaultdict
from pathlib import Path

import hydra
from hydra_plugins.magma_torch_slurm import register as register_slurm_launcher
from omegaconf import DictConfig, OmegaConf
from tqdm import tqdm

from magma_torch.eval.datasets import DatasetError, Sample, load_dataset, select_samples
from magma_torch.eval.metrics import (percentile, recall_all_at_k, recall_all_at_tokens, recall_any_at_k)
from magma_torch.config import group_options
from magma_torch.eval.plots import plot_categories
from magma_torch.eval.prompts import ANSWER_PROMPT_VERSION, JUDGE_PROMPT_VERSION
from magma_torch.eval.qa import answer_questions, judge_answers, score_answer
from magma_torch.ingest.embedder import Embedder, resolve_device
from magma_torch.ingest.fast_path import IngestError
from magma_torch.llm import build_llm
from magma_torch.llm.base import LLMUnavailable
from magma_torch.memory import MagmaMemory

log = logging.getLogger("magma_torch.run")
CATEGORIES = ("single-hop", "multi-hop", "temporal", "open-domain", "adversarial")
RECALL_EXCLUDED = {"adversarial"}
QA_METRICS = ("f1", "bleu1", "judge")


class ConfigError(ValueError):
    """A run configuration that cannot work (e.g. task=qa without an llm)."""


def records(sample: Sample) -> list[dict]:
    return [{"text": t.text, "timestamp": t.timestamp, "speaker": t.speaker, "source_id": t.source_id,
             "session_id": t.session_id, "stream": sample.sample_id} for t in sample.turns]


def question_row(sample: Sample, q, r, task) -> dict:
    """One predictions.jsonl line; evidence is used here, after retrieval, only to score it."""
    retrieved = r.source_ids
    row = {"sample_id": sample.sample_id, "question_id": q.question_id, "category": q.category,
           "question": q.question, "gold": q.gold, "evidence": list(q.evidence),
           "retrieved_sources": retrieved,
           "context_sources": [s for n in r.nodes if n.id in set(r.context_ids) for s in n.source_ids],
           "context_tokens": r.context_tokens, "intent": r.intent, "retrieval_ms": r.retrieval_ms,
           "truncated": r.truncated}
    if q.evidence and q.category not in RECALL_EXCLUDED:
        srcs, toks = [n.source_ids for n in r.nodes], [n.tokens for n in r.nodes]
        for k in task.recall_k:
            row[f"recall_all@{k}"] = recall_all_at_k(retrieved, q.evidence, k)
        for k in task.recall_any_k:
            row[f"recall_any@{k}"] = recall_any_at_k(retrieved, q.evidence, k)
        for b in task.recall_tokens:
            row[f"recall_all@{b}tok"] = recall_all_at_tokens(srcs, toks, q.evidence, b)
    return row


def summarise(rows: list[dict], task) -> dict:
    keys = ([f"recall_all@{k}" for k in task.recall_k] + [f"recall_any@{k}" for k in task.recall_any_k]
            + [f"recall_all@{b}tok" for b in task.recall_tokens])
    out = {}
    for k in keys:
        vals = [r[k] for r in rows if k in r]
        out[k] = sum(vals) / len(vals) if vals else None
    out["n"] = len(rows)
    out["n_recall"] = sum(1 for r in rows if keys and keys[0] in r)
    out["context_tokens_mean"] = sum(r["context_tokens"] for r in rows) / len(rows) if rows else None
    ms = [r["retrieval_ms"] for r in rows]
    out["retrieval_ms_p50"], out["retrieval_ms_p95"] = percentile(ms, 50), percentile(ms, 95)
    for k in QA_METRICS:
        vals = [r[k] for r in rows if r.get(k) is not None]
        out[k] = sum(vals) / len(vals) if vals else None
    return out


def answer_rows(rows: list[dict], qs: list, results: list, reader, judge, task) -> None:
    """task=qa: answer every question of one conversation in one batch, score, judge in one batch."""
    answers = answer_questions(results, qs, reader, max_tokens=task.get("answer_max_tokens", 128),
                               temperature=task.get("answer_temperature", 0.0))
    verdicts = judge_answers(judge, [q.question for q in qs], [q.gold for q in qs], [q.category for q in qs],
                             answers, max_tokens=task.get("judge_max_tokens", 16)) if judge is not None else None
    for i, (row, q, a) in enumerate(zip(rows, qs, answers)):
        row["prediction"] = a.prediction
        # A failed answer scores 0 (it is counted in answering.failed, never left out).
        row.update(score_answer(a.prediction, q.gold, q.category))
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
    """Totals and per-question means of the ``<prefix>_*_tokens`` columns."""
    n = len(rows)
    pt = sum(r.get(f"{prefix}_prompt_tokens", 0) for r in rows)
    ct = sum(r.get(f"{prefix}_completion_tokens", 0) for r in rows)

    def per_question(x: float) -> float:
        return x / n if n else 0.0

    return {"calls": calls, "prompt_tokens": pt, "completion_tokens": ct, "failed": failed,
            "per_question": {"calls": per_question(calls), "prompt_tokens": per_question(pt),
                             "completion_tokens": per_question(ct)}}


def llm_costs(rows: list[dict]) -> tuple[dict, dict]:
    """The answering and judging blocks of metrics.json (calls = generations)."""
    answering = _cost_block(rows, "answer", len(rows), sum("answer_error" in r for r in rows))
    judging = _cost_block(rows, "judge", sum("judge_prompt_tokens" in r for r in rows),
                          sum("judge_error" in r for r in rows))
    return answering, judging


def _consolidation_usage(mem: MagmaMemory) -> dict:
    """Counters of the consolidation LLM (an LLM consolidator's ``usage``); zeros without one."""
    u = getattr(mem.consolidator, "usage", None)
    d = u.as_dict() if u is not None else {}
    return {k: int(d.get(k, 0)) for k in ("calls", "prompt_tokens", "completion_tokens")}


def run(cfg: DictConfig, out_dir: Path) -> dict:
    """Run one experiment and write its folder; returns the metrics dict."""
    qa = cfg.task.name == "qa"
    c = cfg.consolidation
    # consolidation=llm with `llm: ???` consolidates with the LLM of the `llm` group
    shared = c is not None and "llm" in c.keys() and OmegaConf.is_missing(c, "llm")
    has_llm = cfg.get("llm") is not None and cfg.llm.get("_target_") is not None
    for needed, what in ((qa, "task=qa"), (shared, "consolidation=llm")):
        if needed and not has_llm:
            raise ConfigError(f"{what} needs an llm: pass llm=<backend> (options: {group_options('llm')})")
    d = cfg.dataset
    samples = list(select_samples(load_dataset(d.name, d.get("path")), d.get("limit"), d.get("sample_ids"),
                                  d.get("shard")))
    reader = judge = None
    try:
        if qa or shared:
            reader = build_llm(cfg.llm)
        if qa:
            # A judge set up exactly like the reader is the reader: one engine (one GPU's memory) or
            # one server, not two copies of the same model.
            same = cfg.get("judge") is not None and OmegaConf.to_container(cfg.judge, resolve=True) \
                == OmegaConf.to_container(cfg.llm, resolve=True)
            judge = reader if same else build_llm(cfg.get("judge"))
            if judge is None:
                log.info("task=qa without judge=...: the judge metric is null")
        return _run(cfg, out_dir, samples, reader if qa else None, judge, reader if shared else None)
    finally:
        for m in {id(m): m for m in (reader, judge) if m is not None}.values():
            m.close()


def _run(cfg: DictConfig, out_dir: Path, samples: list[Sample], reader, judge, consolidation_llm) -> dict:
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "config.yaml").write_text(OmegaConf.to_yaml(cfg))
    mem_cfg = cfg.memory
    embedder = Embedder(device=resolve_device(mem_cfg.device), **mem_cfg.embedder)
    rows, build, llm_build = [], defaultdict(float), defaultdict(int)
    edges = defaultdict(int)
    pred_path = out_dir / "predictions.jsonl"
    with pred_path.open("w") as pred:
        for sample in tqdm(samples, desc="conversations", disable=not cfg.progress):
            with MagmaMemory(mem_cfg, cfg.consolidation, namespace=sample.sample_id, embedder=embedder,
                             **({"llm": consolidation_llm} if consolidation_llm is not None else {})) as mem:
                usage0 = _consolidation_usage(mem)
                t0 = time.perf_counter()
                mem.add_many(records(sample))
                t1 = time.perf_counter()
                mem.consolidate()
                t2 = time.perf_counter()
                build["fast_path_s"] += t1 - t0
                build["consolidation_s"] += t2 - t1
                for k, v in _consolidation_usage(mem).items():
                    llm_build[k] += v - usage0[k]
                stats = mem.stats()
                build["events"] += stats["events"]
                build["entities"] += stats["entities"]
                for rel, n in stats["edges"].items():
                    edges[rel] += n
                qs = list(sample.questions)
                results = mem.retrieve_batch([q.question for q in qs], [q.query_time for q in qs])
                conv_rows = [question_row(sample, q, r, cfg.task) for q, r in zip(qs, results)]
                if reader is not None:
                    answer_rows(conv_rows, qs, results, reader, judge, cfg.task)
                for row in conv_rows:
                    rows.append(row)
                    pred.write(json.dumps(row) + "\n")
                pred.flush()
    metrics = {"dataset": cfg.dataset.name, "memory": mem_cfg.name, "n_questions": len(rows),
               "overall": summarise([r for r in rows if r["category"] not in RECALL_EXCLUDED], cfg.task),
               "by_category": {c: summarise([r for r in rows if r["category"] == c], cfg.task) for c in CATEGORIES},
               "build": {"events": int(build["events"]), "entities": int(build["entities"]), "edges": dict(edges),
                         "fast_path_s": build["fast_path_s"], "consolidation_s": build["consolidation_s"],
                         "llm_calls": llm_build["calls"],
                         "llm_tokens": llm_build["prompt_tokens"] + llm_build["completion_tokens"],
                         "llm_prompt_tokens": llm_build["prompt_tokens"],
                         "llm_completion_tokens": llm_build["completion_tokens"]}}
    if reader is not None:
        metrics["answering"], metrics["judging"] = llm_costs(rows)
        metrics["answering"]["llm"] = getattr(reader, "name", type(reader).__name__)
        metrics["judging"]["llm"] = None if judge is None else getattr(judge, "name", type(judge).__name__)
        metrics["prompts"] = {"answer": ANSWER_PROMPT_VERSION, "judge": JUDGE_PROMPT_VERSION}
    (out_dir / "metrics.json").write_text(json.dumps(metrics, indent=2))
    plot_categories(metrics, out_dir / "recall_by_category.png")
    return metrics


def format_table(metrics: dict) -> str:
    cols = [k for k in metrics["overall"] if k.startswith("recall")] + ["context_tokens_mean", "retrieval_ms_p50"]
    cols += [k for k in QA_METRICS if any(m.get(k) is not None for m in [metrics["overall"], *metrics["by_category"].values()])]
    lines = [f"{metrics['dataset']} / {metrics['memory']}: {metrics['n_questions']} questions",
             "| category | n | " + " | ".join(cols) + " |", "|" + "---|" * (len(cols) + 2)]
    for name, m in [("overall", metrics["overall"]), *metrics["by_category"].items()]:
        cells = ["-" if m.get(c) is None else f"{m[c]:.3f}" if c.startswith("recall") or c in QA_METRICS else f"{m[c]:.1f}" for c in cols]
        lines.append(f"| {name} | {m['n']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


register_slurm_launcher()   # hydra/launcher=slurm, slurm_local


@hydra.main(config_path="pkg://magma_torch.conf", config_name="config", version_base=None)
def main(cfg: DictConfig) -> None:
    try:
        metrics = run(cfg, Path(cfg.out_dir))
    except (DatasetError, IngestError, ConfigError, LLMUnavailable) as err:
        # Bad input is the user's to fix: one readable line, not a traceback.
        print(f"magma-run: error: {err}", file=sys.stderr)
        sys.exit(2)
    print(format_table(metrics))
    print(f"run folder: {cfg.out_dir}")


if __name__ == "__main__":
    main()
