"""Turn run folders into the paper's tables, as Markdown and PNG charts.

    python experiments/report.py RUN_OR_SWEEP_DIR [...] --out experiments/results

Every folder given (or found below it) that holds a finished run (metrics.json + config.yaml)
is read. Written to --out, each only when some run feeds it:
  table1.md/.png  LoCoMo per category, one row per memory (ablations go to Table 4)
  table2.md/.png  LongMemEval per question type, one row per memory
  table3.md/.png  cost: build time, LLM tokens to build, context and reader tokens per query, latency
  table4.md/.png  MAGMA and its ablations (memory=magma_no_*), with the change against magma
The metric is the LLM judge when the runs have one, else F1 (task=qa), else evidence recall
(`recall_all@10` and `recall_all@2000tok`, task=retrieval); --metric picks others.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402

from magma_torch.errors import MagmaError  # noqa: E402
from magma_torch.eval.metrics import retrieval_ms  # noqa: E402
from magma_torch.files import read_json_object  # noqa: E402

ABLATIONS = ("magma_no_traversal", "magma_no_beam", "magma_no_episode", "magma_no_entity", "magma_no_causal",
             "magma_no_policy", "magma_no_temporal", "magma_no_adapter")
LOCOMO_ORDER = ("single-hop", "multi-hop", "temporal", "open-domain", "adversarial")
# the parts of a run's config that make two runs of one memory the same experiment
SAME_RUN_KEYS = ("task", "memory", "consolidation", "llm", "judge")


class ReportError(MagmaError, ValueError):
    """Run folders that cannot be reported; the message names the folder."""


def find_runs(paths: list[Path]) -> list[Path]:
    """The finished run folders at or below ``paths`` (metrics.json is written last)."""
    found = []
    for p in paths:
        if not p.is_dir():
            raise ReportError(f"{p}: not a folder")
        hits = [p] if (p / "metrics.json").is_file() else sorted(m.parent for m in p.rglob("metrics.json"))
        if not hits:
            raise ReportError(f"{p}: no finished run (metrics.json) in or below it")
        found += hits
    return found


def load_runs(paths: list[Path]) -> list[dict]:
    """One record per (dataset, memory); the same experiment found twice counts once,
    two different experiments under one name are an error."""
    runs: dict[tuple[str, str], dict] = {}
    for folder in find_runs(paths):
        metrics = read_json_object(folder / "metrics.json")   # a damaged one: DamagedFileError naming it
        # metrics.json copied out of its run folder (experiments/results/locomo_dev) has no config:
        # it is one run per memory already
        cfg = OmegaConf.load(folder / "config.yaml") if (folder / "config.yaml").is_file() else OmegaConf.create()
        same = {k: OmegaConf.to_container(cfg[k]) for k in SAME_RUN_KEYS if k in cfg}
        if "dataset" in cfg:   # its questions: another limit, selection or split file is another experiment
            data = OmegaConf.to_container(cfg.dataset)
            same["dataset"] = {**data, "path": data.get("path") and Path(data["path"]).name}
        key = (metrics["dataset"], metrics["memory"])
        if key in runs:
            if runs[key]["same"] != same:
                raise ReportError(f"{folder} and {runs[key]['folder']}: two different {key[1]} runs on {key[0]} "
                                  "(report them separately)")
            continue
        runs[key] = {"folder": folder, "metrics": metrics, "same": same}
    return list(runs.values())


def pick_metrics(runs: list[dict], wanted: list[str] | None) -> list[str]:
    if wanted:
        return wanted
    overall = [r["metrics"]["overall"] for r in runs]
    for qa_metric in ("judge", "f1"):
        if any(o.get(qa_metric) is not None for o in overall):
            return [qa_metric]
    return ["recall_all@10", "recall_all@2000tok"]


def _cell(values: list) -> str:
    return " / ".join("–" if v is None else f"{v:.3f}" for v in values)


def _categories(runs: list[dict]) -> list[str]:
    cats = list(dict.fromkeys(c for r in runs for c in r["metrics"]["by_category"]))
    known = [c for c in LOCOMO_ORDER if c in cats]
    return known + [c for c in cats if c not in known]


def _has_values(runs, cat, metrics) -> bool:
    return any(r["metrics"]["by_category"][cat].get(m) is not None for r in runs for m in metrics
               if cat in r["metrics"]["by_category"])


def category_table(runs: list[dict], metrics: list[str], title: str, by_score: bool = True) -> tuple[str, list[str]]:
    """Rows: memories (best overall first when ``by_score``, else as given); columns: overall,
    then each category that has values."""
    cats = [c for c in _categories(runs) if _has_values(runs, c, metrics)]
    if by_score:
        runs = sorted(runs, key=lambda r: -(r["metrics"]["overall"].get(metrics[0]) or 0.0))
    counts = {c: max(r["metrics"]["by_category"].get(c, {}).get("n", 0) for r in runs) for c in cats}
    head = ["memory", "overall"] + [f"{c} (n={counts[c]})" for c in cats]
    lines = [f"### {title}", "", f"cells: {' / '.join(metrics)}", "",
             "| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for r in runs:
        m = r["metrics"]
        cells = [m["memory"], _cell([m["overall"].get(k) for k in metrics])]
        cells += [_cell([m["by_category"].get(c, {}).get(k) for k in metrics]) for c in cats]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n", cats


def category_chart(runs: list[dict], metric: str, cats: list[str], title: str, path: Path) -> None:
    groups = cats + ["overall"]
    fig, ax = plt.subplots(figsize=(max(6.0, 1.4 * len(groups) * max(len(runs), 1) / 3), 3.8))
    width = 0.8 / len(runs)
    several = len({r["metrics"]["dataset"] for r in runs}) > 1
    for i, r in enumerate(runs):
        m = r["metrics"]
        vals = [m["by_category"].get(c, {}).get(metric) for c in cats] + [m["overall"].get(metric)]
        label = f"{m['memory']} ({m['dataset']})" if several else m["memory"]
        ax.bar([x + i * width for x in range(len(groups))], [v or 0.0 for v in vals], width, label=label)
    ax.set_xticks([x + width * (len(runs) - 1) / 2 for x in range(len(groups))], groups)
    ax.set_ylim(0, 1)
    ax.set_ylabel(metric)
    ax.set_title(title)
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def cost_table(runs: list[dict]) -> str:
    head = ["dataset", "memory", "questions", "build s (fast path + consolidation)", "build LLM tokens",
            "context tokens / query", "reader tokens / query", "retrieval ms / question"]
    lines = ["### Table 3: cost", "", "| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for r in sorted(runs, key=lambda r: (r["metrics"]["dataset"], r["metrics"]["memory"])):
        m, b, o = r["metrics"], r["metrics"]["build"], r["metrics"]["overall"]
        reader = m.get("answering", {}).get("per_question")
        reader_tokens = "–" if reader is None else f"{reader['prompt_tokens'] + reader['completion_tokens']:.0f}"
        lines.append(f"| {m['dataset']} | {m['memory']} | {m['n_questions']} | "
                     f"{b['fast_path_s']:.1f} + {b['consolidation_s']:.1f} | {b.get('llm_tokens', 0)} | "
                     f"{o['context_tokens_mean']:.0f} | {reader_tokens} | "
                     f"{retrieval_ms(o):.1f} |")
    return "\n".join(lines) + "\n"


def cost_chart(runs: list[dict], path: Path) -> None:
    runs = sorted(runs, key=lambda r: (r["metrics"]["dataset"], r["metrics"]["memory"]))
    labels = [f"{r['metrics']['memory']}\n{r['metrics']['dataset']}" for r in runs]
    panels = [("build s", lambda m: m["build"]["fast_path_s"] + m["build"]["consolidation_s"]),
              ("context tokens / query", lambda m: m["overall"]["context_tokens_mean"]),
              ("retrieval ms / question", lambda m: retrieval_ms(m["overall"]))]
    fig, axes = plt.subplots(1, len(panels), figsize=(4 * len(panels), 0.45 * len(runs) + 1.5))
    for ax, (name, value) in zip(axes, panels, strict=True):
        ax.barh(range(len(runs)), [value(r["metrics"]) for r in runs])
        ax.set_yticks(range(len(runs)), labels if ax is axes[0] else [""] * len(runs), fontsize=7)
        ax.invert_yaxis()
        ax.set_title(name, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def ablation_table(runs: list[dict], metrics: list[str]) -> str:
    """Overall and per category, with each ablation's change against magma on the same dataset."""
    lines = []
    for dataset in sorted({r["metrics"]["dataset"] for r in runs if r["metrics"]["memory"] in ABLATIONS}):
        rows = [r for r in runs if r["metrics"]["dataset"] == dataset]
        base = next((r for r in rows if r["metrics"]["memory"] == "magma"), None)
        rows = _paper_order(rows)
        lines.append(category_table(rows, metrics, f"Table 4: ablations on {dataset}", by_score=False)[0])
        if base is not None:
            lines += ["", f"change of overall {' / '.join(metrics)} against magma:", "",
                      "| memory | Δ overall |", "| --- | --- |"]
            for r in rows[1:]:
                deltas = [_delta(r["metrics"]["overall"].get(k), base["metrics"]["overall"].get(k)) for k in metrics]
                lines.append(f"| {r['metrics']['memory']} | {' / '.join(deltas)} |")
        lines.append("")
    return "\n".join(lines)


