"""A run folder that can be resumed: what is finished is on disk, and only a finished run has metrics.json.

- ``predictions.jsonl``: one line per answered question, flushed per memory (sample), and with
  task=qa per chunk of ``task.answer_chunk`` answered questions;
- ``scores.jsonl``: the same lines without the text of the questions, gold answers and answers
  (``TEXT_FIELDS``): every figure of metrics.json comes from them, and they hold no benchmark text,
  so they can be committed where predictions.jsonl cannot (LoCoMo is CC BY-NC 4.0 and not shipped).
  A folder that has them without its predictions (a fresh clone) resumes from them;
- ``samples.jsonl``: one line per finished memory with its build counters, written after
  that memory's predictions, so a memory listed here has all its questions above;
- ``metrics.json``: written atomically, last. Its presence is what marks a run finished;
  it is removed when a run (re)starts in the folder;
- ``.lock``: locked by the run writing the folder, so a second run there is refused.

Reopening a folder keeps every complete line (a line torn by a kill is dropped), so a
rerun redoes nothing that finished and counts nothing twice.
"""
from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from magma_torch.config.resolve import consolidation_config, saved_memory_config
from magma_torch.errors import MagmaError
from magma_torch.files import append_synced, cut_torn_line, lock_exclusively, read_complete_lines, write_atomic

# Settings that do not change a run's results: they may differ between a run and its resumption, and
# between the shards magma-aggregate merges.
RESULT_NEUTRAL = ("out_dir", "progress", "logger", "objective", "task.answer_chunk", "consolidation.cache")
# ... and dataset.limit, which a resumption may change to go on with more samples
RESUMABLE_CHANGES = (*RESULT_NEUTRAL, "dataset.limit")
SHOWN_CHANGES = 3    # differing settings a refusal names
# A question line's text: the dataset's question and gold answer, and the reader's answer (which quotes it).
TEXT_FIELDS = ("question", "gold", "prediction", "reader_text")
_UNSET = object()
LOCK = ".lock"       # held by the one run writing the folder: two would interleave their lines


class RunFolderError(MagmaError, ValueError):
    """The folder holds a run that cannot be continued with this configuration."""


def _resolved(cfg: DictConfig, folder: Path) -> dict:
    """``cfg`` with every interpolation resolved and out_dir set to ``folder``, the run folder: the
    default out_dir, ``${hydra:runtime.output_dir}``, resolves only inside a Hydra app."""
    c = OmegaConf.to_container(cfg, resolve=False)
    c["out_dir"] = str(folder)
    return OmegaConf.to_container(OmegaConf.create(c), resolve=True)


def _comparable(cfg: DictConfig, folder: Path) -> dict:
    c = _resolved(cfg, folder)
    # A folder written by an earlier version: settings added or removed since compare as the schema has them
    if "memory" in c:
        c["memory"] = OmegaConf.to_container(saved_memory_config(c["memory"]))
    if c.get("consolidation"):
        c["consolidation"] = OmegaConf.to_container(consolidation_config(c["consolidation"]))
    return without_settings(c, RESUMABLE_CHANGES)


def without_settings(c: dict, keys: Sequence[str]) -> dict:
    """``c`` (a config as a dict) without the dotted ``keys``, removed in place."""
    for key in keys:
        *parents, leaf = key.split(".")
        node = c
        for p in parents:
            node = node.get(p) if isinstance(node, dict) else None
        if isinstance(node, dict):
            node.pop(leaf, None)
    return c


def shown_changes(changed: list[str]) -> str:
    """The first ``SHOWN_CHANGES`` of ``differences``' lines, and how many more there are."""
    more = f" (and {len(changed) - SHOWN_CHANGES} more)" if len(changed) > SHOWN_CHANGES else ""
    return "; ".join(changed[:SHOWN_CHANGES]) + more


def differences(old: dict, new: dict, prefix: str = "") -> list[str]:
    """``key.path: old -> new`` for every setting that differs, set on one side only included."""
    out = []
    for key in sorted(old.keys() | new.keys(), key=str):
        a, b = old.get(key, _UNSET), new.get(key, _UNSET)
        if isinstance(a, dict) and isinstance(b, dict):
            out += differences(a, b, f"{prefix}{key}.")
        elif a != b:
            out.append(f"{prefix}{key}: {_shown(a)} -> {_shown(b)}")
    return out


def _shown(value) -> str:
    return "(not set)" if value is _UNSET else repr(value)


