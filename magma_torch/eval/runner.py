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
from omegaconf import DictConfig, OmegaConf
from tqdm import tqdm

from magma_torch.eval.datasets import DatasetError, Sample, load_dataset
from magma_torch.eval.metrics import (percentile, recall_all_at_k, recall_all_at_tokens, recall_any_at_k)
from magma_torch.eval.plots import plot_categories
from magma_torch.ingest.embedder import Embedder, resolve_device
from magma_torch.ingest.fast_path import IngestError
from magma_torch.memory import MagmaMemory

log = logging.getLogger("magma_torch.run")
CATEGORIES = ("single-hop", "multi-hop", "temporal", "open-domain", "adversarial")
RECALL_EXCLUDED = {"adversarial"}


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
           "context_tokens": r.context_tokens, "intent": r.intent, "retrieval_ms": r.retrieval_ms}
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
    out["f1"] = out["bleu1"] = out["judge"] = None
    return out


def run(cfg: DictConfig, out_dir: Path) -> dict:
    """Run one experiment and write its folder; returns the metrics dict."""
    samples = load_dataset(cfg.dataset.name, cfg.dataset.get("path"))
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "config.yaml").write_text(OmegaConf.to_yaml(cfg))
    mem_cfg = cfg.memory
    embedder = Embedder(device=resolve_device(mem_cfg.device), **mem_cfg.embedder)
    rows, build = [], defaultdict(float)
    edges = defaultdict(int)
    pred_path = out_dir / "predictions.jsonl"
    with pred_path.open("w") as pred:
        for sample in tqdm(samples, desc="conversations", disable=not cfg.progress):
            with MagmaMemory(mem_cfg, cfg.consolidation, namespace=sample.sample_id, embedder=embedder) as mem:
                t0 = time.perf_counter()
                mem.add_many(records(sample))
                t1 = time.perf_counter()
                mem.consolidate()
                t2 = time.perf_counter()
                build["fast_path_s"] += t1 - t0
                build["consolidation_s"] += t2 - t1
                stats = mem.stats()
                build["events"] += stats["events"]
                build["entities"] += stats["entities"]
                for rel, n in stats["edges"].items():
                    edges[rel] += n
                qs = list(sample.questions)
                results = mem.retrieve_batch([q.question for q in qs], [q.query_time for q in qs])
                for q, r in zip(qs, results):
                    row = question_row(sample, q, r, cfg.task)
                    rows.append(row)
                    pred.write(json.dumps(row) + "\n")
                pred.flush()
    metrics = {"dataset": cfg.dataset.name, "memory": mem_cfg.name, "n_questions": len(rows),
               "overall": summarise([r for r in rows if r["category"] not in RECALL_EXCLUDED], cfg.task),
               "by_category": {c: summarise([r for r in rows if r["category"] == c], cfg.task) for c in CATEGORIES},
               "build": {"events": int(build["events"]), "entities": int(build["entities"]), "edges": dict(edges),
                         "fast_path_s": build["fast_path_s"], "consolidation_s": build["consolidation_s"],
                         "llm_calls": 0, "llm_tokens": 0}}
    (out_dir / "metrics.json").write_text(json.dumps(metrics, indent=2))
    plot_categories(metrics, out_dir / "recall_by_category.png")
    return metrics


def format_table(metrics: dict) -> str:
    cols = [k for k in metrics["overall"] if k.startswith("recall")] + ["context_tokens_mean", "retrieval_ms_p50"]
    lines = [f"{metrics['dataset']} / {metrics['memory']}: {metrics['n_questions']} questions",
             "| category | n | " + " | ".join(cols) + " |", "|" + "---|" * (len(cols) + 2)]
    for name, m in [("overall", metrics["overall"]), *metrics["by_category"].items()]:
        cells = ["-" if m.get(c) is None else f"{m[c]:.3f}" if c.startswith("recall") else f"{m[c]:.1f}" for c in cols]
        lines.append(f"| {name} | {m['n']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


@hydra.main(config_path="pkg://magma_torch.conf", config_name="config", version_base=None)
def main(cfg: DictConfig) -> None:
    try:
        metrics = run(cfg, Path(cfg.out_dir))
    except (DatasetError, IngestError) as err:
        # Bad input is the user's to fix: one readable line, not a traceback.
        print(f"magma-run: error: {err}", file=sys.stderr)
        sys.exit(2)
    print(format_table(metrics))
    print(f"run folder: {cfg.out_dir}")


if __name__ == "__main__":
    main()
