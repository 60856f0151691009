"""A seeded sample of a QA run's judge verdicts, as Markdown rows for a person to check by hand.

    python experiments/judge_audit.py experiments/results/qa_small/magma --sample 30 --seed 0

Reads the run folder's predictions.jsonl (it holds the texts: run the benchmark first, as the
README's QA section says), draws ``--sample`` answered questions over every category with
``--seed``, and prints one row per question: its id and category, the question, the gold answer,
the answer as scored (dates spelled out), its F1 and the judge's verdict, and an empty column for
the hand verdict. Adversarial questions show LoCoMo's trap answer as the gold: a correct answer
says the conversation does not mention it. Below the rows, the shape of every answer of the run
by category: words per answer, answers that abstain (LoCoMo's rule, eval/qa_metrics.abstains),
and for temporal questions the answers that hold a date.
"""
from __future__ import annotations

import argparse
import json
import random
import re
from collections import defaultdict
from pathlib import Path

from magma_torch.eval.qa_metrics import abstains

MONTHS = "January|February|March|April|May|June|July|August|September|October|November|December"
DATE = re.compile(rf"\b(?:{MONTHS}|(?:19|20)\d\d)\b", re.I)   # a month or a year: a date, whole or partial


def cell(text) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", type=Path, help="a task=qa run folder")
    ap.add_argument("--sample", type=int, default=30)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    path = args.run / "predictions.jsonl"
    if not path.is_file():
        ap.error(f"{path} does not exist: it is written by the run (and git-ignored)")
    rows = [r for r in map(json.loads, path.read_text().splitlines()) if "question" in r and "judge" in r]
    picked = sorted(random.Random(args.seed).sample(range(len(rows)), min(args.sample, len(rows))))
    print("| # | question id | category | question | gold | answer | F1 | judge | by hand |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for n, i in enumerate(picked, 1):
        r = rows[i]
        print(f"| {n} | {r['question_id']} | {r['category']} | {cell(r['question'])} | {cell(r['gold'])} | "
              f"{cell(r['prediction'])} | {r['f1']:.2f} | {r['judge']} |  |")
    print()
    print(answer_shape(rows))


def answer_shape(rows: list[dict]) -> str:
    """Markdown: per category, questions, mean / longest words per answer, abstaining answers, and
    for temporal questions the answers holding a month or a year."""
    by_cat = defaultdict(list)
    for r in rows:
        by_cat[r["category"]].append(r["prediction"])
    lines = ["| category | n | words per answer: mean / max | abstaining answers | answers with a date |",
             "| --- | --- | --- | --- | --- |"]
    for cat, answers in sorted(by_cat.items()):
        words = [len(a.split()) for a in answers]
        dated = f"{sum(bool(DATE.search(a)) for a in answers)}" if cat == "temporal" else "-"
        lines.append(f"| {cat} | {len(answers)} | {sum(words) / len(words):.1f} / {max(words)} | "
                     f"{sum(map(abstains, answers))} | {dated} |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