def _paper_order(runs: list[dict]) -> list[dict]:
    order = ("magma",) + ABLATIONS
    return sorted(runs, key=lambda r: order.index(r["metrics"]["memory"]))


def _delta(v, base) -> str:
    return "–" if v is None or base is None else f"{v - base:+.3f}"


def write_reports(paths: list[Path], out: Path, wanted: list[str] | None = None) -> list[Path]:
    runs = load_runs(paths)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    locomo = [r for r in runs if r["metrics"]["dataset"] == "locomo"]
    table1 = [r for r in locomo if r["metrics"]["memory"] not in ABLATIONS]
    table2 = [r for r in runs if r["metrics"]["dataset"].startswith("longmemeval")
              and r["metrics"]["memory"] not in ABLATIONS]
    table4 = [r for r in runs if r["metrics"]["memory"] in ("magma",) + ABLATIONS]
    for name, rows, title in (("table1", table1, "Table 1: LoCoMo per category"),
                              ("table2", table2, "Table 2: LongMemEval per question type")):
        if not rows:
            continue
        metrics = pick_metrics(rows, wanted)
        text, cats = category_table(rows, metrics, title)
        (out / f"{name}.md").write_text(text)
        category_chart(rows, metrics[0], cats, f"{title} ({metrics[0]})", out / f"{name}.png")
        written += [out / f"{name}.md", out / f"{name}.png"]
    (out / "table3.md").write_text(cost_table(runs))
    cost_chart(runs, out / "table3.png")
    written += [out / "table3.md", out / "table3.png"]
    if any(r["metrics"]["memory"] in ABLATIONS for r in table4):
        metrics = pick_metrics(table4, wanted)
        (out / "table4.md").write_text(ablation_table(table4, metrics))
        chart_rows = _paper_order(table4)
        cats = [c for c in _categories(chart_rows) if _has_values(chart_rows, c, metrics)]
        category_chart(chart_rows, metrics[0], cats, f"Table 4: ablations ({metrics[0]})", out / "table4.png")
        written += [out / "table4.md", out / "table4.png"]
    return written


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("runs", nargs="+", type=Path, help="run folders or sweep folders holding them")
    p.add_argument("--out", type=Path, required=True, help="folder for the tables and charts")
    p.add_argument("--metric", action="append", help="metric of the cells (repeatable), e.g. --metric f1")
    args = p.parse_args(argv)
    try:
        written = write_reports(args.runs, args.out, args.metric)
    except MagmaError as err:      # a ReportError, or a DamagedFileError naming the file
        print(f"report: error: {err}", file=sys.stderr)
        sys.exit(2)
    for path in written:
        print(path)


if __name__ == "__main__":
    main()
