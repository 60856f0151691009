"""magma-bench: build a synthetic memory, ingest it, time batched retrieval (DESIGN 3.3).

    magma-bench --events 100000 --queries 2000 --batch 256 --device cpu --json out.json
    magma-bench --sweep --queries 1000 --batch 256       # 10^3..10^6 events: table + PNG

Sizes not given on the command line come from conf/bench/default.yaml (``run`` and
``sweep``), as do the synthetic graph and the retrieval settings. The JSON record goes to
stdout (and --json); a progress bar and, after the JSON, a short summary go to stderr.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import torch
import yaml
from omegaconf.errors import OmegaConfBaseException

from magma_torch.bench.measure import Bench, load_config
from magma_torch.config.schema import MemoryConfig, problems
from magma_torch.query.intent import IntentClassifier

TABLE_COLUMNS = (("events", "events", "{:,}"), ("edges", "edges", "{:,}"),
                 ("ingest_events_per_s", "ingest events/s", "{:,.0f}"),
                 ("retrieval_qps", "queries/s (batch)", "{:,.0f}"),
                 ("batch_ms_p50", "ms/batch p50", "{:.1f}"),
                 ("retrieval_ms_p50", "ms/query p50 (batch 1)", "{:.2f}"),
                 ("retrieval_ms_p95", "ms/query p95 (batch 1)", "{:.2f}"),
                 ("reference_qps", "reference q/s", "{:.1f}"),
                 ("speedup_vs_reference", "speed-up", "{:.0f}x"),
                 ("agreement_with_reference", "agreement", "{:.3f}"),
                 ("vector_rag_qps", "vector_rag q/s", "{:,.0f}"),
                 ("bytes_per_event", "B/event", "{:,.0f}"), ("bytes_per_edge", "B/edge", "{:,.0f}"),
                 ("peak_rss_mb", "peak RSS MB", "{:,.0f}"))


def _clean(value):
    """JSON without NaN: an unmeasured figure is null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_clean(v) for v in value]
    return value


def write_json(path: str | Path, record) -> None:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(_clean(record), indent=2) + "\n")


def markdown_table(records: list[dict]) -> str:
    head = "| " + " | ".join(title for _, title, _ in TABLE_COLUMNS) + " |"
    rule = "|" + "---|" * len(TABLE_COLUMNS)
    body = ["| " + " | ".join("–" if r.get(key) is None or (isinstance(r[key], float) and not math.isfinite(r[key]))
                              else fmt.format(r[key]) for key, _, fmt in TABLE_COLUMNS) + " |" for r in records]
    return "\n".join([head, rule, *body]) + "\n"


