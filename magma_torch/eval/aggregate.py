"""magma-aggregate: merge the run folders of one sharded experiment into one run folder.

A Slurm array runs one shard per task (``dataset.shard=i/n``), each into its own folder;
this step (a dependency job) checks that every shard finished with the same configuration and
disjoint questions, then writes the merged ``predictions.jsonl`` and ``scores.jsonl``,
``metrics.json`` (recomputed from the per-question rows, build counters summed), ``config.yaml``
and the plot.

    magma-aggregate --out RUN_DIR SHARD_DIR [SHARD_DIR ...]
"""
from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

from omegaconf import OmegaConf

from magma_torch.errors import MagmaError
from magma_torch.eval.plots import plot_categories
from magma_torch.eval.run_folder import counted, without_text
from magma_torch.eval.runner import llm_costs, summarise_run
from magma_torch.files import write_atomic

# settings that may differ between the shards of one experiment
PER_SHARD = ("out_dir", "dataset.shard", "dataset.sample_ids")


class AggregateError(MagmaError, ValueError):
    """Shard folders that cannot be merged; the message names the folder."""


def _shard_config(folder: Path):
    cfg = OmegaConf.load(folder / "config.yaml")
    for key in PER_SHARD:   # (out_dir holds a ${hydra:...} interpolation: set, never resolved)
        OmegaConf.update(cfg, key, None, force_add=True)
    return cfg


def _json_lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def read_shard(folder: Path) -> tuple[dict, list[dict], list[dict]]:
    """A finished shard's metrics, and the question rows and memory builds it counts; an unfinished
    one (no metrics.json) is an error."""
    for name in ("metrics.json", "predictions.jsonl", "samples.jsonl", "config.yaml"):
        if not (folder / name).is_file():
            raise AggregateError(f"{folder}: no {name} (the shard did not finish)")
    metrics = json.loads((folder / "metrics.json").read_text())
    rows = counted(metrics, _json_lines(folder / "predictions.jsonl"))
    if len(rows) != metrics["n_questions"]:
        raise AggregateError(f"{folder}: predictions.jsonl has {len(rows)} rows of counted samples, metrics.json "
                             f"counts {metrics['n_questions']}")
    return metrics, rows, counted(metrics, _json_lines(folder / "samples.jsonl"))


def aggregate(shards: list[Path], out: Path) -> dict:
    """Merge ``shards`` into ``out``; returns the merged metrics."""
    if not shards:
        raise AggregateError("no shard folders given")
    first_cfg = _shard_config(shards[0])
    parts = []
    for folder in shards:
        if _shard_config(folder) != first_cfg:
            raise AggregateError(f"{folder}: its config.yaml differs from {shards[0]} beyond {', '.join(PER_SHARD)}")
        parts.append(read_shard(folder))
    rows = [r for _, shard_rows, _ in parts for r in shard_rows]
    seen = Counter(r["question_id"] for r in rows)
    twice = [q for q, c in seen.items() if c > 1]
    if twice:
        raise AggregateError(f"question {twice[0]!r} is in more than one shard: the shards overlap")
    first = parts[0][0]
    # the same computation as a single run's metrics.json, over every shard's rows and builds
    metrics = summarise_run(first_cfg, rows, [b for _, _, builds in parts for b in builds], None, None)
    metrics["shards"] = [str(f) for f in shards]
    if "answering" in first:
        answering, judging = llm_costs(rows)
        metrics["answering"] = {**answering, "llm": first["answering"].get("llm")}
        metrics["judging"] = {**judging, "llm": first["judging"].get("llm")}
        metrics["prompts"] = first.get("prompts")
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.yaml").write_text(OmegaConf.to_yaml(first_cfg))
    with (out / "predictions.jsonl").open("w") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)
    with (out / "scores.jsonl").open("w") as f:
        f.writelines(json.dumps(without_text(r)) + "\n" for r in rows)
    with (out / "samples.jsonl").open("w") as f:
        f.writelines(json.dumps(b) + "\n" for _, _, builds in parts for b in builds)
    plot_categories(metrics, out / "recall_by_category.png")
    # written last: a folder with metrics.json is a finished run
    write_atomic(out / "metrics.json", json.dumps(metrics, indent=2))
    return metrics


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="magma-aggregate", description=__doc__.split("\n\n")[0])
    p.add_argument("shards", nargs="+", type=Path, help="the shard run folders")
    p.add_argument("--out", type=Path, required=True, help="the merged run folder")
    args = p.parse_args(argv)
    try:
        metrics = aggregate(args.shards, args.out)
    except AggregateError as err:
        print(f"magma-aggregate: error: {err}", file=sys.stderr)
        sys.exit(2)
    print(f"{len(args.shards)} shards, {metrics['n_questions']} questions -> {args.out / 'metrics.json'}")


if __name__ == "__main__":
    main()
