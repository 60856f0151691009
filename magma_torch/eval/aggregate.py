"""magma-aggregate: merge the run folders of one sharded experiment into one run folder.

A Slurm array runs one shard per task (``dataset.shard=i/n``), each into its own folder;
this step (a dependency job) checks that every shard is there (shards 0..n-1, each once) and
finished with the same configuration and disjoint questions, then writes the merged
``predictions.jsonl`` and ``scores.jsonl``, ``metrics.json`` (recomputed from the per-question
rows, build counters summed), ``config.yaml`` and the plot.

    magma-aggregate --out RUN_DIR SHARD_DIR [SHARD_DIR ...]
"""
from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

import yaml
from omegaconf import DictConfig, OmegaConf

from magma_torch.errors import MagmaError
from magma_torch.eval.datasets import parse_shard
from magma_torch.eval.plots import plot_categories
from magma_torch.eval.run_folder import (RESULT_NEUTRAL, counted, differences, shown_changes, without_settings,
                                         without_text)
from magma_torch.eval.runner import llm_costs, summarise_run
from magma_torch.files import DamagedFileError, read_complete_lines, read_json_object, write_atomic
from magma_torch.store.persistence import file_above

# settings that differ between the shards of one experiment (blanked in the merged config.yaml); those that
# do not change results (run_folder.RESULT_NEUTRAL: a resumed shard may have changed them) may differ too
PER_SHARD = ("out_dir", "dataset.shard", "dataset.sample_ids")
# a task=qa run's metrics.json holds both (the merge takes their llm names from the first shard's)
LLM_BLOCKS = ("answering", "judging")


class AggregateError(MagmaError, ValueError):
    """Shard folders that cannot be merged; the message names the folder."""


def _check_out(out: Path) -> None:
    """``out`` can be the merged run folder: not a file, nor below one (checked before any shard is read;
    made only once every shard is read)."""
    if out.exists() and not out.is_dir():
        raise AggregateError(f"--out {out}: is a file, not a folder")
    if (file := file_above(out)) is not None:
        raise AggregateError(f"--out {out}: {file} is a file, not a folder; cannot make a folder below it")


def _shard_config(folder: Path) -> tuple[DictConfig, str | None]:
    """The config of a finished shard's folder with the PER_SHARD settings blanked, and its
    dataset.shard; a folder that is missing, unfinished or holds no run's config is an error."""
    # Checked first, before any shard is read: a typo or an unfinished shard is named, not a FileNotFoundError
    if not folder.is_dir():
        raise AggregateError(f"{folder}: no such folder")
    for name in ("metrics.json", "predictions.jsonl", "samples.jsonl", "config.yaml"):
        if not (folder / name).is_file():
            raise AggregateError(f"{folder}: no {name} (the shard did not finish)")
    try:
        cfg = OmegaConf.load(folder / "config.yaml")
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        raise AggregateError(f"{folder / 'config.yaml'}: not YAML ({getattr(err, 'problem', None) or err}"
                             f"{f', line {mark.line + 1}' if mark else ''})") from None
    if not isinstance(cfg, DictConfig):
        raise AggregateError(f"{folder / 'config.yaml'}: not a run's config (a YAML mapping)")
    shard = OmegaConf.select(cfg, "dataset.shard")
    # (folders written before config.yaml was resolved hold out_dir: ${hydra:...}: set, never resolved)
    for key in PER_SHARD:
        OmegaConf.update(cfg, key, None, force_add=True)
    return cfg, shard


def _compared(cfg: DictConfig) -> dict:
    """What must be equal across shards: the config without the settings that do not change results."""
    return without_settings(OmegaConf.to_container(cfg), RESULT_NEUTRAL)


