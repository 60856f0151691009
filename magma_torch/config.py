"""Access to the packaged Hydra config tree (the repository's ``conf/``)."""
from __future__ import annotations

from importlib.resources import files
from importlib.resources.abc import Traversable

from hydra import compose, initialize_config_module
from hydra.core.global_hydra import GlobalHydra
from omegaconf import DictConfig

CONFIG_MODULE = "magma_torch.conf"


def conf_root() -> Traversable:
    return files(CONFIG_MODULE)


def load_group(group: str, name: str) -> DictConfig:
    """One option of a config group composed by Hydra (defaults lists included),
    e.g. ``load_group("memory", "hybrid_rag")``."""
    if not (conf_root() / group / f"{name}.yaml").is_file():
        options = sorted(p.name[:-5] for p in (conf_root() / group).iterdir() if p.name.endswith(".yaml"))
        raise ValueError(f"unknown {group} config {name!r}; options: {options}")
    if GlobalHydra.instance().is_initialized():
        return compose("config", overrides=[f"{group}={name}"])[group]
    with initialize_config_module(CONFIG_MODULE, version_base=None):
        return compose("config", overrides=[f"{group}={name}"])[group]
