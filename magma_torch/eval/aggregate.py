"""magma-aggregate: merge the run folders of one sharded experiment into one run folder.

A Slurm array runs one shard per task (``dataset.shard=i/n``), each into its own folder;
this step (a dependency job) checks that every shard finished with the same configuration and
disjoint questions, then writes the merged ``predictions.jsonl``, ``metrics.json`` (recomputed
from the per-question rows, build counters summed), ``config.yaml`` and the plot.

    magma-aggregate --out RUN_DIR SHARD_DIR [SHARD_DIR ...]
"""
from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

from omegaconf import OmegaConf

from magma_torch.eval.plots import plot_categories
from magma_torch.eval.runner import RECALL_EXCLUDED, llm_costs, summarise

# settings that may differ between the shards of one experiment
PER_SHARD = ("out_dir", "dataset.shard", "dataset.sample_ids")


class AggregateError(ValueError):
    """Shard folders that cannot be merged; the message names the folder."""


def _shard_config(folder: Path):
    cfg = OmegaConf.load(folder / "config.yaml")
    for key in PER_SHARD:   # (out_dir holds a ${hydra:...} interpolation: set, never resolved)
        OmegaConf.update(cfg, key, None, force_add=True)
    return cfg


def read_shard(folder: Path) -> tuple[dict, list[dict]]:
    """A finished shard's metrics and rows; an unfinished one (no metrics.json) is an error."""
    for name in ("metrics.json", "predictions.jsonl", "config.yaml"):
        if not (folder / name).is_file():
            raise AggregateError(f"{folder}: no {name} (the shard did not finish)")
    metrics = json.loads((folder / "metrics.json").read_text())
    rows = [json.loads(line) for line in (folder / "predictions.jsonl").read_text().splitlines() if line.strip()]
    if len(rows) != metrics["n_questions"]:
        raise AggregateError(f"{folder}: predictions.jsonl has {len(rows)} rows, metrics.json counts "
                             f"{metrics['n_questions']}")
    return metrics, rows


def _sum_build(blocks: list[dict]) -> dict:
    """Counters and seconds add up over shards; per-relation edge counts too."""
    out: dict = {}
    for b in blocks:
        for k, v in b.items():
            if isinstance(v, dict):
                sub = out.setdefault(k, {})
                for name, n in v.items():
                    sub[name] = sub.get(name, 0) + n
            else:
                out[k] = out.get(k, 0) + v
    return out


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
    rows = [r for _, shard_rows in parts for r in shard_rows]
    seen = Counter(r["question_id"] for r in rows)
    twice = [q for q, c in seen.items() if c > 1]
    if twice:
        raise AggregateError(f"question {twice[0]!r} is in more than one shard: the shards overlap")
    task = first_cfg.task
    first = parts[0][0]
    categories = list(dict.fromkeys(c for m, _ in parts for c in m["by_category"]))
    metrics = dict(first)
    metrics.update({
        "n_questions": len(rows),
        "overall": summarise([r for r in rows if r["category"] not in RECALL_EXCLUDED], task),
        "by_category": {c: summarise([r for r in rows if r["category"] == c], task) for c in categories},
        "build": _sum_build([m["build"] for m, _ in parts]),
        "shards": [str(f) for f in shards],
    })
    if "answering" in first:
        answering, judging = llm_costs(rows)
        metrics["answering"] = {**answering, "llm": first["answering"].get("llm")}
        metrics["judging"] = {**judging, "llm": first["judging"].get("llm")}
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.yaml").write_text(OmegaConf.to_yaml(first_cfg))
    with (out / "predictions.jsonl").open("w") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)
    plot_categories(metrics, out / "recall_by_category.png")
    # written last: a folder with metrics.json is a finished run
    (out / "metrics.json").write_text(json.dumps(metrics, indent=2))
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