def _check_every_shard(folders: list[Path], shards: list[str | None]) -> None:
    """Folders run with dataset.shard=i/n must be shards 0..n-1 of one n, each once: a merge of
    some of them would look like a finished run over the whole dataset. Folders split by
    dataset.sample_ids instead (no dataset.shard) carry nothing to check this by."""
    if all(s is None for s in shards):
        return
    index: dict[int, Path] = {}
    counts = set()
    for folder, shard in zip(folders, shards, strict=True):
        if shard is None:
            raise AggregateError(f"{folder}: no dataset.shard, unlike the other folders: not a shard of the same run")
        i, n = parse_shard(shard)
        if i in index:
            raise AggregateError(f"{folder}: shard {i}/{n} again (also {index[i]})")
        index[i] = folder
        counts.add(n)
    if len(counts) > 1:
        raise AggregateError(f"the folders are shards of different splits (n = {', '.join(map(str, sorted(counts)))})")
    missing = [f"{i}/{n}" for i in range(n) if i not in index]
    if missing:
        raise AggregateError(f"missing shard(s) {', '.join(missing)}: merge every shard's folder, or the merged "
                             f"run would count {len(index)} of {n} shards")


def _shard_file(read, path: Path, **kwargs):
    """``read(path, **kwargs)``, a damaged file an AggregateError naming it (and the line)."""
    try:
        return read(path, **kwargs)
    except DamagedFileError as err:
        raise AggregateError(str(err)) from None


def _json_lines(path: Path, key: str) -> list[dict]:
    """A finished shard's lines, each a JSON object with ``key``; a damaged one is named."""
    return _shard_file(read_complete_lines, path, cut=False, key=key)


def read_shard(folder: Path) -> tuple[dict, list[dict], list[dict]]:
    """A finished shard's metrics, and the question rows and memory builds it counts (``_shard_config``
    checked the folder finished)."""
    metrics = _shard_file(read_json_object, folder / "metrics.json")
    if type(metrics.get("n_questions")) is not int:   # the count the rows are checked against
        raise AggregateError(f"{folder / 'metrics.json'}: no whole number 'n_questions'")
    blocks = [k for k in LLM_BLOCKS if k in metrics]
    if blocks and blocks != list(LLM_BLOCKS):
        raise AggregateError(f"{folder / 'metrics.json'}: {blocks[0]!r} but no "
                             f"{next(k for k in LLM_BLOCKS if k not in blocks)!r} (a task=qa run writes both)")
    if (wrong := next((k for k in blocks if not isinstance(metrics[k], dict)), None)) is not None:
        raise AggregateError(f"{folder / 'metrics.json'}: {wrong!r} is not a JSON object")
    rows = counted(metrics, _json_lines(folder / "predictions.jsonl", "question_id"))
    if len(rows) != metrics["n_questions"]:
        raise AggregateError(f"{folder}: predictions.jsonl has {len(rows)} rows of counted samples, metrics.json "
                             f"counts {metrics['n_questions']}")
    return metrics, rows, counted(metrics, _json_lines(folder / "samples.jsonl", "sample_id"))


def aggregate(shards: list[Path], out: Path) -> dict:
    """Merge ``shards`` into ``out``; returns the merged metrics."""
    if not shards:
        raise AggregateError("no shard folders given")
    _check_out(out)
    configs = [_shard_config(folder) for folder in shards]
    first_cfg = configs[0][0]
    base = _compared(first_cfg)
    for folder, (cfg, _) in zip(shards, configs, strict=True):
        if changed := differences(base, _compared(cfg)):
            may_differ = ", ".join(dict.fromkeys((*PER_SHARD, *RESULT_NEUTRAL)))
            raise AggregateError(f"{folder}: its config.yaml differs from {shards[0]}'s: {shown_changes(changed)}. "
                                 f"Only {may_differ} may differ between shards")
    _check_every_shard(shards, [shard for _, shard in configs])
    parts = [read_shard(folder) for folder in shards]
    rows = [r for _, shard_rows, _ in parts for r in shard_rows]
    seen = Counter(r["question_id"] for r in rows)
    twice = [q for q, c in seen.items() if c > 1]
    if twice:
        raise AggregateError(f"question {twice[0]!r} is in more than one shard: the shards overlap")
    first = parts[0][0]
    # the same computation as a single run's metrics.json, over every shard's rows and builds
    # the shards' common commit; None when they ran on different code (each shard's metrics.json says which)
    commits = {metrics.get("commit") for metrics, _, _ in parts}
    metrics = summarise_run(first_cfg, rows, [b for _, _, builds in parts for b in builds], None, None,
                            commits.pop() if len(commits) == 1 else None)
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
