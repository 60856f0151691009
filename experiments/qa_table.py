"""The QA benchmark table (+experiment=qa_small) from its run folders, as Markdown.

    python experiments/qa_table.py [experiments/results/qa_small] [--out experiments/results/qa_small.md]

Reads every finished run folder <root>/<name>/ (metrics.json; scores.jsonl for the
paired bootstrap), one row each, named by its folder: <memory> as +experiment=qa_small writes
them, magma_llm_graph for magma on the LLM-built graph (+experiment=qa_small_llm_graph).
"Evidence in context" is the share of questions whose first 1,000 tokens of retrieved turns (the
qa_small context budget) hold every evidence turn, `recall_all@1000tok`. It, F1, BLEU-1 and the
judge are over categories 1-4, as metrics.json's `overall`; adversarial questions (category 5) are
scored apart: LoCoMo's rule (the answer says "not mentioned") and the judge. Tokens and seconds
are per question, reader and judge apart.
Below the table: the F1 difference of each --compare A B (folder names) with its paired
bootstrap 95 % interval.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from magma_torch.errors import MagmaError
from magma_torch.eval.compare import CompareError, paired_difference
from magma_torch.files import read_json_object

ORDER = ("magma", "magma_llm_graph", "magma_paper", "magma_no_context", "hybrid_rag", "full_context")
# The published table's bootstraps: retrieval against the baseline and against the paper's fusion alone,
# and the LLM-built graph against the heuristic one.
COMPARE = (("magma", "hybrid_rag"), ("magma", "magma_no_context"), ("magma_llm_graph", "magma"))
RESAMPLES, SEED = 10_000, 0
COLUMNS = ("memory", "n", "evidence in context", "F1", "BLEU-1", "judge", "adversarial: rule / judge",
           "reader tokens/q: prompt / completion", "judge tokens/q: prompt / completion", "s/q: reader + judge", "failed answers")


def number(x: float | None, digits: int = 3) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def cost(block: dict) -> tuple[str, str]:
    """(prompt / completion tokens, seconds) per question of an answering or judging block."""
    per = block.get("per_question", {})
    return (f"{number(per.get('prompt_tokens'), 0)} / {number(per.get('completion_tokens'), 1)}",
            number(per.get("seconds"), 1))


# what row() reads of a task=qa metrics.json (DESIGN.md's contract), block by block
FIELDS = {None: ("n_questions", "overall", "by_category", "judging"), "answering": ("failed",)}


def _check_fields(path: Path, metrics: dict) -> None:
    for block, keys in FIELDS.items():
        where = metrics if block is None else metrics[block]
        missing = [k for k in keys if not isinstance(where, dict) or k not in where]
        if missing:
            raise CompareError(f"{path}: no {', '.join(missing)}" + (f" in {block}" if block else ""))


def row(name: str, metrics: dict) -> list[str]:
    overall, adversarial = metrics["overall"], metrics["by_category"].get("adversarial", {})
    (reader_tokens, reader_s), (judge_tokens, judge_s) = cost(metrics["answering"]), cost(metrics["judging"])
    return [name, str(metrics["n_questions"]), number(overall.get("recall_all@1000tok")), number(overall.get("f1")),
            number(overall.get("bleu1")),
            number(overall.get("judge")), f"{number(adversarial.get('f1'))} / {number(adversarial.get('judge'))}",
            reader_tokens, judge_tokens, f"{reader_s} + {judge_s}", str(metrics["answering"]["failed"])]


def table(root: Path, compare: tuple[tuple[str, str], ...] = COMPARE, resamples: int = RESAMPLES,
          seed: int = SEED, named: bool = False) -> str:
    """The QA table of the run folders below ``root`` and the F1 bootstrap of each ``compare`` pair whose
    folders exist; ``named`` (pairs the user gave): a missing folder is an error."""
    runs = {}
    for path in sorted(root.glob("*/metrics.json")):
        metrics = read_json_object(path)     # a damaged one: DamagedFileError naming it
        if "answering" not in metrics:
            raise CompareError(f"{path.parent}: not a task=qa run")
        _check_fields(path, metrics)
        runs[path.parent.name] = (path.parent, metrics)
    if not runs:
        raise CompareError(f"{root}: no finished run folder (<memory>/metrics.json) below it")
    names = [m for m in ORDER if m in runs] + sorted(set(runs) - set(ORDER))
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + " --- |" * len(COLUMNS)]
    lines += ["| " + " | ".join(row(m, runs[m][1])) + " |" for m in names]
    missing = [name for pair in compare for name in pair if name not in runs]
    if named and missing:    # a typo in --compare printed the table and no comparison, exit 0
        raise CompareError(f"--compare: no run folder {missing[0]!r} in {root} (folders: {', '.join(sorted(runs))})")
    for a, b in [(a, b) for a, b in compare if a in runs and b in runs]:
        d = paired_difference(runs[a][0], runs[b][0], "f1", resamples, seed)
        lines += ["", f"F1 {a} − {b}: {d['difference']:+.3f}, 95 % interval [{d['low']:+.3f}, {d['high']:+.3f}] "
                      f"(paired bootstrap over the {d['n']} questions of categories 1-4, {resamples:,} resamples, "
                      f"seed {seed})"]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("root", nargs="?", type=Path, default=Path("experiments/results/qa_small"))
    ap.add_argument("--out", type=Path, help="write the table here too")
    ap.add_argument("--compare", nargs=2, action="append", metavar=("A", "B"),
                    help="folders whose F1 difference to bootstrap (repeatable; default: %s)"
                    % ", ".join(f"{a} {b}" for a, b in COMPARE))
    ap.add_argument("--resamples", type=int, default=RESAMPLES)
    ap.add_argument("--seed", type=int, default=SEED)
    args = ap.parse_args(argv)
    try:
        text = table(args.root, tuple(map(tuple, args.compare or COMPARE)), args.resamples, args.seed,
                     named=args.compare is not None)
    except MagmaError as err:      # a CompareError, or a DamagedFileError naming the file
        print(f"qa_table: error: {err}", file=sys.stderr)
        sys.exit(2)
    print(text, end="")
    if args.out:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
