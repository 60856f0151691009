"""The figures README.md and BENCHMARKS.md publish, regenerated from the committed result files.

    python experiments/published.py           # rewrite every marked block and the report tables (make results)
    python experiments/published.py --check   # exit 1, naming each block or table that differs from its files

A block is the text between `<!-- results:NAME -->` and `<!-- /results:NAME -->`; BLOCKS maps NAME
to the function that renders it from experiments/results/. The report tables (table1/3/4.md, the
sweep's .md) are regenerated the same way. Nothing here runs an experiment: measuring writes the
files (the commands are in BENCHMARKS.md and the README), this only reads them.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from functools import partial
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from qa_table import table as qa_table  # noqa: E402
from recall_table import CATEGORIES, ORDER, recall_table  # noqa: E402
from report import ABLATIONS, ablation_table, category_table, cost_table, load_runs, pick_metrics, write_reports  # noqa: E402

from magma_torch.bench.cli import markdown_table  # noqa: E402
from magma_torch.eval.compare import CompareError  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "experiments" / "results"
LOCOMO = RESULTS / "locomo_dev"
VARIANTS = RESULTS / "locomo_dev_variants"
RERANK = RESULTS / "rerank"
ADAPTER = RESULTS / "adapter" / "locomo_dev.json"
ADAPTER_MPNET = RESULTS / "adapter" / "locomo_dev_all-mpnet-base-v2.json"   # magma_mpnet's folds
LONGMEMEVAL_FIXTURES = RESULTS / "longmemeval_fixtures"
BENCH = RESULTS / "bench"
QA_SMALL = RESULTS / "qa_small"
DOCS = ("README.md", "BENCHMARKS.md")
BLOCK = re.compile(r"<!-- results:(?P<name>[\w.-]+) -->\n(?P<body>.*?)<!-- /results:(?P=name) -->", re.DOTALL)
RELATION_NAMES = {"temporal": "temporal", "semantic": "semantic", "causal": "causal", "entity": "event–entity",
                  "episode": "event–episode", "episode_chain": "episode-chain", "supersedes": "supersession"}


class PublishedError(ValueError):
    """A marked block or result file that cannot be rendered; the message names it."""


def _load_json(path: Path):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise PublishedError(f"{path.relative_to(ROOT)}: cannot be read ({err})") from err


def _locomo() -> dict[str, dict]:
    """memory -> its committed dev-split metrics.json."""
    return {p.parent.name: _load_json(p) for p in sorted(LOCOMO.glob("*/metrics.json"))}


def _met(ok: bool) -> str:
    return "met" if ok else "**missed**"


def _pair(a: float, b: float, fmt: str = "{:.3f}") -> str:
    return f"{fmt.format(a)} / {fmt.format(b)}"


def _provenance(record: dict, path: Path) -> str:
    """One line: when, where and on what commit the file was measured (magma-bench's own JSON
    records the machine as one string; experiments/machine.py records it field by field)."""
    where = record["machine"]
    if isinstance(where, dict):
        load = ", ".join(f"{x:g}" for x in where["load_average_1_5_15"])
        where = (f"{where['cpu']}, {where['cpus']} CPUs, {where['ram_gib']} GiB RAM, load average {load} "
                 f"(1/5/15 min, at the end), torch {where['torch']}, {where['torch_threads']} threads")
    else:
        where += f", torch {record['torch']}, {record['threads']} threads"
    commit = f" at commit {record['commit']}," if record.get("commit") else ""
    return f"Measured {record['date']}{commit} on {where}: `{path.relative_to(ROOT)}`.\n"


# --- LoCoMo dev split (README) ------------------------------------------------------------------

def locomo_recall() -> str:
    return recall_table(_locomo())


def locomo_memory() -> str:
    m = _locomo()["magma"]
    counts = ", ".join(f"{c} {m['by_category'][c]['n']}" for c in CATEGORIES)
    b = m["build"]
    edges = [f"{n:,} {RELATION_NAMES[r]}" for r, n in b["edges"].items()]
    edges = ", ".join(edges[:-1]) + " and " + edges[-1]
    return (f"Question counts per category: {counts} ({m['overall']['n_recall']} with evidence, "
            f"{m['n_questions']} in all). The magma memories (one per conversation) hold {b['events']:,} events, "
            f"{b['entities']:,} entity nodes and {edges} edges.\n")


def _delta(m: dict, base: dict, block: str, metric: str) -> float:
    part = (lambda x: x["overall"]) if block == "overall" else (lambda x: x["by_category"][block])
    return part(m)[metric] - part(base)[metric]


def locomo_ablations() -> str:
    runs = _locomo()
    base = runs["magma"]
    rows = [n for n in (*ABLATIONS, "magma_no_context", "magma_paper") if n in runs]
    head = ["memory", "overall @10", "overall @2000tok"] + [f"{c} @2000tok" for c in CATEGORIES]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for name in rows:
        cells = [_delta(runs[name], base, "overall", "recall_all@10")]
        cells += [_delta(runs[name], base, block, "recall_all@2000tok") for block in ("overall", *CATEGORIES)]
        lines.append(f"| {name} | " + " | ".join(f"{d:+.3f}" for d in cells) + " |")
    return "\n".join(lines) + "\n"


def _summary_as_metrics(summary: dict) -> dict:
    """A cross-validation summary (train_rerank.summary) in metrics.json's shape, for _delta."""
    return {"overall": summary["overall"], "by_category": {c: summary[c] for c in CATEGORIES if c in summary}}


