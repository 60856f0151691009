"""The packaged Hydra config tree (the repository's ``conf/``), composed by Hydra.

Importing this module registers the schema (``schema.py``) in Hydra's ConfigStore, so every
``conf/memory`` and ``conf/consolidation`` YAML is composed against its dataclass (each lists
its schema first in its defaults).
"""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from importlib.resources import files
from importlib.resources.abc import Traversable

from hydra import compose, initialize_config_module
from hydra.core.config_store import ConfigStore
from hydra.core.global_hydra import GlobalHydra
from hydra.core.singleton import Singleton
from hydra.core.utils import JobRuntime
from hydra.version import VersionBase
from omegaconf import DictConfig

from magma_torch.config.schema import SCHEMAS, ConfigError

CONFIG_MODULE = "magma_torch.conf"
# The process-wide singletons that initialising Hydra sets: the instance compose() reads, the job's
# name and the version base.
HYDRA_GLOBALS = (GlobalHydra, JobRuntime, VersionBase)

for (_group, _name), _node in SCHEMAS.items():
    ConfigStore.instance().store(group=_group, name=_name, node=_node)


def conf_root() -> Traversable:
    return files(CONFIG_MODULE)


def group_options(group: str) -> list[str]:
    """The option names of a config group (its YAML files), [] for an unknown group."""
    folder = conf_root() / group
    return sorted(p.name[:-5] for p in folder.iterdir() if p.name.endswith(".yaml")) if folder.is_dir() else []


def load_group(group: str, name: str) -> DictConfig:
    """One option of a config group composed by Hydra (defaults lists and schema included),
    e.g. ``load_group("memory", "hybrid_rag")``; always from the packaged tree, whatever Hydra the
    caller has running."""
    if not (conf_root() / group / f"{name}.yaml").is_file():
        raise ConfigError(f"unknown {group} config {name!r}; options: {group_options(group)}")
    with packaged_hydra():
        return compose("config", overrides=[f"{group}={name}"])[group]


@contextmanager
def packaged_hydra() -> Iterator[None]:
    """Hydra initialised on the packaged tree alone. A caller's own Hydra (an app's @hydra.main, an
    initialize_config_dir) is set aside meanwhile, so neither its search path nor a group of its own
    of the same name is composed from, and is put back as it was."""
    outer = {s: Singleton._instances.pop(s) for s in HYDRA_GLOBALS if s in Singleton._instances}
    try:
        with initialize_config_module(CONFIG_MODULE, version_base=None):
            yield
    finally:
        for s in HYDRA_GLOBALS:
            Singleton._instances.pop(s, None)
        Singleton._instances.update(outer)
