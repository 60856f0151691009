"""Start-up validation of magma-run's command-line overrides, before any work is done.

Every override is checked against the composed config tree (conf/): a group's value must be
one of its YAML options (``task=qaa``), a setting must exist (``memory.retrieval.beam.gama``)
and its new value must have the type of the value it replaces (a number stays a number, a
flag a boolean, a list a list). Sweeps (``memory=magma,bm25``, ``range(...)``) are checked
value by value and every combination of group choices is composed; an optimiser's
``interval(a,b)`` by its bounds. So is the sweeper's search space that an experiment sets
(``hydra.sweeper.params`` of e.g. ``+experiment=tune_traversal``). The first problem is raised
as one line.
"""
from __future__ import annotations

import dataclasses
import itertools
import json
from collections.abc import Sequence

from hydra import compose
from hydra._internal.utils import get_args_parser
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override, OverrideType
from hydra.errors import HydraException
from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from magma_torch.config import conf_root, group_options
from magma_torch.config.groups import packaged_hydra
from magma_torch.config.schema import MemoryConfig, problems
from magma_torch.errors import MagmaError


class OverrideError(MagmaError, ValueError):
    """A command-line override names an unknown group, option or setting, or has the wrong type."""


def _values(o: Override) -> list:
    if not o.is_sweep_override():
        return [o.value()]
    if o.is_interval_sweep():  # an optimiser's range (Optuna): its bounds have the type of what it suggests
        return [o.value().start, o.value().end]
    return list(o.sweep_iterator())


def _groups() -> set[str]:
    return {p.name for p in conf_root().iterdir() if p.is_dir() and group_options(p.name)}


def _type_problem(default, value) -> str | None:
    """Why ``value`` cannot replace ``default``, or None when it can."""
    if isinstance(value, str) and value.startswith("${"):
        return None  # an interpolation: resolved later
    if default is None or isinstance(default, str) and default.startswith("${"):
        return None
    if isinstance(default, bool):
        return None if isinstance(value, bool) else "expects true or false"
    if isinstance(default, int):
        return None if isinstance(value, int) and not isinstance(value, bool) else "expects an integer"
    if isinstance(default, float):
        return None if isinstance(value, (int, float)) and not isinstance(value, bool) else "expects a number"
    if isinstance(default, str):
        return None if isinstance(value, (str, int, float)) else "expects a string"
    if isinstance(default, ListConfig):
        return None if isinstance(value, list) else "expects a list"
    if isinstance(default, DictConfig):
        return None if isinstance(value, dict) else "expects a mapping {...}"
    return None


def _takes_null(node) -> bool:
    """A schema field declared Optional (or Any), whose values include null
    (``memory.retrieval.question_adapter=null``); a plain YAML setting keeps the type of its value."""
    parent = node._get_parent()
    return node._is_optional() and parent is not None and dataclasses.is_dataclass(OmegaConf.get_type(parent))


def _check_setting(cfg: DictConfig, o: Override, variant: str) -> None:
    parts = o.key_or_group.split(".")
    node = cfg
    for i, part in enumerate(parts):
        if not isinstance(node, DictConfig) or part not in node.keys():
            where = ".".join(parts[:i]) or "the config"
            keys = ", ".join(map(str, node.keys())) if isinstance(node, DictConfig) else "none"
            hint = " (add a new one with +key=value)" if i else f" (groups: {', '.join(sorted(_groups()))})"
            raise OverrideError(f"unknown setting {o.key_or_group!r} in override {o.input_line!r}{variant}: "
                                f"{where} has no {part!r}; it has: {keys}{hint}")
        node = node._get_node(part)
    # The raw value: '???' and interpolations are not resolved (and accept any value).
    default = node if isinstance(node, (DictConfig, ListConfig)) else node._value()
    if default == "???":
        default = None
    for value in _values(o):
        problem = None if value is None and _takes_null(node) else _type_problem(default, value)
        if problem:
            shown = (json.dumps(OmegaConf.to_container(default)) if isinstance(default, (DictConfig, ListConfig))
                     else repr(default))
            raise OverrideError(f"override {o.input_line!r}: {o.key_or_group} {problem} (default {shown}), "
                                f"got {value!r}")
        if parts[0] == "memory" and not (isinstance(value, str) and value.startswith("${")):
            # the schema's range too, value by value (an interval by its bounds): a sweep ran its
            # first jobs before the job of an out-of-range value refused it
            for part in reversed(parts[1:]):
                value = {part: value}
            if (problem := next(problems(MemoryConfig, value, "memory"), None)) is not None:
                raise OverrideError(f"override {o.input_line!r}: {problem}")


