"""``magma-explain MEMORY_DIR QUESTION``: why a memory retrieves what it retrieves.

MEMORY_DIR is a folder written by ``MagmaMemory.save`` (read with ``MagmaMemory.load(read_only=True)``:
no consolidator or LLM is built, so a memory an LLM consolidated is explained without one), or a
persistent memory's namespace folder (``store_dir/<namespace>``), read with
``MagmaMemory.open_readonly``: its checkpoint and what is still only in its write-ahead log, without
the writer's lock, while a writer may be running.

Prints the intent, the anchors with their rank in each RRF ranking, the beam-search paths
and the linearised context; ``--html`` writes a self-contained page of the retrieved
subgraph, ``--png`` a screenshot of the whole page taken by headless chromium, and
``--svg`` the subgraph alone as a stand-alone figure.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from magma_torch.errors import MagmaError
from magma_torch.explain.graph_svg import graph_svg
from magma_torch.explain.html_view import render_html
from magma_torch.explain.screenshot import ScreenshotError, screenshot
from magma_torch.explain.subgraph import entity_names, explain, updates_outside
from magma_torch.explain.terminal import format_text
from magma_torch.memory import MagmaMemory
from magma_torch.store.durable import CHECKPOINT, WAL
from magma_torch.text.temporal import parse_timestamp


class ExplainError(MagmaError, ValueError):
    """Bad input to magma-explain; the message names the argument, folder or file."""


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="magma-explain", description=__doc__.split("\n\n")[0])
    p.add_argument("memory", type=Path, help="a folder written by MagmaMemory.save, or a persistent memory's "
                   "store_dir/<namespace> folder (read-only, also while its writer runs)")
    p.add_argument("question")
    p.add_argument("--date", help='when the question is asked, e.g. "2023-05-08 13:56" (resolves "last week")')
    p.add_argument("--top", type=int, default=15, help="most salient events and best anchors shown (default 15)")
    p.add_argument("--expansions", type=int, default=10,
                   help="most salient beam-search expansions shown with their paths (default 10)")
    p.add_argument("--budget-tokens", type=int, help="context budget (default: the memory's config)")
    p.add_argument("--html", type=Path, help="write the subgraph view to this HTML file")
    p.add_argument("--png", type=Path, help="write a screenshot of the whole HTML view to this PNG file")
    p.add_argument("--svg", type=Path, help="write the subgraph alone, with its legend, to this SVG file (a figure)")
    return p.parse_args(argv)


def run(args: argparse.Namespace) -> str:
    """Explain one question; writes the requested files and returns the terminal text."""
    if not args.question.strip():
        raise ExplainError("the question is empty")
    if args.top < 1 or args.expansions < 0:
        raise ExplainError(f"--top must be at least 1 and --expansions at least 0, got {args.top} and "
                           f"{args.expansions}")
    if args.budget_tokens is not None and args.budget_tokens < 1:
        raise ExplainError(f"--budget-tokens must be at least 1, got {args.budget_tokens}")
    try:
        when = parse_timestamp(args.date) if args.date is not None else None
    except ValueError as err:
        raise ExplainError(f"--date: {err}") from None
    mem, live = _open(args.memory)
    with mem:
        if len(mem.store) == 0:
            raise ExplainError(f"{args.memory}: the memory holds no events")
        # Explaining never consolidates: a live folder's writer does that, and a saved queue may need an LLM.
        waiting = mem.worker.pending()
        counts = f"{len(mem.store)} events, " + (
            f"{waiting} not consolidated yet (no entity or causal links)" if waiting else "all consolidated")
        if live:
            note = f"{args.memory}: read-only, checkpoint + write-ahead log; {counts}\n"
        else:
            note = f"{args.memory}: {counts}\n" if waiting else ""
        r = mem.retrieve(args.question, when, args.budget_tokens)
        ex = explain(r, args.top, args.expansions, when, mem.retriever.cfg.active_signals, entity_names(mem.store, r),
                     updates_outside(mem.event, r))
    if args.svg:
        _write(args.svg, graph_svg(ex, standalone=True).svg)
    if args.html or args.png:
        page = render_html(ex)
        if args.html:
            _write(args.html, page.html)
        if args.png:
            with tempfile.TemporaryDirectory(prefix="magma-explain-") as tmp:
                html = args.html or Path(tmp) / "explain.html"
                if not args.html:
                    _write(html, page.html)
                screenshot(html, args.png, page.width, page.height)
    return note + format_text(ex)


def _open(folder: Path) -> tuple[MagmaMemory, bool]:
    """The memory in ``folder``, and whether it is a live namespace folder (opened read-only)."""
    where = folder.resolve()
    if where.name == CHECKPOINT and (where.parent / WAL).is_file():   # a save folder, but a stale one
        raise ExplainError(f"{folder} is a namespace folder's checkpoint, without the events only in its "
                           f"write-ahead log: pass the namespace folder {where.parent}")
    live = (folder / CHECKPOINT).is_dir() or (folder / WAL).is_file()
    try:
        if live:
            return MagmaMemory.open_readonly(where.parent, where.name), True
        return MagmaMemory.load(folder, read_only=True), False
    except (OSError, ValueError) as err:   # missing, damaged, or (live) replaced during every read
        raise ExplainError(f"cannot load memory: {err}") from None


def _write(path: Path, text: str) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    except OSError as err:
        raise ExplainError(f"cannot write {path}: {err.strerror}") from None


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    try:
        text = run(args)
    except (ExplainError, ScreenshotError) as err:
        print(f"magma-explain: error: {err}", file=sys.stderr)
        sys.exit(2)
    print(text)


if __name__ == "__main__":
    main()
