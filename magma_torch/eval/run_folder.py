"""A run folder that can be resumed: what is finished is on disk, and only a finished run has metrics.json.

- ``predictions.jsonl``: one line per answered question, flushed per memory (sample), and with
  task=qa per chunk of ``task.answer_chunk`` answered questions;
- ``samples.jsonl``: one line per finished memory with its build counters, written after
  that memory's predictions, so a memory listed here has all its questions above;
- ``metrics.json``: written atomically, last. Its presence is what marks a run finished;
  it is removed when a run (re)starts in the folder.

Reopening a folder keeps every complete line (a line torn by a kill is dropped), so a
rerun redoes nothing that finished and counts nothing twice.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from magma_torch.config.resolve import consolidation_config, saved_memory_config
from magma_torch.errors import MagmaError
from magma_torch.files import write_atomic

# Settings that may change between a run and its resumption: they do not change the results.
RESUMABLE_CHANGES = ("out_dir", "progress", "logger", "dataset.limit", "objective", "task.answer_chunk")
SHOWN_CHANGES = 3    # differing settings a refusal names
_UNSET = object()


class RunFolderError(MagmaError, ValueError):
    """The folder holds a run that cannot be continued with this configuration."""


def _comparable(cfg: DictConfig) -> dict:
    c = OmegaConf.to_container(cfg, resolve=False)
    # A folder written by an earlier version: settings added or removed since compare as the schema has them
    if "memory" in c:
        c["memory"] = OmegaConf.to_container(saved_memory_config(c["memory"]))
    if c.get("consolidation"):
        c["consolidation"] = OmegaConf.to_container(consolidation_config(c["consolidation"]))
    for key in RESUMABLE_CHANGES:
        *parents, leaf = key.split(".")
        node = c
        for p in parents:
            node = node.get(p, {})
        node.pop(leaf, None)
    return c


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


def _complete_lines(path: Path) -> list[dict]:
    """The JSON lines of ``path`` that were written whole; the file is cut back to them."""
    if not path.exists():
        return []
    data = path.read_bytes()
    keep = data[: data.rfind(b"\n") + 1]  # a kill mid-write leaves a last line without its newline
    if len(keep) != len(data):
        path.write_bytes(keep)
    return [json.loads(line) for line in keep.splitlines() if line.strip()]


class RunFolder:
    def __init__(self, path: Path):
        self.path = Path(path)
        self.predictions_path = self.path / "predictions.jsonl"
        self.samples_path = self.path / "samples.jsonl"
        self.metrics_path = self.path / "metrics.json"
        self.rows: list[dict] = []
        self.builds: dict[str, dict] = {}

    def open(self, cfg: DictConfig) -> None:
        """Create or reopen the folder for ``cfg``; loads what a previous attempt finished."""
        self.path.mkdir(parents=True, exist_ok=True)
        config_path = self.path / "config.yaml"
        if config_path.exists() and self.predictions_path.exists():
            changed = differences(_comparable(OmegaConf.load(config_path)), _comparable(cfg))
            if changed:
                more = f" (and {len(changed) - SHOWN_CHANGES} more)" if len(changed) > SHOWN_CHANGES else ""
                raise RunFolderError(
                    f"{self.path} holds a run with another configuration: {'; '.join(changed[:SHOWN_CHANGES])}{more}. "
                    f"Only {', '.join(RESUMABLE_CHANGES)} may change between attempts: resume with the folder's "
                    "settings (its config.yaml) or choose a new out_dir")
        self.metrics_path.unlink(missing_ok=True)
        write_atomic(config_path, OmegaConf.to_yaml(cfg))
        self.builds = {b["sample_id"]: b for b in _complete_lines(self.samples_path)}
        self.rows = list({r["question_id"]: r for r in _complete_lines(self.predictions_path)}.values())
        self._pred = self.predictions_path.open("a")
        self._samples = self.samples_path.open("a")

    @property
    def done_questions(self) -> set[str]:
        return {r["question_id"] for r in self.rows}

    def append(self, rows: list[dict], build: dict | None = None) -> None:
        """Record new predictions of one memory, then, with ``build``, the memory itself as finished."""
        for row in rows:
            self._pred.write(json.dumps(row) + "\n")
        self._sync(self._pred)
        self.rows.extend(rows)
        if build is None:
            return
        self._samples.write(json.dumps(build) + "\n")
        self._sync(self._samples)
        self.builds[build["sample_id"]] = build

    @staticmethod
    def _sync(f) -> None:
        f.flush()
        os.fsync(f.fileno())  # survives a node failure, not just a killed process

    def close(self) -> None:
        for f in (getattr(self, "_pred", None), getattr(self, "_samples", None)):
            if f is not None:
                f.close()

    def finish(self, metrics: dict) -> None:
        """Mark the run finished: metrics.json appears whole or not at all."""
        write_atomic(self.metrics_path, json.dumps(metrics, indent=2))
