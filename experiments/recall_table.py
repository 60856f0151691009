"""The README's LoCoMo recall table from run folders (their metrics.json), one row per memory.

    python experiments/recall_table.py multirun/table1_locomo_dev multirun/table4_locomo_dev \
        --copy-to experiments/results/locomo_dev

Rows follow --order; each cell is `recall_all@10 / recall_all@2000tok`; the last column is the
retrieval time per question (eval/metrics.py `retrieval_ms`, also read from older runs). With
--copy-to, each run's metrics.json and config.yaml are copied to <dir>/<memory>/, the files the
README's tables are regenerated from (`make results`, experiments/published.py).
"""
from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

from report import ABLATIONS, load_runs  # experiments/report.py: the same run discovery and de-duplication

from magma_torch.errors import MagmaError
from magma_torch.eval.metrics import retrieval_ms

CATEGORIES = ("single-hop", "multi-hop", "temporal", "open-domain")
ORDER = ("magma", "magma_mpnet", "magma_paper", "magma_no_context", "hybrid_rag", "vector_rag", "bm25") + ABLATIONS


def cell(block: dict) -> str:
    """``@10 / @2000tok``; "–" for a figure the run does not have (other cut-offs: a KeyError before)."""
    return " / ".join("–" if block.get(k) is None else f"{block[k]:.3f}"
                      for k in ("recall_all@10", "recall_all@2000tok"))


def recall_table(metrics: dict[str, dict], order=ORDER) -> str:
    """Markdown rows for the memories of ``order`` that ``metrics`` (memory -> metrics.json) holds."""
    lines = ["| memory | overall @10 / @2000tok | " + " | ".join(CATEGORIES) + " | retrieval ms / question |",
             "| --- " * (len(CATEGORIES) + 3) + "|"]
    for name in [m for m in order if m in metrics]:
        m = metrics[name]
        cells = [cell(m["overall"])] + [cell(m["by_category"][c]) for c in CATEGORIES]
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {retrieval_ms(m['overall']):.1f} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="+", type=Path)
    ap.add_argument("--order", nargs="+", default=list(ORDER))
    ap.add_argument("--copy-to", type=Path)
    args = ap.parse_args(argv)
    try:
        runs = {r["metrics"]["memory"]: r for r in load_runs(args.runs)}
    except MagmaError as err:      # a ReportError or a DamagedFileError naming the folder (a traceback before)
        print(f"recall_table: error: {err}", file=sys.stderr)
        sys.exit(2)
    print(recall_table({name: run["metrics"] for name, run in runs.items()}, args.order), end="")
    for name, run in runs.items() if args.copy_to else ():
        (args.copy_to / name).mkdir(parents=True, exist_ok=True)
        for file in ("metrics.json", "config.yaml"):
            shutil.copy(run["folder"] / file, args.copy_to / name / file)


if __name__ == "__main__":
    main()