def locomo_targets() -> str:
    """Issue 11's recall targets: on the committed dev runs, and held out a conversation at a time
    (experiments/train_question_adapter.py). The question adapter and the re-ranker are fitted on
    the dev questions, so the dev runs rank questions they were fitted on; the verdict reads the
    held-out figures, where both are fitted without the conversation."""
    runs = _locomo()
    held = {name: _summary_as_metrics(r["adapter"])
            for name, r in _load_json(ADAPTER)["cross_validation"]["memories"].items()}

    def rows_of(r: dict) -> list[float]:
        m = r["magma"]
        out = [m["overall"]["recall_all@10"], m["overall"]["recall_all@2000tok"],
               m["by_category"]["multi-hop"]["recall_all@2000tok"]]
        for base in ("magma_no_traversal", "magma_no_beam"):
            out += [_delta(m, r[base], "overall", "recall_all@2000tok"), _delta(m, r[base], "multi-hop", "recall_all@2000tok")]
        return out

    names = ["overall `recall_all@10`", "overall `recall_all@2000tok`", "multi-hop `recall_all@2000tok`"]
    # the traversal as a whole (every read of the graph), then the beam search's own share of it
    for what, base in (("traversal gain", "magma_no_traversal"), ("beam-search gain", "magma_no_beam")):
        names += [f"{what}, overall `@2000tok` (magma − {base})", f"{what}, multi-hop `@2000tok`"]
    goals = [0.72, 0.88, 0.60, 0.02, 0.05, 0.02, 0.05]
    lines = ["| target | goal | dev, as run (map and re-ranker fitted on these questions) | held out a conversation at a time |",
             "| --- | --- | --- | --- |"]
    lines += [f"| {what} | ≥ {goal:.2f} | {dev:.3f} | {out:.3f}: {_met(out >= goal)} |"
              for what, goal, dev, out in zip(names, goals, rows_of(runs), rows_of(held), strict=True)]
    return "\n".join(lines) + "\n"


def _flat(tree: dict, prefix: str = "") -> dict:
    out = {}
    for key, value in tree.items():
        out.update(_flat(value, f"{prefix}{key}.") if isinstance(value, dict) else {f"{prefix}{key}": value})
    return out


