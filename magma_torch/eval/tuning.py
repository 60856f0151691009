"""Hydra callback of the Optuna tuning experiment (conf/experiment/tune_traversal.yaml)."""
from __future__ import annotations

from pathlib import Path

from hydra.experimental.callback import Callback
from omegaconf import DictConfig


class SweepFolder(Callback):
    """Creates ``hydra.sweep.dir`` when a multirun starts. The Optuna sweeper opens its study
    (``hydra.sweeper.storage``, an SQLite file in that folder) before the launcher creates the
    folder for the first batch of trials, and SQLite creates no folders."""

    def on_multirun_start(self, config: DictConfig, **kwargs) -> None:
        Path(config.hydra.sweep.dir).mkdir(parents=True, exist_ok=True)
