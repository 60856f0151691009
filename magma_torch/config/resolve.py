"""What ``MagmaMemory(config=..., consolidation=...)`` accepts, turned into typed, checked configs.

A memory config may be a ``MemoryConfig``, a partial mapping or DictConfig (merged onto the
defaults), a name under ``conf/memory`` (composed by Hydra), or None (the defaults; no Hydra).
Each becomes a DictConfig with the schema's types; an unknown key, a wrong type or a value its
field does not allow (schema.setting) raises ``ConfigError`` in one line naming the full key.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from magma_torch.config.schema import (ConfigError, ConsolidationConfig, HeuristicConsolidationConfig,
                                       LLMConsolidationConfig, MemoryConfig, SCHEMAS, check,
                                       section_problems)

CONSOLIDATORS = {c._target_: c for c in (HeuristicConsolidationConfig, LLMConsolidationConfig)}
# What the slow-path worker reads of a consolidation config (the window shown, the caps written).
WORKER_KEYS = ("window", "max_causal_per_event", "max_entities_per_event", "max_supersedes_per_event")


def memory_config(cfg) -> DictConfig:
    """A typed memory config from what ``MagmaMemory(config=...)`` accepts."""
    if isinstance(cfg, str):
        from magma_torch.config.groups import load_group   # lazy: Hydra, for group names only

        cfg = load_group("memory", cfg)
    return typed(MemoryConfig, cfg, "memory")


def consolidation_config(cfg) -> DictConfig | None:
    """A typed consolidation config, or None for no consolidation (``"none"``, or an empty mapping
    as a save records it). A mapping without ``_target_`` is merged onto the heuristic's defaults;
    one whose ``_target_`` is a consolidator of your own is kept as given (its class checks it;
    ``worker_settings`` checks the window and caps the worker reads of it)."""
    if cfg is None:
        return typed(HeuristicConsolidationConfig, None, "consolidation")
    if isinstance(cfg, str):
        from magma_torch.config.groups import load_group

        cfg = load_group("consolidation", cfg)
    if isinstance(cfg, ConsolidationConfig):
        return typed(type(cfg), cfg, "consolidation")
    plain = _plain(cfg)
    if not plain:
        return None
    target = plain.get("_target_", HeuristicConsolidationConfig._target_)
    if target not in CONSOLIDATORS:
        return OmegaConf.create(plain)
    return typed(CONSOLIDATORS[target], plain, "consolidation")


def worker_settings(cfg: DictConfig | None) -> HeuristicConsolidationConfig | LLMConsolidationConfig:
    """What the slow-path worker shows a consolidator and caps its proposals at. A consolidator of
    your own gets the heuristic's window and caps, less those its config sets."""
    if cfg is None:
        return HeuristicConsolidationConfig()
    if dataclasses.is_dataclass(OmegaConf.get_type(cfg)):
        return settings(cfg)
    return settings(typed(HeuristicConsolidationConfig, {k: cfg[k] for k in WORKER_KEYS if k in cfg}, "consolidation"))


def typed(schema: type, cfg, where: str) -> DictConfig:
    """``cfg`` (None, a dataclass instance, a mapping or DictConfig) merged onto ``schema``'s defaults."""
    if cfg is None or isinstance(cfg, schema):
        return _merged(schema if cfg is None else cfg, {}, where)
    if dataclasses.is_dataclass(cfg):
        raise ConfigError(f"{where}: expected a {schema.__name__}, got a {type(cfg).__name__}")
    return _merged(schema, _plain(cfg), where)


def settings(cfg: DictConfig):
    """The dataclass instance a typed config stands for (what the runtime reads)."""
    return OmegaConf.to_object(cfg)


def saved_memory_config(config: Mapping) -> DictConfig:
    """A memory config as a save recorded it: settings added to the toolkit since then get their
    defaults, and settings it no longer has are dropped."""
    return _merged(MemoryConfig, _known(_plain(config), OmegaConf.structured(MemoryConfig)), "memory")


def yaml_option(folder: Path, name: str) -> DictConfig:
    """``folder/<name>.yaml`` (an option of ``conf/memory`` or ``conf/consolidation``) composed
    without Hydra, for tools that run where Hydra is not installed (experiments/gpu_bench.py). Its
    defaults list names its schema and other options of the folder, with ``_self_`` last, as
    every file there does; anything else raises ConfigError."""
    raw = OmegaConf.load(folder / f"{name}.yaml")
    defaults = list(raw.pop("defaults", ["_self_"]))
    if defaults[-1:] != ["_self_"] or not all(isinstance(d, str) for d in defaults):
        raise ConfigError(f"{folder / name}.yaml: composing it needs Hydra "
                          "(its defaults list is not 'options, _self_')")
    schema = {n: s for (group, n), s in SCHEMAS.items() if group == folder.name}
    cfg = None
    for d in defaults[:-1]:
        part = _merged(schema[d], {}, folder.name) if d in schema else yaml_option(folder, d)
        cfg = part if cfg is None else _merged(cfg, part, folder.name)
    return raw if cfg is None else _merged(cfg, raw, folder.name)


def _known(values: dict, schema: DictConfig) -> dict:
    """``values`` without the keys ``schema`` does not have, at every depth."""
    return {k: _known(v, schema[k]) if isinstance(v, dict) and isinstance(schema[k], DictConfig) else v
            for k, v in values.items() if k in schema}


def _plain(cfg) -> dict:
    if isinstance(cfg, DictConfig):
        return OmegaConf.to_container(cfg, resolve=True)   # interpolations (e.g. ${llm}) resolved in place
    if not isinstance(cfg, Mapping):
        raise ConfigError(f"expected a config mapping, a dataclass or a config name, got {type(cfg).__name__}")
    return dict(cfg)


def _merged(base, values: dict | DictConfig, where: str) -> DictConfig:
    """``values`` merged onto ``base`` (a schema class or instance, or a DictConfig of one), every
    value checked against what its field allows."""
    schema = (OmegaConf.get_type(base) if isinstance(base, DictConfig)
              else base if isinstance(base, type) else type(base))
    if (problem := next(section_problems(schema, values, where), None)) is not None:
        raise ConfigError(problem)
    try:
        merged = OmegaConf.merge(base if isinstance(base, DictConfig) else OmegaConf.structured(base), values)
        check(OmegaConf.get_type(merged), merged, where)
    except OmegaConfBaseException as err:
        raise ConfigError(one_line(err, where)) from None
    return merged


def one_line(err: OmegaConfBaseException, where: str) -> str:
    """OmegaConf's structured-config error as one line that starts with the full key."""
    key = getattr(err, "full_key", None)
    msg = str(getattr(err, "msg", None) or err).strip().splitlines()[0]
    return f"{where}.{key}: {msg}" if key else f"{where}: {msg}"