def _search_space(cfg: DictConfig, groups: set[str], cli: Sequence[Override]) -> tuple[list[list[str]], list[Override]]:
    """The sweeper's ``hydra.sweeper.params`` of a composed config (an experiment's grid or
    Optuna search space) that the command line does not override, as group choices (one list
    per group) and settings."""
    params = OmegaConf.select(cfg, "hydra.sweeper.params")
    if not params:
        return [], []
    given = {o.key_or_group for o in cli}
    lines = [f"{k}={v}" for k, v in params.items() if k not in given]
    try:
        parsed = OverridesParser.create().parse_overrides(lines)
    except HydraException as e:
        raise OverrideError(f"hydra.sweeper.params: {str(e).strip().splitlines()[0]}") from None
    choices, settings = [], []
    for o in parsed:
        if o.key_or_group in groups:
            choices.append([f"{o.key_or_group}={v}" for v in _check_choice(o)])
        else:
            settings.append(o)
    return choices, settings


def _check_choice(o: Override) -> list:
    options = group_options(o.key_or_group)
    values = _values(o)
    for value in values:
        if value not in options:
            raise OverrideError(f"unknown {o.key_or_group} {value!r} in override {o.input_line!r}; "
                                f"options: {', '.join(options)}")
    return values


def check_overrides(argv: Sequence[str]) -> None:
    """Raise OverrideError for the first bad override of a magma-run command line, or of the
    sweeper's search space (``hydra.sweeper.params``) it composes."""
    args = get_args_parser().parse_args(list(argv))
    if args.config_name or args.config_path or args.config_dir:
        return  # another primary config: Hydra checks it against that one
    try:
        overrides = OverridesParser.create().parse_overrides(args.overrides)
    except HydraException as e:
        raise OverrideError(str(e).strip().splitlines()[0]) from None
    overrides = [o for o in overrides if not o.key_or_group.startswith("hydra")]  # Hydra's own settings
    groups = _groups()
    choices, rest = [], []
    for o in overrides:
        if o.key_or_group in groups and not o.is_delete():
            choices.append([f"{'+' if o.is_add() else ''}{o.key_or_group}={v}" for v in _check_choice(o)])
        else:
            rest.append(o)
    # '+key' and '~key' are applied by Hydra itself; their problems come back as its message
    passed = [o.input_line for o in rest if o.type in (OverrideType.ADD, OverrideType.DEL, OverrideType.FORCE_ADD)
              and not o.is_sweep_override()]
    settings = [o for o in rest if o.type == OverrideType.CHANGE]
    with packaged_hydra():
        for combo in itertools.product(*choices):
            cfg = _compose([*combo, *passed], hydra=True)
            variant = f" (with {' '.join(combo)})" if len(choices) and any(len(c) > 1 for c in choices) else ""
            for o in settings:
                _check_setting(cfg, o, variant)
            # The sweeper's search space (an experiment's hydra.sweeper.params), less what the command line sets
            space_choices, space_settings = _search_space(cfg, groups, overrides)
            for sub in itertools.product(*space_choices):
                point = _compose([*combo, *sub, *passed]) if sub else cfg
                where = " ".join(combo + sub)
                for o in space_settings:
                    _check_setting(point, o, f" (hydra.sweeper.params{' with ' + where if where else ''})")


def _compose(overrides: list[str], hydra: bool = False) -> DictConfig:
    try:
        return compose("config", overrides=overrides, return_hydra_config=hydra)
    except (HydraException, OmegaConfBaseException) as e:
        raise OverrideError(f"{' '.join(overrides)}: {str(e).strip().splitlines()[0]}") from None
