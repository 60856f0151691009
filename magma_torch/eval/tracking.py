"""Experiment tracking of a run (``logger=`` group): none, or Weights & Biases.

wandb is imported here only, when ``logger=wandb`` is chosen (extra ``wandb``). Without
WANDB_API_KEY the run is logged offline into ``<out_dir>/wandb/`` (``wandb sync`` uploads it).
"""
from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from magma_torch.errors import MagmaError

log = logging.getLogger(__name__)


WANDB_MODES = ("auto", "online", "offline")   # logger.mode of conf/logger/wandb.yaml


class TrackerError(MagmaError, RuntimeError):
    """The tracker could not start or log; the run is not presented as finished."""


def check_logger(cfg: DictConfig | None) -> None:
    """The tracker's settings that W&B would refuse only as it starts, checked before any work."""
    if cfg is not None and cfg.get("name") == "wandb" and cfg.get("mode") not in WANDB_MODES:
        raise TrackerError(f"logger.mode={cfg.get('mode')} is not a W&B mode; options: {', '.join(WANDB_MODES)}")


class NullTracker:
    def log_run(self, metrics: dict, rows: list[dict], plots: list[Path]) -> None:
        pass

    def close(self, ok: bool) -> None:
        pass


def flatten(d: dict, prefix: str = "") -> dict:
    """{"a": {"b": 1}} -> {"a/b": 1}: W&B summary keys, one per metric."""
    out = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(flatten(v, f"{key}/"))
        else:
            out[key] = v
    return out


def _one_line(e: Exception) -> str:
    return f"{type(e).__name__}: " + " ".join(str(e).split())


def _cell(v):
    # W&B table columns hold one type; lists (sources, evidence) are shown as text.
    return ", ".join(map(str, v)) if isinstance(v, list) else v


class WandbTracker:
    def __init__(self, cfg: DictConfig, run_cfg: DictConfig, out_dir: Path):
        try:
            import wandb
        except ImportError as e:
            raise TrackerError("logger=wandb needs the wandb package: pip install 'magma-torch[wandb]'") from e
        self.wandb = wandb
        mode = cfg.mode
        if mode == "auto":
            mode = "online" if os.environ.get("WANDB_API_KEY") else "offline"
            if mode == "offline":
                print(f"magma-run: W&B: no WANDB_API_KEY, logging offline to {out_dir}/wandb "
                      "(upload later with `wandb sync`)", file=sys.stderr)
        try:
            self.run = wandb.init(project=cfg.project, entity=cfg.entity, group=cfg.group, tags=list(cfg.tags),
                                  name=cfg.run_name or out_dir.name, dir=str(out_dir), mode=mode,
                                  config=OmegaConf.to_container(run_cfg, resolve=True, throw_on_missing=False),
                                  settings=wandb.Settings(silent=True))
        except Exception as e:  # wandb raises many kinds (network, auth, usage); all end the run the same way
            raise TrackerError(f"W&B could not start ({mode}): {_one_line(e)}") from e

    def log_run(self, metrics: dict, rows: list[dict], plots: list[Path]) -> None:
        wandb = self.wandb
        try:
            scalars = {k: v for k, v in flatten(metrics).items() if v is None or isinstance(v, (int, float))}
            self.run.summary.update(scalars)
            columns = list(dict.fromkeys(k for r in rows for k in r))
            table = wandb.Table(columns=columns, data=[[_cell(r.get(c)) for c in columns] for r in rows],
                                allow_mixed_types=True)
            self.run.log({"predictions": table, **{f"plots/{p.stem}": wandb.Image(str(p)) for p in plots}})
        except Exception as e:
            raise TrackerError(f"W&B logging failed: {_one_line(e)}") from e

    def close(self, ok: bool) -> None:
        try:
            self.run.finish(exit_code=0 if ok else 1)
        except Exception as e:
            if ok:
                raise TrackerError(f"W&B could not finish the run: {_one_line(e)}") from e
            log.warning("W&B could not finish a failed run: %s", e)


def build_tracker(cfg: DictConfig | None, run_cfg: DictConfig, out_dir: Path) -> NullTracker | WandbTracker:
    name = None if cfg is None else cfg.name
    if name in (None, "none"):
        return NullTracker()
    if name == "wandb":
        return WandbTracker(cfg, run_cfg, out_dir)
    raise TrackerError(f"unknown logger {name!r}; options: none, wandb")
