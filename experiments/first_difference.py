"""Where do two runs' rankings part? For each question, the first rank at which the retrieved
lists (predictions.jsonl `retrieved_sources`) of a run and a baseline run differ.

    python experiments/first_difference.py BASE_RUN RUN [RUN ...]

A metric can only move if the lists differ within what it reads (top 10, or the turns that fit
2,000 context tokens), so this tells whether an unchanged Table 4 row means "no effect" or
"effect beyond the measured depth".
"""
from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path


def first_difference(a: list, b: list) -> int | None:
    """0-based rank of the first differing entry (a prefix differs where it ends); None when equal."""
    if a == b:
        return None
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))


def read(run: Path) -> dict[str, dict]:
    return {r["question_id"]: r for r in map(json.loads, (run / "predictions.jsonl").read_text().splitlines())}


def compare(base: Path, run: Path) -> dict:
    b, r = read(base), read(run)
    ranks = [first_difference(b[q]["retrieved_sources"], r[q]["retrieved_sources"]) for q in b if q in r]
    parted = [k for k in ranks if k is not None]
    in_context = statistics.median(len(row["context_sources"]) for row in b.values())
    return {"run": run.name, "questions": len(ranks), "identical": ranks.count(None),
            "first_diff_min": min(parted, default=None), "first_diff_median": statistics.median(parted) if parted else None,
            "base_context_turns_median": in_context}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("base", type=Path)
    p.add_argument("runs", nargs="+", type=Path)
    args = p.parse_args()
    print("| run | questions | identical rankings | first differing rank: min / median | base: context turns (median) |")
    print("| --- | --- | --- | --- | --- |")
    for run in args.runs:
        c = compare(args.base, run)
        print(f"| {c['run']} | {c['questions']} | {c['identical']} | {c['first_diff_min']} / {c['first_diff_median']} | "
              f"{c['base_context_turns_median']} |")


if __name__ == "__main__":
    main()
