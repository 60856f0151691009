"""Tuning with Hydra's Optuna sweeper (+experiment=tune_traversal): the study maximises what each
magma-run returns, its metrics.json recall_all@2000tok, and is kept in the sweep folder."""
import json
import subprocess
import sys

import pytest
from hydra import compose, initialize_config_module
from omegaconf import OmegaConf, open_dict

import magma_torch.eval.overrides as overrides_module
from magma_torch.eval.overrides import OverrideError, check_overrides
from magma_torch.testing import with_package

pytestmark = with_package("optuna", "hydra_plugins.hydra_optuna_sweeper", extra="tune")

RUN = [sys.executable, "-m", "magma_torch.eval.cli"]
TUNE = ["+experiment=tune_traversal", "dataset=demo", "dataset.limit=1"]


def tuning_config(*extra: str):
    with initialize_config_module("magma_torch.conf", version_base=None):
        return compose("config", overrides=["+experiment=tune_traversal", *extra], return_hydra_config=True)


def test_search_space_names_existing_settings_and_composes_with_the_slurm_launcher():
    cfg = tuning_config("hydra/launcher=slurm_local")
    sweeper = cfg.hydra.sweeper
    assert sweeper._target_.endswith("OptunaSweeper") and sweeper.direction == "maximize"
    assert cfg.hydra.launcher._target_ == "hydra_plugins.magma_torch_slurm._launcher.SlurmLauncher"
    assert cfg.hydra.launcher.partition == "debug"
    assert OmegaConf.to_container(sweeper, resolve=False)["storage"] == "sqlite:///${hydra.sweep.dir}/optuna.db"
    assert cfg.task.name == "retrieval" and cfg.consolidation._target_.endswith("HeuristicConsolidator")
    keys = set(sweeper.params)
    assert {"memory.retrieval.beam.lambda1", "memory.retrieval.beam.lambda2", "memory.retrieval.beam.gamma",
            "memory.retrieval.anchor_k", "memory.retrieval.context.hops",
            "memory.retrieval.intent_weights.WHY.causal", "memory.retrieval.signal_weights.time",
            "memory.fast_path.episodes.max_gap_hours", "memory.retrieval.signal_weights.episode",
            "memory.retrieval.intent_weights.ENTITY.episode"} <= keys
    for key in keys:
        assert OmegaConf.select(cfg, key) is not None, key
    check_overrides(["+experiment=tune_traversal", "hydra/launcher=slurm_local", "dataset=demo"])


def test_unknown_key_in_the_search_space_fails_in_one_line(monkeypatch):
    # on the command line (the Optuna sweeper reads search-space overrides from there too)
    proc = subprocess.run(RUN + TUNE + ["memory.retrieval.beam.gama=interval(0.1,1.0)"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "'memory.retrieval.beam.gama'" in proc.stderr
    # in an experiment's hydra.sweeper.params
    compose = overrides_module.compose

    def with_a_typo(*args, **kwargs):
        cfg = compose(*args, **kwargs)
        if kwargs.get("return_hydra_config"):
            with open_dict(cfg.hydra.sweeper.params):
                cfg.hydra.sweeper.params["memory.retrieval.beam.lamda2"] = "interval(0.1, 1.0)"
        return cfg

    monkeypatch.setattr(overrides_module, "compose", with_a_typo)
    with pytest.raises(OverrideError) as err:
        check_overrides(["+experiment=tune_traversal", "dataset=demo"])
    assert "\n" not in str(err.value)
    assert "'memory.retrieval.beam.lamda2'" in str(err.value) and "hydra.sweeper.params" in str(err.value)


def test_search_space_syntax_passes_the_override_check():
    check_overrides(["-m", "memory.retrieval.beam.gamma=interval(0.1,1.0)",
                     "memory.retrieval.anchor_k=int(interval(10,100))", "memory.retrieval.context.hops=range(1,3)",
                     "memory.retrieval.beam.lambda2=choice(0.3,0.5,0.7)"])
    with pytest.raises(OverrideError, match="expects an integer"):   # Optuna would suggest floats
        check_overrides(["-m", "memory.retrieval.anchor_k=interval(10,100)"])


def test_three_trial_study_records_each_runs_recall(tmp_path):
    sweep = tmp_path / "sweep"
    proc = subprocess.run(RUN + TUNE + ["progress=false", "hydra.sweeper.n_trials=3", "hydra.sweeper.n_jobs=2",
                                        f"hydra.sweep.dir={sweep}"], capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    import optuna

    study = optuna.load_study(study_name="tune_traversal", storage=f"sqlite:///{sweep}/optuna.db")
    trials = study.trials
    assert len(trials) == 3 and all(t.state == optuna.trial.TrialState.COMPLETE for t in trials)
    assert study.direction == optuna.study.StudyDirection.MAXIMIZE
    for t in trials:
        run = sweep / f"{t.number}_demo_magma"
        metrics = json.loads((run / "metrics.json").read_text())
        assert metrics["n_questions"] > 0
        assert t.value == metrics["overall"]["recall_all@2000tok"]
        # the trial's sampled parameters are the ones its run folder was configured with
        run_cfg = OmegaConf.load(run / "config.yaml")
        assert len(t.params) == 33   # every setting of the search space was sampled
        for key, value in t.params.items():
            assert OmegaConf.select(run_cfg, key) == value, (t.number, key)
    best = OmegaConf.load(sweep / "optimization_results.yaml")
    assert best.best_value == max(t.value for t in trials)
