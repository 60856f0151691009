"""Start-up validation of magma-run overrides: a typo fails in one line before any work."""
from __future__ import annotations

import subprocess
import sys

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra

from magma_torch.eval.cli import with_run_dir
from magma_torch.eval.overrides import OverrideError, check_overrides


@pytest.mark.parametrize("argv, message", [
    (["task=qaa"], r"unknown task 'qaa' in override 'task=qaa'; options: qa, retrieval"),
    (["-m", "memory=magma,bm5"], r"unknown memory 'bm5' .*options: .*bm25"),
    (["memory.retrieval.beam.gama=0.1"], r"memory\.retrieval\.beam has no 'gama'; it has: .*gamma"),
    (["tsk=qa"], r"unknown setting 'tsk'.*the config has no 'tsk'.*groups: .*task"),
    (["memory.retrieval.beam.gamma=abc"], r"memory\.retrieval\.beam\.gamma expects a number \(default 0\.3\), got 'abc'"),
    (["memory.retrieval.beam.max_depth=2.5"], r"max_depth expects an integer"),
    (["progress=yes"], r"progress expects true or false"),
    (["memory.retrieval.signal_top_k=3"], r"signal_top_k expects a mapping"),
    (["-m", "memory.retrieval.beam.gamma=0.1,x"], r"expects a number .* got 'x'"),
    (["+seed=3"], r"\+seed=3: Could not append to config"),
    (["task=retrieval,"], r"^mismatched input '<EOF>' expecting \{"),   # unparsable sweep: hydra's parser error
    (["memory.retrieval.beam.gamma=null"], r"memory\.retrieval\.beam\.gamma expects a number"),  # not Optional
    (["progress=null"], r"progress expects true or false"),           # outside the schema null stays refused
    # a setting's range, for each value of a sweep and the bounds of an optimiser's interval
    (["-m", "memory.retrieval.beam.beam_width=5,-1"], r"memory\.retrieval\.beam\.beam_width: must be >= 1, got -1"),
    (["-m", "memory.retrieval.beam.gamma=interval(0.5,3.0)"], r"beam\.gamma: must be between 0 and 1, got 3\.0"),
    (["memory.retrieval.intent_weights.WHY.causal=nan"], r"intent_weights\.WHY\.causal: must be a finite number"),
])
def test_bad_overrides_fail(argv, message):
    with pytest.raises(OverrideError, match=message) as err:
        check_overrides(argv)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("argv", [
    [],
    ["dataset=locomo", "dataset.path=/data/locomo10.json", "dataset.limit=2"],
    ["-m", "memory=magma,bm25", "memory.retrieval.beam.gamma=0.1,0.5", "memory.retrieval.beam.max_depth=range(2,4)"],
    ["memory.retrieval.intent_weights.WHY.causal=5", "progress=false", "out_dir=/tmp/somewhere"],
    ["+dataset.note=hello", "logger=wandb", "logger.tags=[a,b]", "hydra/launcher=basic"],
    # null where the schema declares it (README: "study with memory.retrieval.question_adapter=null",
    # "consolidation.supersession ... null turns it off")
    ["memory.retrieval.question_adapter=null", "consolidation.supersession=null", "memory.retrieval.budget_tokens=null"],
])
def test_good_overrides_pass(argv):
    check_overrides(argv)


def test_checking_overrides_leaves_the_callers_hydra_as_it_was(tmp_path):
    (tmp_path / "config.yaml").write_text("lr: 0.1\n")
    with initialize_config_dir(str(tmp_path), version_base=None, job_name="my_app"):
        check_overrides(["memory=hybrid_rag"])
        assert compose("config").lr == 0.1
    assert not GlobalHydra.instance().is_initialized()


def test_magma_run_rejects_a_typo_before_any_work(tmp_path):
    out = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-m", "magma_torch.eval.cli", "memory.retrieval.beam.gama=0.1",
                           f"out_dir={out}"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines() == [proc.stderr.strip()]           # one line
    assert proc.stderr.startswith("magma-run: error: unknown setting 'memory.retrieval.beam.gama'")
    assert not out.exists()


@pytest.mark.parametrize("argv, expected", [
    (["memory=magma", "out_dir=runs/a"], ["memory=magma", "out_dir=runs/a", "hydra.run.dir=runs/a"]),
    # beside out_dir, so the overrides stay one run of arguments around Hydra's flags
    (["out_dir=runs/a", "memory=magma", "--cfg", "job"],
     ["out_dir=runs/a", "hydra.run.dir=runs/a", "memory=magma", "--cfg", "job"]),
    (["--cfg", "job", "out_dir=runs/a"], ["--cfg", "job", "out_dir=runs/a", "hydra.run.dir=runs/a"]),
    (["out_dir=runs/a", "hydra.run.dir=elsewhere"], ["out_dir=runs/a", "hydra.run.dir=elsewhere"]),
    (["memory=magma"], ["memory=magma"]),
])
def test_the_run_dir_follows_out_dir(argv, expected):
    assert with_run_dir(argv) == expected


def test_a_config_with_out_dir_prints(tmp_path):
    out = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-m", "magma_torch.eval.cli", "memory=magma", f"out_dir={out}",
                           "--cfg", "job"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert f"out_dir: {out}" in proc.stdout and not out.exists()
