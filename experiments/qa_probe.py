"""A few questions of the QA benchmark answered and judged, printed next to their gold answers:
a quick look at what a reader makes of the answer prompts (llm/prompts.py) before a long run.

    python experiments/qa_probe.py --per-category 3 dataset.path=/data/locomo10_dev.json [OVERRIDE ...]

Composes +experiment=qa_small with the Hydra overrides given, builds each selected sample's
memory, takes the first N questions of every category and answers, scores and judges them with
magma-run's own code (runner.answer_rows). Prints one block per question; writes nothing.
"""
from __future__ import annotations

import argparse
from collections import defaultdict

from hydra import compose, initialize_config_module

from magma_torch import MagmaMemory
from magma_torch.eval.datasets import load_dataset, select_samples
from magma_torch.eval.runner import answer_rows, question_row, records
from magma_torch.llm import build_llm
from magma_torch.text.embedder import Embedder, resolve_device


def first_per_category(questions, n: int) -> list:
    taken: dict[str, int] = defaultdict(int)
    out = []
    for q in questions:
        if taken[q.category] < n:
            taken[q.category] += 1
            out.append(q)
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--per-category", type=int, default=3)
    ap.add_argument("--categories", nargs="+", help="only these categories (default: all)")
    ap.add_argument("--experiment", default="qa_small")
    ap.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. dataset.path=... llm.n_threads=2")
    args = ap.parse_args(argv)
    with initialize_config_module("magma_torch.conf", version_base=None):
        cfg = compose("config", overrides=[f"+experiment={args.experiment}", *args.overrides])
    d = cfg.dataset
    samples = select_samples(load_dataset(d.name, d.path), d.limit, d.sample_ids, d.shard)
    embedder = Embedder(device=resolve_device(cfg.memory.device), **cfg.memory.embedder)
    reader = build_llm(cfg.llm)   # the judge of qa_small is the reader
    try:
        for sample in samples:
            qs = first_per_category([q for q in sample.questions if q.category in (args.categories or [q.category])],
                                    args.per_category)
            with MagmaMemory(cfg.memory, cfg.consolidation, namespace=sample.sample_id, embedder=embedder) as mem:
                mem.add_many(records(sample))
                mem.consolidate()
                results = mem.retrieve_batch([q.question for q in qs], [q.query_time for q in qs])
            rows = [question_row(sample, q, r, cfg.task) for q, r in zip(qs, results, strict=True)]
            answer_rows(rows, qs, results, reader, reader, cfg.task)
            for r in rows:
                print(f"{r['question_id']} [{r['category']} / {r['intent']}] {r['question']}\n  gold: {r['gold']}\n"
                      f"  answer: {r['prediction'] or r.get('answer_error')}\n"
                      f"  f1 {r['f1']:.2f}, judge {r['judge']}; reader {r['answer_prompt_tokens']}+"
                      f"{r['answer_completion_tokens']} tokens, judge {r.get('judge_prompt_tokens', 0)}+"
                      f"{r.get('judge_completion_tokens', 0)}; {r['answer_s']:.1f}+{r['judge_s']:.1f} s")
    finally:
        reader.close()


if __name__ == "__main__":
    main()