def locomo_variants() -> str:
    """Settings tried on dev, each a whole run against magma as configured at the same commit;
    a variant's setting is what its config.yaml changes in magma's."""
    runs = {p.name: (_load_json(p / "metrics.json"), yaml.safe_load((p / "config.yaml").read_text()))
            for p in sorted(VARIANTS.iterdir()) if (p / "metrics.json").is_file()}
    if "magma" not in runs:
        raise PublishedError(f"{VARIANTS.relative_to(ROOT)}: no magma/ run to compare the variants with")
    base, base_cfg = runs.pop("magma")
    base_flat = _flat(base_cfg["memory"])
    lines = ["| setting (memory.…) | overall @10 / @2000tok | multi-hop @10 / @2000tok | Δ overall | Δ multi-hop |",
             "| --- | --- | --- | --- | --- |"]

    def row(setting: str, m: dict) -> str:
        o, mh = m["overall"], m["by_category"]["multi-hop"]
        deltas = [" / ".join(f"{_delta(m, base, block, k):+.3f}" for k in ("recall_all@10", "recall_all@2000tok"))
                  for block in ("overall", "multi-hop")]
        return (f"| {setting} | {_pair(o['recall_all@10'], o['recall_all@2000tok'])} | "
                f"{_pair(mh['recall_all@10'], mh['recall_all@2000tok'])} | {deltas[0]} | {deltas[1]} |")

    lines.append(row("as configured (`conf/memory/magma.yaml`)", base))
    for m, cfg in runs.values():
        changed = {k: v for k, v in _flat(cfg["memory"]).items() if base_flat.get(k) != v}
        lines.append(row(", ".join(f"`{k}={v}`" for k, v in changed.items()), m))
    return "\n".join(lines) + "\n"


def locomo_rerank() -> str:
    """The anchor re-ranker held out a conversation at a time (experiments/train_rerank.py):
    RRF's order, the re-ranker, the re-ranker fitted without the graph-support features, and
    magma_no_traversal's query process (no read of the graph) with a re-ranker fitted for it."""
    names = ("locomo_dev", "locomo_dev_no_support", "locomo_dev_no_traversal")
    cv = {name: _load_json(RERANK / f"{name}.json")["cross_validation"] for name in names}
    rows = [("RRF order (`rerank.pool=0`)", cv["locomo_dev"]["rrf"]), ("re-ranked", cv["locomo_dev"]["rerank"]),
            ("re-ranked, no graph support (`--drop support_`)", cv["locomo_dev_no_support"]["rerank"]),
            ("no graph at all (`--memory magma_no_traversal`), RRF order", cv["locomo_dev_no_traversal"]["rrf"]),
            ("no graph at all, re-ranked (fitted without the graph)", cv["locomo_dev_no_traversal"]["rerank"])]
    head = ["anchors", "overall @10 / @2000tok"] + list(CATEGORIES)
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for name, block in rows:
        cells = [block["overall"]] + [block[c] for c in CATEGORIES]
        lines.append(f"| {name} | " + " | ".join(_pair(c["recall_all@10"], c["recall_all@2000tok"]) for c in cells)
                     + " |")
    return "\n".join(lines) + "\n"


def locomo_adapter() -> str:
    """The question adapter held out a conversation at a time (experiments/train_question_adapter.py):
    the dense ranking alone, without and with the map."""
    dense = _load_json(ADAPTER)["cross_validation"]["dense"]
    keys = list(dense["none"])
    lines = ["| questions compared | " + " | ".join(f"cosine alone, `{k}`" for k in keys) + " |",
             "|" + " --- |" * (len(keys) + 1)]
    for name, label in (("none", "as the embedder gives them"), ("adapter", "through the adapter")):
        lines.append(f"| {label} | " + " | ".join(f"{dense[name][k]:.3f}" for k in keys) + " |")
    return "\n".join(lines) + "\n"