def counted(metrics: dict, lines: list[dict]) -> list[dict]:
    """The question or build lines of a finished folder that its metrics.json counts: those of its
    ``sample_ids`` (all of them in a folder written before metrics.json listed its samples)."""
    if "sample_ids" not in metrics:
        return lines
    ids = set(metrics["sample_ids"])
    return [line for line in lines if line["sample_id"] in ids]


def without_text(row: dict) -> dict:
    """A question line as scores.jsonl keeps it: ``row`` without its ``TEXT_FIELDS``."""
    return {k: v for k, v in row.items() if k not in TEXT_FIELDS}


class RunFolder:
    def __init__(self, path: Path):
        self.path = Path(path)
        self.predictions_path = self.path / "predictions.jsonl"
        self.samples_path = self.path / "samples.jsonl"
        self.scores_path = self.path / "scores.jsonl"
        self.metrics_path = self.path / "metrics.json"
        self.rows: list[dict] = []
        self.builds: dict[str, dict] = {}

    def open(self, cfg: DictConfig) -> None:
        """Create or reopen the folder for ``cfg`` and lock it for this run, until ``close``; loads what
        a previous attempt finished. Another run writing the folder, a damaged line or another
        configuration fails before anything in the folder changes (but for its lock file)."""
        self.path.mkdir(parents=True, exist_ok=True)
        self._lock = lock_exclusively(self.path / LOCK)
        if self._lock is None:
            raise RunFolderError(f"{self.path} is being written by another run (it holds {self.path / LOCK}): "
                                 "wait for that run to end, or choose another out_dir")
        try:
            self._load(cfg)
        except BaseException:
            self.close()
            raise

    def _load(self, cfg: DictConfig) -> None:
        builds = read_complete_lines(self.samples_path, cut=False, key="sample_id")
        rows = read_complete_lines(self.predictions_path, cut=False, key="question_id")
        scores = read_complete_lines(self.scores_path, cut=False, key="question_id")
        config_path = self.path / "config.yaml"
        # A folder where nothing finished (an attempt that failed on its first sample) takes any configuration
        if config_path.exists() and (builds or rows or scores):
            # both resolved: a folder written before config.yaml was saved resolved compares equal too
            changed = differences(_comparable(OmegaConf.load(config_path), self.path), _comparable(cfg, self.path))
            if changed:
                raise RunFolderError(
                    f"{self.path} holds a run with another configuration: {shown_changes(changed)}. "
                    f"Only {', '.join(RESUMABLE_CHANGES)} may change between attempts: resume with the folder's "
                    "settings (its config.yaml) or choose a new out_dir")
        write_atomic(config_path, OmegaConf.to_yaml(_resolved(cfg, self.path)))
        for path in (self.samples_path, self.predictions_path, self.scores_path):
            cut_torn_line(path)
        self.builds = {b["sample_id"]: b for b in builds}
        rows = {r["question_id"]: r for r in rows}
        scores = {r["question_id"]: r for r in scores}
        self._pred = self.predictions_path.open("a")
        self._scores = self.scores_path.open("a")
        self._samples = self.samples_path.open("a")
        # Each file gets the lines only the other holds: scores of a folder written before scores.jsonl
        # existed, and text-free lines for the questions a fresh clone has only as scores.
        append_synced(self._scores, [without_text(r) for q, r in rows.items() if q not in scores])
        append_synced(self._pred, [r for q, r in scores.items() if q not in rows])
        self.rows = list({**scores, **rows}.values())

    def start(self) -> None:
        """The run begins: the folder reads as unfinished (no metrics.json) until ``finish``. Apart from
        ``open``, so that a run whose tracker fails to start leaves a finished folder finished."""
        self.metrics_path.unlink(missing_ok=True)

    @property
    def done_questions(self) -> set[str]:
        return {r["question_id"] for r in self.rows}

    def append(self, rows: list[dict], build: dict | None = None) -> None:
        """Record new predictions of one memory, then, with ``build``, the memory itself as finished."""
        append_synced(self._pred, rows)
        append_synced(self._scores, [without_text(r) for r in rows])
        self.rows.extend(rows)
        if build is None:
            return
        append_synced(self._samples, [build])
        self.builds[build["sample_id"]] = build

    def close(self) -> None:
        for f in (getattr(self, name, None) for name in ("_pred", "_scores", "_samples", "_lock")):
            if f is not None:
                f.close()

    def finish(self, metrics: dict) -> None:
        """Mark the run finished: metrics.json appears whole or not at all."""
        write_atomic(self.metrics_path, json.dumps(metrics, indent=2))
