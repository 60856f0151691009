"""Regenerate docs/explain_example.png and docs/explain_graph.svg: the first demo conversation
saved as a memory, then one question explained by magma-explain (terminal text on stdout, the
HTML page, its PNG and the graph alone as an SVG figure written).

    python experiments/explain_example.py --out runs/explain_example
"""
from __future__ import annotations

import argparse
from pathlib import Path

from magma_torch import MagmaMemory
from magma_torch.eval.datasets import load_demo
from magma_torch.eval.runner import records
from magma_torch.explain.cli import main as magma_explain

QUESTION, ASKED_AT = "What did Tomás do last weekend?", "2023-06-03 10:05"   # the third session's date


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("runs/explain_example"), help="memory and HTML go here")
    ap.add_argument("--png", type=Path, default=Path("docs/explain_example.png"))
    ap.add_argument("--svg", type=Path, default=Path("docs/explain_graph.svg"))
    ap.add_argument("--question", default=QUESTION)
    ap.add_argument("--date", default=ASKED_AT)
    args = ap.parse_args()
    with MagmaMemory() as mem:
        mem.add_many(records(load_demo()[0]))
        mem.consolidate()
        mem.save(args.out / "memory")
    magma_explain([str(args.out / "memory"), args.question, "--date", args.date,
                   "--html", str(args.out / "explain.html"), "--png", str(args.png), "--svg", str(args.svg)])


if __name__ == "__main__":
    main()