def plot(records: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    for device in sorted({r["device"] for r in records}):
        rs = sorted((r for r in records if r["device"] == device), key=lambda r: r["events"])
        x = [r["events"] for r in rs]
        left.plot(x, [1000 / r["retrieval_qps"] for r in rs], "o-", label=f"{device}, batch {rs[0]['batch']}")
        left.plot(x, [r["retrieval_ms_p50"] for r in rs], "s--", label=f"{device}, batch 1 (p50)")
        right.plot(x, [r["retrieval_qps"] for r in rs], "o-", label=f"magma, {device}")
        right.plot(x, [r["vector_rag_qps"] for r in rs], "^:", label=f"vector_rag, {device}")
        right.plot(x, [r["reference_qps"] for r in rs], "x-.", label=f"reference (Python), {device}")
    for ax, label in ((left, "ms per query"), (right, "queries/s")):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("events in memory")
        ax.set_ylabel(label)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle("magma-bench: anchors + beam search + salience order (question embedding excluded)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def summary(r: dict) -> str:
    """A few lines a person reads after the JSON: sizes, throughput, latency, agreement."""
    def num(key: str, fmt: str) -> str:
        return "–" if r.get(key) is None or not math.isfinite(r[key]) else fmt.format(r[key])

    phases = ", ".join(f"{k} {v:.3f}" for k, v in r["phase_ms_per_query"].items())
    return "\n".join([
        f"magma-bench: {r['events']:,} events, {r['edges']:,} edges on {r['device']} ({r['machine']})",
        f"  ingest       {num('ingest_events_per_s', '{:,.0f}')} events/s",
        f"  retrieval    {num('retrieval_qps', '{:,.0f}')} questions/s in batches of {r['batch']}; "
        f"ms per question by phase: {phases}",
        f"  batch 1      p50 {num('retrieval_ms_p50', '{:.2f}')} ms, p95 {num('retrieval_ms_p95', '{:.2f}')} ms "
        f"over {r['single_queries']} questions (+ {num('question_embedding_ms_p50', '{:.1f}')} ms to embed one, "
        f"+ {num('question_adapter_ms_p50', '{:.3f}')} ms through the question adapter)",
        f"  reference    agreement {num('agreement_with_reference', '{:.3f}')} over {r['reference_queries']} "
        f"questions; {num('speedup_vs_reference', '{:,.0f}')}x its {num('reference_qps', '{:.1f}')} questions/s",
        f"  vector_rag   {num('vector_rag_qps', '{:,.0f}')} questions/s; peak RSS {num('peak_rss_mb', '{:,.0f}')} MB"])


def sweep(cfg, queries: int, batch: int, device: str, out_dir: Path, sizes: list[int],
          progress: bool = True) -> list[dict]:
    """One measurement per memory size; the table, JSON and PNG are rewritten after each
    size, so a sweep cut short keeps what it measured."""
    out_dir.mkdir(parents=True, exist_ok=True)
    records = []
    for events in sizes:
        bench = Bench.build(cfg, events, queries, device, progress)
        records.append(bench.measure(batch, progress=progress))
        del bench
        print(json.dumps(_clean(records[-1])), flush=True)
        print(summary(records[-1]), file=sys.stderr, flush=True)
        stem = out_dir / f"sweep_{device}"
        write_json(stem.with_suffix(".json"), records)
        stem.with_suffix(".md").write_text(markdown_table(records))
        plot(records, stem.with_suffix(".png"))
    return records


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="magma-bench", description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, help="events in the synthetic memory (default: run.events)")
    ap.add_argument("--queries", type=int, help="questions timed (default: run.queries)")
    ap.add_argument("--batch", type=int, help="questions per batch (default: run.batch)")
    ap.add_argument("--single-queries", type=int,
                    help="questions also timed one at a time, for retrieval_ms_p50/_p95 (default: run.single_queries)")
    ap.add_argument("--reference-queries", type=int,
                    help="questions also run through the plain-Python reference, for agreement_with_reference "
                         "and reference_qps; 0 skips it (default: run.reference_queries)")
    ap.add_argument("--device", default="cpu", help="cpu or cuda[:i]")
    ap.add_argument("--json", help="write the result record(s) here")
    ap.add_argument("--sweep", action="store_true", help="measure every size in sweep.events")
    ap.add_argument("--sweep-events", type=int, nargs="+", help="sizes for --sweep (default: sweep.events)")
    ap.add_argument("--out-dir", help="--sweep output folder (default: sweep.out_dir)")
    ap.add_argument("--threads", type=int, help="torch intra-op threads (default: run.threads, else torch's)")
    ap.add_argument("--vector-backend", choices=["auto", "faiss", "torch"],
                    help="the store's vector index, for ingest's semantic links (default: run.vector_backend)")
    ap.add_argument("--config", help="bench config file (default: the packaged conf/bench/default.yaml)")
    ap.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    args = ap.parse_args(argv)
    try:
        cfg = load_config(args.config)
    except (OSError, ValueError, yaml.YAMLError, OmegaConfBaseException) as err:
        ap.error(f"--config: {err}")
    # Every setting is checked before the memory is built: a bad one fails in one line, not after the run.
    # A flag's value, else the config file's (run.<flag>), which the flag would have overridden.
    # run.ingest_batch, run.warmup_batches and run.seed have no flag; load_config checked graph, queries and retrieval.
    for flag, minimum in (("vector_backend", None), ("single_queries", 1), ("reference_queries", 0), ("events", 1),
                          ("queries", 1), ("batch", 1), ("threads", 1), ("ingest_batch", 1), ("warmup_batches", 0),
                          ("seed", 0)):
        given = getattr(args, flag, None)
        value = cfg.run[flag] if given is None else given
        if minimum is not None and value is not None and not (type(value) is int and value >= minimum):
            named = f"--{flag.replace('_', '-')}" if given is not None else f"--config: run.{flag}"
            ap.error(f"{named} must be at least {minimum}, got {value!r}")
        cfg.run[flag] = value
    # The flag's choices are argparse's; the config file's value is checked by the store's schema.
    problem = next(problems(MemoryConfig, {"vector_backend": cfg.run.vector_backend}, "run"), None)
    if problem:
        ap.error(f"--config: {problem}")
    if not (type(cfg.vector_rag_k) is int and cfg.vector_rag_k >= 1):
        ap.error(f"--config: vector_rag_k must be at least 1, got {cfg.vector_rag_k!r}")
    # The timed path runs the bundled intent head on the synthetic questions: it reads one width only.
    head_dim = IntentClassifier.load().meta["dim"]
    if cfg.graph.dim != head_dim:
        ap.error(f"--config: graph.dim must be the intent head's width {head_dim}, got {cfg.graph.dim!r}")
    sizes = args.sweep_events or list(cfg.sweep.events)
    if args.sweep and not all(type(n) is int and n >= 1 for n in sizes):
        named = "--sweep-events" if args.sweep_events else "--config: sweep.events"
        ap.error(f"{named} must be at least 1 each, got {sizes}")
    _check_device(ap, args.device)
    if args.json:
        _check_writable(ap, Path(args.json))
    out_dir = Path(args.out_dir or cfg.sweep.out_dir)
    if args.sweep:
        _check_folder(ap, f"--out-dir {out_dir}" if args.out_dir else f"--config: sweep.out_dir {out_dir}", out_dir)
    if cfg.run.threads:
        torch.set_num_threads(cfg.run.threads)
    progress = not args.no_progress
    if args.sweep:
        out = sweep(cfg, cfg.run.queries, cfg.run.batch, args.device, out_dir, sizes, progress)
    else:
        bench = Bench.build(cfg, cfg.run.events, cfg.run.queries, args.device, progress)
        out = bench.measure(cfg.run.batch, progress=progress)
        print(json.dumps(_clean(out), indent=2), flush=True)
    if args.json:
        write_json(args.json, out)
    if not args.sweep:   # (a sweep summarised each size as it went)
        print(summary(out) + (f"\n  JSON         {args.json}" if args.json else ""), file=sys.stderr)


def _check_device(ap: argparse.ArgumentParser, device: str) -> None:
    try:
        kind = torch.device(device).type
    except RuntimeError as err:
        ap.error(f"--device {device}: {err}")
    if kind == "cuda" and not torch.cuda.is_available():
        ap.error(f"--device {device}: CUDA is not available on this machine")


def _check_writable(ap: argparse.ArgumentParser, path: Path) -> None:
    """``path`` can be written once the run is done: not a folder, in a folder that exists or can be made."""
    if path.is_dir():
        ap.error(f"--json {path}: is a folder")
    _check_folder(ap, f"--json {path}", path.parent, "its folder")


def _check_folder(ap: argparse.ArgumentParser, named: str, folder: Path, what: str = "the folder") -> None:
    """``folder`` exists or is made now; ``named``: the flag or setting and its value, for the error."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as err:   # a file of that name too: "File exists"
        ap.error(f"{named}: cannot make {what}: {err.strerror}")


if __name__ == "__main__":
    main()
