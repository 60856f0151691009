"""magma-run's console entry: the command line, then the composed config, are checked before
the run's own imports (torch, PyG, the text stack: several seconds), so a bad setting fails in
one line at once; eval/runner.py then runs the experiment."""
from __future__ import annotations

import importlib
import sys
from typing import NoReturn

import hydra
from hydra_plugins.magma_torch_slurm import register as register_slurm_launcher
from omegaconf import DictConfig, OmegaConf

from magma_torch.config import group_options
from magma_torch.config.resolve import ConfigError, consolidation_config, memory_config
from magma_torch.errors import MagmaError
from magma_torch.eval.datasets import check_limit, check_sample_ids
from magma_torch.eval.overrides import OverrideError, check_overrides
from magma_torch.eval.tracking import check_logger
from magma_torch.llm.answer_format import check_date_style
from magma_torch.llm.prompts import check_answer_prompt

# The config groups magma-run composes (conf/ also holds magma-bench's and the intent trainer's),
# each with what it chooses; `magma-run --help` lists these (conf/config.yaml, hydra.help).
RUN_GROUPS = {"task": "what is measured", "dataset": "the conversations and questions",
              "memory": "the memory and its retrieval, baselines and ablations included",
              "consolidation": "the slow path that adds causal and entity links",
              "llm": "the reader for task=qa, and the LLM of consolidation=llm", "judge": "the LLM judge of task=qa",
              "logger": "experiment tracking", "+experiment": "grids and studies (multirun)",
              "hydra/launcher": "where sweep jobs run; Hydra's default, basic, runs them in this process"}


def groups_help() -> str:
    return "\n".join(f"{g}: {', '.join(group_options(g.lstrip('+')))}\n    {what}" for g, what in RUN_GROUPS.items())


OmegaConf.register_new_resolver("magma_run_groups", groups_help, replace=True)
register_slurm_launcher()   # hydra/launcher=slurm, slurm_local
# Imported before Hydra sets up logging (the run's own imports come after it): importing bm25s sets
# its logger to DEBUG, which would undo the WARNING level conf/config.yaml gives it. About 0.3 s.
importlib.import_module("bm25s")


def consolidates_with_reader(cfg: DictConfig) -> bool:
    """consolidation=llm with no `llm` of its own (null): it consolidates with the `llm` group's LLM."""
    c = cfg.consolidation
    return c is not None and "llm" in c.keys() and c.llm is None


def builds_llm(node) -> bool:
    """Whether an ``llm`` or ``judge`` node names a backend: llm=none is null, judge=none {}."""
    return node is not None and node.get("_target_") is not None


def check_run_config(cfg: DictConfig) -> None:
    """What a run's config must hold beyond its schema, checked before any work (ConfigError,
    DatasetError, UnknownPromptError, UnknownDateStyleError): an llm where the task or the
    consolidation needs one, a known answer prompt and date style, a usable answer chunk, recall
    cut-offs, no dataset.path for the demo, dataset limit and list of sample ids, no key a
    ``+key=value`` override added outside the schema, and a known logger.mode. (The objective is
    checked by the runner, which knows the metric names.)"""
    qa = cfg.task.name == "qa"
    has_llm = builds_llm(cfg.get("llm"))
    for needed, what in ((qa, "task=qa"), (consolidates_with_reader(cfg), "consolidation=llm")):
        if needed and not has_llm:
            raise ConfigError(f"{what} needs an llm: pass llm=<backend> (options: {group_options('llm')})")
    if qa:
        check_answer_prompt(cfg.task.get("answer_prompt"))
        check_date_style(cfg.task.get("answer_dates"))
    if qa and not (isinstance(cfg.task.get("answer_chunk"), int) and cfg.task.answer_chunk >= 1):
        raise ConfigError(f"task.answer_chunk must be a whole number >= 1, got {cfg.task.get('answer_chunk')!r}")
    # k and token budgets below 1 would report meaningless columns (recall_all@-1: all but the last turn)
    for key in ("recall_k", "recall_any_k", "recall_tokens"):
        cuts = cfg.task.get(key)
        if not (OmegaConf.is_list(cuts) and all(type(k) is int and k >= 1 for k in cuts)):
            shown = OmegaConf.to_container(cuts) if OmegaConf.is_list(cuts) else cuts
            raise ConfigError(f"task.{key} must be a list of whole numbers >= 1 ([] for none), got {shown!r}")
    if cfg.dataset.name == "demo" and cfg.dataset.get("path") is not None:
        others = ", ".join(o for o in group_options("dataset") if o != "demo")
        raise ConfigError(f"dataset.path={cfg.dataset.path}: dataset=demo is the bundled demo and reads no file; "
                          f"add the file's dataset=... (options: {others})")
    check_limit(cfg.dataset.get("limit"))   # before the dataset is read
    check_sample_ids(cfg.dataset.get("sample_ids"))
    # Composed against their schema already, but a `+key=value` override adds a key the schema lacks
    memory_config(cfg.memory)
    consolidation_config(cfg.consolidation)
    check_logger(cfg.get("logger"))


def fail(err: MagmaError) -> NoReturn:
    """Bad input, a damaged file, an unusable setting: the user's to fix; one readable line, not a traceback."""
    print(f"magma-run: error: {err}", file=sys.stderr)
    sys.exit(2)


@hydra.main(config_path="pkg://magma_torch.conf", config_name="config", version_base=None)
def hydra_main(cfg: DictConfig) -> float | None:
    """One run; returns its objective (``cfg.objective`` of metrics.json's ``overall`` block),
    the value a Hydra sweeper such as Optuna's optimises."""
    try:
        check_run_config(cfg)
    except MagmaError as err:
        fail(err)
    from magma_torch.eval.runner import run_and_report   # the heavy imports, once the config holds

    return run_and_report(cfg)


def with_run_dir(argv: list[str]) -> list[str]:
    """``argv`` plus ``hydra.run.dir=PATH`` when it sets ``out_dir=PATH`` and no run dir: Hydra's
    own files (.hydra/, the log) then go into the run folder, not a second dated folder. It goes
    right after ``out_dir=``: Hydra's parser takes overrides only as one run of arguments, so one
    added after a flag (``--cfg job``) would be refused."""
    given = {a.lstrip("+").split("=", 1)[0]: i for i, a in enumerate(argv) if "=" in a and not a.startswith("-")}
    if "out_dir" in given and "hydra.run.dir" not in given:
        at = given["out_dir"] + 1
        return [*argv[:at], f"hydra.run.dir={argv[at - 1].split('=', 1)[1]}", *argv[at:]]
    return argv


def main() -> None:
    """Console entry: validate the command-line overrides before Hydra starts any work."""
    try:
        check_overrides(sys.argv[1:])
    except OverrideError as err:
        fail(err)
    sys.argv[1:] = with_run_dir(sys.argv[1:])
    hydra_main()


if __name__ == "__main__":
    main()