def locomo_held_out() -> str:
    """magma and its ablations held out a conversation at a time (the map and the re-ranker's
    weights fitted on the other four), next to the same query process without a map; last,
    magma_mpnet: magma's query process with all-mpnet-base-v2, its maps and weights fitted per fold."""
    runs = _load_json(ADAPTER)["cross_validation"]["memories"]
    runs = runs | {"magma_mpnet": _load_json(ADAPTER_MPNET)["cross_validation"]["memories"]["magma"]}
    head = ["memory", "without a map: overall @10 / @2000tok", "multi-hop", "held-out map: overall @10 / @2000tok",
            *CATEGORIES]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for name, r in runs.items():
        none, ad = r["none"], r["adapter"]
        cells = [_pair(none["overall"]["recall_all@10"], none["overall"]["recall_all@2000tok"]),
                 _pair(none["multi-hop"]["recall_all@10"], none["multi-hop"]["recall_all@2000tok"]),
                 _pair(ad["overall"]["recall_all@10"], ad["overall"]["recall_all@2000tok"])]
        cells += [_pair(ad[c]["recall_all@10"], ad[c]["recall_all@2000tok"]) for c in CATEGORIES]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def longmemeval_episodes() -> str:
    """Session- and turn-level recall on the LongMemEval-schema fixtures, with and without episodes."""
    runs = {p.parent.name: _load_json(p) for p in sorted(LONGMEMEVAL_FIXTURES.glob("*/metrics.json"))}
    keys = ("session_recall_all@2", "session_recall_all@3", "session_recall_all@5", "recall_all@2", "recall_all@5",
            "recall_all@10")
    lines = ["| fixture | memory | questions | " + " | ".join(f"`{k}`" for k in keys) + " |",
             "|" + " --- |" * (len(keys) + 3)]
    for name, m in runs.items():
        fixture, memory = name.split("__")
        lines.append(f"| `tests/data/longmemeval_{fixture}.json` | {memory} | {m['overall']['n_recall']} | "
                     + " | ".join(f"{m['overall'][k]:.3f}" for k in keys) + " |")
    return "\n".join(lines) + "\n"


def qa_small() -> str:
    """The QA benchmark's table (experiments/qa_table.py with its defaults) from the finished run
    folders of experiments/results/qa_small/."""
    try:
        return qa_table(QA_SMALL)
    except CompareError as err:
        raise PublishedError(str(err)) from err


# --- BENCHMARKS.md --------------------------------------------------------------------------------

def locomo_latency() -> str:
    runs = _locomo()
    lines = ["| memory | retrieval ms p50 | retrieval ms p95 |", "| --- | --- | --- |"]
    lines += [f"| {n} | {runs[n]['overall']['retrieval_ms_p50']:.1f} | {runs[n]['overall']['retrieval_ms_p95']:.1f} |"
              for n in ORDER if n in runs]
    return "\n".join(lines) + "\n"


def _measure_table(rows: list[tuple[str, str, str]]) -> str:
    lines = ["| measure | target | measured |", "| --- | --- | --- |"]
    return "\n".join(lines + [f"| {a} | {b} | {c} |" for a, b, c in rows]) + "\n"


