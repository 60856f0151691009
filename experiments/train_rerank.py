"""Fit the anchor re-ranker's weights (query/rerank.py) on the LoCoMo dev split.

    .venv/bin/pip install -e ".[train]"        # scikit-learn
    .venv/bin/python experiments/train_rerank.py ../shared/data/locomo/locomo10_dev.json \
        --out experiments/results/rerank/locomo_dev.json

Each conversation becomes a memory (magma, heuristic consolidation, as `magma-run
task=retrieval` builds it). For every question of categories 1-4 with evidence, the fused
top ``rerank.pool`` candidates and their features are read with the re-ranker off; a
candidate's label is whether it is an evidence turn. Labels are read here, offline, and
never at inference: the query path reads only the fitted weights, from the schema
(RerankWeights), which must equal this file's ``weights`` (tests/test_rerank.py).

The model is scikit-learn's L2 logistic regression on standardised features, folded back
to one weight per raw feature (the intercept does not change an order). Before the final
fit on every conversation, each conversation is held out in turn: fitted on the others,
the whole query process (beam included) is run on it with those weights, and the recall
of the held-out questions is what ``cross_validation`` reports, next to the same questions
without the re-ranker.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch
from machine import machine  # experiments/machine.py
from sklearn.linear_model import LogisticRegression

from magma_torch.config.resolve import memory_config, settings
from magma_torch.eval.datasets import load_dataset
from magma_torch.eval.runner import question_row, recall_excluded, records
from magma_torch.memory import MagmaMemory
from magma_torch.query.intent import IntentClassifier
from magma_torch.query.rerank import FEATURES, with_weights
from magma_torch.query.retriever import Retriever, epoch_window
from magma_torch.text.embedder import Embedder
from magma_torch.text.temporal import question_time_window


def embedder_name(model: str | None) -> str:
    """The name a report gives the embedder: its folder's, or the bundled model's."""
    return Path(model).name if model else "all-MiniLM-L6-v2"


def scored_questions(sample):
    return [q for q in sample.questions if q.evidence and not recall_excluded(q)]


def dev_memories(cfg, emb: Embedder, samples) -> list[tuple]:
    """(sample, store snapshot) per conversation: a memory of ``cfg`` with heuristic consolidation,
    as `magma-run task=retrieval` builds it."""
    out = []
    for s in samples:
        m = MagmaMemory(cfg, "heuristic", namespace=s.sample_id, embedder=emb)
        m.add_many(records(s))
        m.consolidate()
        out.append((s, m.store.snapshot()))
    return out


def pool_features(ret: Retriever, snap, sample) -> list[tuple[np.ndarray, np.ndarray]]:
    """(features [P, F], labels [P]) per scored question of ``sample``."""
    qs = scored_questions(sample)
    texts = [q.question for q in qs]
    epochs = [epoch_window(question_time_window(t, q.query_time)) for t, q in zip(texts, qs, strict=True)]
    sim = ret.similarity(snap, ret.embed_questions(texts, snap.embeddings.device)[1])
    fused = ret.fused(snap, sim, epochs, texts)
    feats = ret.rerank_features(snap, sim, fused).numpy()
    source = np.array([r.source_id for r in snap.rows], dtype=object)
    out = []
    for b, q in enumerate(qs):
        ids = fused.ids[b]
        n = int((ids >= 0).sum())
        out.append((feats[b, :n], np.isin(source[ids[:n].numpy()], list(q.evidence)).astype(np.float32)))
    return out


def fit(parts: list[tuple[np.ndarray, np.ndarray]], c: float, drop: tuple[str, ...] = ()) -> dict[str, float]:
    """Weights per feature; those named by a prefix in ``drop`` are left at 0."""
    x = np.concatenate([p[0] for p in parts])
    y = np.concatenate([p[1] for p in parts])
    mu, sd = x.mean(0), x.std(0)
    live = (sd > 1e-9) & ~np.array([f.startswith(drop) for f in FEATURES])   # a constant feature orders nothing
    clf = LogisticRegression(C=c, max_iter=5000).fit((x[:, live] - mu[live]) / sd[live], y)
    w = np.zeros(len(FEATURES))
    w[live] = clf.coef_[0] / sd[live]
    return {f: round(float(v), 6) for f, v in zip(FEATURES, w, strict=True)}


def recall(ret: Retriever, snap, sample, budget: int) -> list[dict]:
    """The category, recall_all@10 and recall_all@<budget>tok of each scored question, as magma-run scores them."""
    qs = scored_questions(sample)
    rs = ret.retrieve_batch(snap, [q.question for q in qs], [q.query_time for q in qs])
    task = SimpleNamespace(recall_k=[10], recall_any_k=[], recall_tokens=[budget])
    rows = [question_row(sample, q, r, task) for q, r in zip(qs, rs, strict=True)]
    return [{"category": row["category"]} | {k: v for k, v in row.items() if k.startswith("recall_all@")}
            for row in rows]


def summary(rows: list[dict]) -> dict:
    keys = [k for k in rows[0] if k.startswith("recall")]
    out = {"overall": {k: round(float(np.mean([r[k] for r in rows])), 4) for k in keys}, "questions": len(rows)}
    for cat in sorted({r["category"] for r in rows}):
        sub = [r for r in rows if r["category"] == cat]
        out[cat] = {k: round(float(np.mean([r[k] for r in sub])), 4) for k in keys}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("data", help="the LoCoMo dev split (locomo10_dev.json)")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--C", type=float, default=1.0, help="inverse L2 strength of the logistic regression")
    ap.add_argument("--memory", default="magma",
                    help="the memory config whose query process is fitted (magma_no_traversal: without the graph)")
    ap.add_argument("--token-cost", type=float, default=None,
                    help="rerank.token_cost of the held-out runs (default: the memory config's); the fit is the same")
    ap.add_argument("--embedder", default=None, metavar="MODEL",
                    help="a sentence-transformers model (path) in place of the bundled all-MiniLM-L6-v2: the "
                         "memories and candidates are then this model's (conf/memory/magma_mpnet.yaml's weights)")
    ap.add_argument("--drop", nargs="*", default=[], metavar="PREFIX",
                    help="leave the features starting with these out of the fit (e.g. support_: no graph support)")
    args = ap.parse_args()
    cfg = memory_config(args.memory)
    # Fitted on the embedder's own question vectors. The question adapter (query/adapter.py) is fitted on
    # these same conversations, so through it the cosine feature looks stronger here than on new ones and
    # a re-ranker fitted on it leans on it too much (held out, recall fell); the query path applies these
    # weights to adapted cosines, which experiments/train_question_adapter.py cross-validates.
    cfg.retrieval.question_adapter = None
    cfg.embedder.model = args.embedder or cfg.embedder.model   # --memory magma_mpnet names its own
    rc = settings(cfg).retrieval
    if args.token_cost is not None:
        rc = dataclasses.replace(rc, rerank=dataclasses.replace(rc.rerank, token_cost=args.token_cost))
    emb = Embedder(cfg.embedder.model, device="cpu")
    intent = IntentClassifier.load(device="cpu")
    memories = dev_memories(cfg, emb, load_dataset("locomo", args.data))
    ret = Retriever(emb, intent, rc)
    parts = {s.sample_id: pool_features(ret, snap, s) for s, snap in memories}

    budget = int(rc.budget_tokens)
    off = Retriever(emb, intent, dataclasses.replace(rc, rerank=dataclasses.replace(rc.rerank, pool=0)))
    held_rows, off_rows, folds = [], [], {}
    for s, snap in memories:
        w = fit([p for sid, ps in parts.items() if sid != s.sample_id for p in ps], args.C, tuple(args.drop))
        fold = Retriever(emb, intent, dataclasses.replace(rc, rerank=with_weights(rc.rerank, w)))
        rows, base = recall(fold, snap, s, budget), recall(off, snap, s, budget)
        folds[s.sample_id] = {"rerank": summary(rows)["overall"], "rrf": summary(base)["overall"]}
        held_rows += rows
        off_rows += base
    weights = fit([p for ps in parts.values() for p in ps], args.C, tuple(args.drop))
    out = {"command": "python experiments/train_rerank.py " + " ".join(
               f"{a}" for a in [args.data, "--out", args.out, "--C", args.C] + (["--drop", *args.drop] if args.drop else [])
               + (["--memory", args.memory] if args.memory != "magma" else [])
               + (["--embedder", args.embedder] if args.embedder else [])
               + (["--token-cost", args.token_cost] if args.token_cost is not None else [])),
           "data": Path(args.data).name, "embedder": embedder_name(cfg.embedder.model), "memory": args.memory,
           "consolidation": "heuristic", "pool": rc.rerank.pool, "support_from": rc.rerank.support_from,
           "token_cost": rc.rerank.token_cost,
           "C": args.C, "dropped": args.drop,
           "features": list(FEATURES), "weights": weights,
           "cross_validation": {"method": "leave one conversation out; the held-out conversation's questions "
                                          "through the whole query process (beam included)",
                                "rerank": summary(held_rows), "rrf": summary(off_rows), "folds": folds},
           "machine": machine()}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps({k: out["cross_validation"][k]["overall"] for k in ("rerank", "rrf")}))
    # only magma's fit (the bundled embedder's) is the schema's default
    if args.drop or args.memory != "magma" or args.token_cost is not None or cfg.embedder.model:
        return
    print("RerankWeights defaults (magma_torch/config/schema.py):")
    for f, v in weights.items():
        print(f"    {f}: float = {v}")


if __name__ == "__main__":
    torch.set_grad_enabled(False)
    main()
