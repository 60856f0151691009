"""Fit the question adapter (query/adapter.py) on the LoCoMo dev split.

    .venv/bin/pip install -e ".[train]"
    .venv/bin/python experiments/train_question_adapter.py ../shared/data/locomo/locomo10_dev.json \
        --out experiments/results/adapter/locomo_dev.json --weights magma_torch/query/data/question_adapter.safetensors

Each conversation becomes a memory (magma, heuristic consolidation, as `magma-run task=retrieval`
builds it). Each question of categories 1-4 with evidence gives its embedding and the rows of its
evidence turns, read here, offline; the query path reads only the fitted map. Before the final
fit on every conversation, each conversation is held out in turn: the map is fitted on the others,
and so is the anchor re-ranker (experiments/train_rerank.py's fit, on ``--memory``'s candidates),
as a new conversation meets both fitted on dev. The held-out questions are ranked by cosine alone
(recall_all@k of the dense ranking) and run through the whole query process of ``--memory`` and
of each ``--ablations`` memory with that map and those weights, next to the same questions with
those weights and no map. Those held-out figures are what ``cross_validation`` reports: the map
and the weights fitted on all five conversations and run on them (magma-run on the dev split)
rank questions they were fitted on, so only these estimate what they do on new conversations.
``--set KEY=VALUE`` cross-validates ``--memory`` with settings changed, the re-ranker fitted on the
candidates they give (README, "What is still missing", lists what settings gave).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import tempfile
from pathlib import Path

import numpy as np
import torch
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException
from machine import machine  # experiments/machine.py
from report import ABLATIONS as REPORT_ABLATIONS  # experiments/report.py
from train_rerank import fit as fit_rerank  # experiments/train_rerank.py
from train_rerank import dev_memories, embedder_name, pool_features, recall, scored_questions, summary

from magma_torch.config.resolve import memory_config, settings
from magma_torch.eval.datasets import load_dataset
from magma_torch.query.adapter import BUNDLED_EMBEDDER, QuestionAdapter, fit
from magma_torch.query.intent import IntentClassifier
from magma_torch.query.rerank import with_weights
from magma_torch.query.retriever import Retriever
from magma_torch.text.embedder import Embedder

DENSE_K = (10, 40, 100)


def training_rows(emb: Embedder, snap, sample) -> tuple[torch.Tensor, torch.Tensor, list[list[int]]]:
    """(event embeddings [N, d], question embeddings [B, d], evidence rows per question)."""
    row_of = {r.source_id: i for i, r in enumerate(snap.rows)}
    qs = scored_questions(sample)
    questions = emb.encode([q.question for q in qs]).float().cpu()
    evidence = [[row_of[e] for e in q.evidence if e in row_of] for q in qs]
    return snap.embeddings.float().cpu(), questions, evidence


def dense_recall(events, questions, evidence, weight: torch.Tensor | None) -> dict[int, list[float]]:
    """recall_all@k of the cosine ranking alone, per question with evidence."""
    q = questions if weight is None else QuestionAdapter(weight)(questions)
    rank = (q @ events.T).argsort(dim=1, descending=True).argsort(dim=1)
    return {k: [float((rank[b, ev] < k).all()) for b, ev in enumerate(evidence) if ev] for k in DENSE_K}


# the table4 ablations, less the one that removes the map itself
ABLATIONS = tuple(a for a in REPORT_ABLATIONS if a != "magma_no_adapter") + ("magma_no_context",)


def held_out(emb, intent, rc, memories, maps: dict[str, Path], weights: dict[str, dict[str, float]]) -> dict:
    """The whole query process of ``rc`` on each conversation with the re-ranker's ``weights``
    fitted without it, without a map and through the map fitted without it:
    {"none": summary, "adapter": summary, "folds": ...}."""
    none, adapted, folds = [], [], {}
    for s, snap in memories:
        fitted = dataclasses.replace(rc, rerank=with_weights(rc.rerank, weights[s.sample_id]))
        without = Retriever(emb, intent, fitted)
        fold = Retriever(emb, intent, dataclasses.replace(fitted, question_adapter=str(maps[s.sample_id])))
        r_fold, r_base = recall(fold, snap, s, int(rc.budget_tokens)), recall(without, snap, s, int(rc.budget_tokens))
        folds[s.sample_id] = {"adapter": summary(r_fold)["overall"], "none": summary(r_base)["overall"]}
        adapted += r_fold
        none += r_base
    return {"adapter": summary(adapted), "none": summary(none), "folds": folds}


def with_settings(cfg, dotlist: list[str]):
    """``cfg`` with ``KEY=VALUE`` settings merged on, checked by its schema (an unknown key or a
    wrong type fails naming it)."""
    return OmegaConf.merge(cfg, OmegaConf.from_dotlist(dotlist))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("data", help="the LoCoMo dev split (locomo10_dev.json)")
    ap.add_argument("--out", type=Path, required=True, help="the cross-validation report (JSON)")
    ap.add_argument("--weights", type=Path, default=None, help="where to write the map fitted on every conversation")
    ap.add_argument("--embedder", default=None, metavar="MODEL",
                    help="a sentence-transformers model (path) in place of the bundled all-MiniLM-L6-v2: "
                         "the memories, maps and re-ranker weights are then this model's")
    ap.add_argument("--memory", default="magma", help="the memory config whose query process is cross-validated")
    ap.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE",
                    help="settings over --memory and each ablation (e.g. retrieval.anchor_k=40), "
                         "the re-ranker fitted on the candidates they give")
    ap.add_argument("--ablations", nargs="*", default=list(ABLATIONS), metavar="MEMORY",
                    help="memory configs differing from --memory in retrieval only, cross-validated with the same maps")
    ap.add_argument("--l2", type=float, default=0.1, help="weight of ||W - I||^2")
    ap.add_argument("--temperature", type=float, default=0.05, help="of the softmax over a conversation's turns")
    ap.add_argument("--epochs", type=int, default=30, help="passes over the conversations, one Adam step each")
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--rerank-C", type=float, default=1.0,
                    help="the re-ranker's inverse L2 strength, as experiments/train_rerank.py's --C (default: its own)")
    args = ap.parse_args()
    hyper = {"l2": args.l2, "temperature": args.temperature, "epochs": args.epochs, "lr": args.lr}
    try:
        mcfg = with_settings(memory_config(args.memory), args.set)
    except OmegaConfBaseException as e:   # an unknown key or a wrong type: one line, before any work
        ap.error(f"--set: {str(e).splitlines()[0]}")
    mcfg.retrieval.question_adapter = None      # the memories are built and ranked without a map; each fold adds its own
    mcfg.embedder.model = args.embedder or mcfg.embedder.model   # --memory magma_mpnet names its own
    emb, intent = Embedder(mcfg.embedder.model, device="cpu"), IntentClassifier.load(device="cpu")
    memories = dev_memories(mcfg, emb, load_dataset("locomo", args.data))
    rows = {s.sample_id: training_rows(emb, snap, s) for s, snap in memories}
    # the re-ranker's candidates and labels, as train_rerank.py reads them: no map, magma's settings
    candidates = Retriever(emb, intent, settings(mcfg).retrieval)
    pools = {s.sample_id: pool_features(candidates, snap, s) for s, snap in memories}
    weights = {sid: fit_rerank([p for other, ps in pools.items() if other != sid for p in ps], args.rerank_C)
               for sid in pools}

    dense_held, dense_base = {k: [] for k in DENSE_K}, {k: [] for k in DENSE_K}
    with tempfile.TemporaryDirectory() as tmp:
        maps = {}
        for s, _ in memories:
            weight = fit([r for sid, r in rows.items() if sid != s.sample_id], **hyper)
            maps[s.sample_id] = Path(tmp) / f"{s.sample_id}.safetensors"
            QuestionAdapter(weight).save(maps[s.sample_id])
            for k, v in dense_recall(*rows[s.sample_id], weight).items():
                dense_held[k] += v
            for k, v in dense_recall(*rows[s.sample_id], None).items():
                dense_base[k] += v
        runs = {}
        for name in [args.memory, *args.ablations]:
            cfg = with_settings(memory_config(name), args.set)
            cfg.retrieval.question_adapter = None
            runs[name] = held_out(emb, intent, settings(cfg).retrieval, memories, maps, weights)
    dense = {name: {f"recall_all@{k}": round(float(np.mean(d[k])), 4) for k in DENSE_K}
             for name, d in (("adapter", dense_held), ("none", dense_base))}
    out = {"command": "python experiments/train_question_adapter.py " + " ".join(
               str(a) for a in [args.data, "--out", args.out] + (["--weights", args.weights] if args.weights else [])
               + (["--embedder", args.embedder] if args.embedder else [])
               + (["--memory", args.memory] if args.memory != "magma" else [])
               + (["--ablations", *args.ablations] if tuple(args.ablations) != ABLATIONS else [])
               + (["--set", *args.set] if args.set else [])
               + [f"--{k} {v}" for k, v in hyper.items()]
               + ([f"--rerank-C {args.rerank_C}"] if args.rerank_C != 1.0 else [])),
           "data": Path(args.data).name, "embedder": embedder_name(mcfg.embedder.model), "memory": args.memory,
           "consolidation": "heuristic", "fit": hyper,
           "cross_validation": {"method": "leave one conversation out: the map and the re-ranker's weights "
                                          f"(C={args.rerank_C}) fitted on the other four; the held-out conversation's "
                                          "questions ranked by cosine alone (dense) and through the whole query "
                                          "process of each memory",
                                "dense": dense, "memories": runs},
           "machine": machine()}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps({"dense": dense} | {name: {arm: r[arm]["overall"] for arm in ("none", "adapter")}
                                         for name, r in runs.items()}))
    if args.weights:
        final = fit(list(rows.values()), **hyper)
        QuestionAdapter(final, {"fit": hyper, "data": out["data"], "embedder": out["embedder"],
                                "embedder_path": mcfg.embedder.model or BUNDLED_EMBEDDER,
                                "command": out["command"]}).save(args.weights)


if __name__ == "__main__":
    torch.set_grad_enabled(False)
    main()