def bench_run(name: str) -> str:
    """One `magma-bench` JSON, against issue 5's targets."""
    path = BENCH / name
    r = _load_json(path)
    if r["agreement_with_reference"] is None:
        raise PublishedError(f"{path.relative_to(ROOT)}: measured without the reference (--reference-queries 0); "
                             "this table needs its agreement and speed-up")
    ph = r["phase_ms_per_query"]
    edges = ", ".join(f"{RELATION_NAMES[k]} {v:,}" for k, v in r["edges_by_relation"].items())
    agree = round(r["agreement_with_reference"] * r["reference_queries"])
    rows = [("memory", "–", f"{r['events']:,} events, {r['entities']:,} entities, {r['edges']:,} edges ({edges})"),
            ("bulk ingest", "–", f"{r['ingest_s']:.2f} s: {r['ingest_events_per_s']:,.0f} events/s, "
                                 f"{r['ingest_edges_per_s'] / 1e6:.2f} M edges/s"),
            (f"batched retrieval, batch {r['batch']}", "–",
             f"{r['retrieval_qps']:,.0f} queries/s: similarity {ph['similarity']:.2f} + anchors {ph['anchors']:.2f} + "
             f"beam and salience order {ph['beam']:.2f} ms per question (`similarity_mode`: "
             f"{r['similarity_mode']['batch']})"),
            ("reference (Python) beam search", "–", f"{r['reference_qps']:.2f} queries/s ({r['reference_queries']} queries)"),
            ("speed-up, whole batched path / reference beam", "≥ 50×",
             f"{r['speedup_vs_reference']:.1f}×: {_met(r['speedup_vs_reference'] >= 50)}"),
            ("speed-up, batched beam / reference beam", "–", f"{r['beam_speedup_vs_reference']:.0f}×"),
            ("`agreement_with_reference`", "≥ 0.99", f"{r['agreement_with_reference']:.3f} ({agree} of "
             f"{r['reference_queries']} node sets equal): {_met(r['agreement_with_reference'] >= 0.99)}"),
            ("single-question latency p50 / p95, batch 1, embedding excluded", "p50 ≤ 10 ms",
             f"{_pair(r['retrieval_ms_p50'], r['retrieval_ms_p95'], '{:.2f}')} ms (`similarity_mode`: "
             f"{r['similarity_mode']['batch_1']}): {_met(r['retrieval_ms_p50'] <= 10)}"),
            ("question embedding alone (MiniLM, batch 1, p50)", "stated separately",
             f"{r['question_embedding_ms_p50']:.1f} ms"),
            *([("question adapter alone (batch 1, p50; outside the timed path, like the embedding)", "stated separately",
                f"{r['question_adapter_ms_p50']:.3f} ms")] if r.get("question_adapter_ms_p50") is not None else []),
            ("vector_rag (the same exact dense search, its top 10 alone)", "–",
             f"{r['vector_rag_qps']:,.0f} queries/s at batch {r['batch']} (magma takes "
             f"{r['magma_over_vector_rag_time']:.1f}× its time); p50 {r['vector_rag_ms_p50']:.1f} ms at batch 1"),
            (f"memory per event / per edge ({r['memory_measured_as']})", "–",
             f"{r['bytes_per_event']:,.0f} B / {r['bytes_per_edge']:,.0f} B"),
            ("peak RSS", "–", f"{r['peak_rss_mb']:,.0f} MB")]
    return _measure_table(rows) + "\n" + _provenance(r, path)


def bench_history() -> str:
    """Every committed 10^5-event CPU run (`history/` holds the earlier ones, restored from git)."""
    paths = sorted((BENCH / "history").glob("cpu_100k_*.json")) + [BENCH / "cpu_100k.json"]
    lines = ["| file | measured | machine | vector flags | edges | queries/s (batch 256) | reference q/s | speed-up "
             "| ms/query p50 (batch 1) | batch-1 way |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for p in paths:
        r = _load_json(p)
        # the earliest runs recorded neither the CPU's vector flags nor (the first) the batch-1 way
        flags, way = " ".join(r.get("cpu_flags") or ["–"]), (r.get("similarity_mode") or {}).get("batch_1", "–")
        lines.append(f"| `{p.relative_to(BENCH)}` | {r['date']} | {r['machine']} | {flags} | {r['edges']:,} | "
                     f"{r['retrieval_qps']:.1f} | {r['reference_qps']:.2f} | {r['speedup_vs_reference']:.1f}× | "
                     f"{r['retrieval_ms_p50']:.2f} | {way} |")
    return "\n".join(lines) + "\n"


def bench_sweep() -> str:
    return markdown_table(_load_json(BENCH / "sweep_cpu.json"))


def longmemeval_stream(name: str) -> str:
    path = BENCH / name
    r = _load_json(path)
    lines = ["| file | turns | load time | records/s | MB/s | peak RSS before loading | peak RSS growth while loading |",
             "| --- | --- | --- | --- | --- | --- | --- |",
             f"| {r['records']:,} questions, {r['file_mb']:,} MB | {r['turns']:,} | {r['load_s']} s | "
             f"{r['records_per_s']:,} | {r['mb_per_s']} | {r['peak_rss_before_mb']:,} MB | {r['peak_rss_growth_mb']} MB |"]
    return "\n".join(lines) + "\n\n" + _provenance(r, path)


BLOCKS = {
    "locomo_recall": locomo_recall,
    "locomo_memory": locomo_memory,
    "locomo_ablations": locomo_ablations,
    "locomo_targets": locomo_targets,
    "locomo_variants": locomo_variants,
    "locomo_rerank": locomo_rerank,
    "locomo_adapter": locomo_adapter,
    "locomo_held_out": locomo_held_out,
    "locomo_latency": locomo_latency,
    "longmemeval_episodes": longmemeval_episodes,
    "qa_small": qa_small,
    "bench_100k": partial(bench_run, "cpu_100k.json"),
    "bench_100k_2026-11-30": partial(bench_run, "history/cpu_100k_2026-11-30_0807.json"),
    "bench_100k_2026-12-01_2128": partial(bench_run, "history/cpu_100k_2026-12-01_2128.json"),
    "bench_history": bench_history,
    "bench_sweep": bench_sweep,
    "longmemeval_stream": partial(longmemeval_stream, "longmemeval_stream.json"),
}


# --- documents and report tables ------------------------------------------------------------------

def render(text: str, doc: str) -> str:
    """``text`` with every marked block rendered again from its files."""
    def fill(match: re.Match) -> str:
        name = match["name"]
        if name not in BLOCKS:
            raise PublishedError(f"{doc}: unknown results block {name!r} (known: {', '.join(BLOCKS)})")
        return f"<!-- results:{name} -->\n{BLOCKS[name]()}<!-- /results:{name} -->"
    return BLOCK.sub(fill, text)


def report_tables() -> dict[Path, str]:
    """experiments/report.py's tables and magma-bench's sweep table, as the committed files give them."""
    runs = load_runs([LOCOMO])
    table1 = [r for r in runs if r["metrics"]["memory"] not in ABLATIONS]
    table4 = [r for r in runs if r["metrics"]["memory"] in ("magma",) + ABLATIONS]
    return {RESULTS / "table1.md": category_table(table1, pick_metrics(table1, None), "Table 1: LoCoMo per category")[0],
            RESULTS / "table3.md": cost_table(runs),
            RESULTS / "table4.md": ablation_table(table4, pick_metrics(table4, None)),
            BENCH / "sweep_cpu.md": bench_sweep(),
            RESULTS / "qa_small.md": qa_small()}


def stale() -> list[str]:
    """One line per marked block or report table that differs from what its files give."""
    found = []
    for doc in DOCS:
        text = (ROOT / doc).read_text()
        for match in BLOCK.finditer(text):
            if render(match[0], doc) != match[0]:
                found.append(f"{doc}: block {match['name']} differs from its files")
    found += [f"{p.relative_to(ROOT)} differs from its files" for p, text in report_tables().items()
              if not p.is_file() or p.read_text() != text]
    return found


def write() -> None:
    for doc in DOCS:
        (ROOT / doc).write_text(render((ROOT / doc).read_text(), doc))
    write_reports([LOCOMO], RESULTS)  # table1/3/4 .md and their charts
    (BENCH / "sweep_cpu.md").write_text(bench_sweep())
    (RESULTS / "qa_small.md").write_text(qa_small())


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="change nothing; exit 1 if a table is stale")
    args = ap.parse_args(argv)
    try:
        problems = stale() if args.check else write()
    except PublishedError as err:
        print(f"published: error: {err}", file=sys.stderr)
        sys.exit(2)
    for line in problems or ():
        print(line, file=sys.stderr)
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
