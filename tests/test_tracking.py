"""logger=wandb: an offline run's files hold the config, the metrics, the per-question table and the plot."""
from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from magma_torch.testing import with_package

pytestmark = with_package("wandb", extra="wandb")

FIXTURE = Path(__file__).parent / "data" / "longmemeval_fixture.json"
RUN = [sys.executable, "-m", "magma_torch.eval.cli", "dataset=longmemeval_s", f"dataset.path={FIXTURE}",
       "progress=true", "logger=wandb"]


def wandb_records(path: Path) -> list:
    """The protobuf records of a .wandb file (a LevelDB-style log: 7-byte file header, then 32 KiB
    blocks of chunks with a 7-byte header: crc32, length, type FULL=1 FIRST=2 MIDDLE=3 LAST=4)."""
    from wandb.proto import wandb_internal_pb2   # lazy: without wandb the module still collects

    data, block, pos, buf, out = path.read_bytes(), 32768, 7, b"", []
    assert data[:4] == b":W&B"
    while pos + 7 <= len(data):
        if block - pos % block < 7:                      # too little room for a header: block padding
            pos += block - pos % block
            continue
        _, n, kind = struct.unpack("<IHB", data[pos:pos + 7])
        if kind == 0:
            break
        buf += data[pos + 7:pos + 7 + n]
        pos += 7 + n
        if kind in (1, 4):
            rec = wandb_internal_pb2.Record()
            rec.ParseFromString(buf)
            out.append(rec)
            buf = b""
    return out


def clean_env() -> dict:
    return {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}


@pytest.fixture(scope="module")
def offline_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("wandb")
    proc = subprocess.run(RUN + [f"out_dir={out}", "logger.tags=[fixture]"], capture_output=True, text=True,
                          timeout=600, env=clean_env())
    assert proc.returncode == 0, proc.stderr[-2000:]
    return out, proc.stderr


def test_offline_mode_is_announced_once_and_progress_is_shown(offline_run):
    out, err = offline_run
    # a streamed dataset has no known length: the bar counts memories
    assert f"memories: {len(json.loads(FIXTURE.read_text()))}memory" in err
    said = [line for line in err.splitlines() if "no WANDB_API_KEY" in line]
    assert said == [f"magma-run: W&B: no WANDB_API_KEY, logging offline to {out}/wandb (upload later with `wandb sync`)"]


def test_offline_run_files_hold_config_metrics_table_and_plot(offline_run):
    out, _ = offline_run
    (run_dir,) = (out / "wandb").glob("offline-run-*")
    (log,) = run_dir.glob("run-*.wandb")
    records = wandb_records(log)
    by_kind = {}
    for r in records:
        by_kind.setdefault(r.WhichOneof("record_type"), []).append(r)
    run = by_kind["run"][0].run
    config = {i.key: json.loads(i.value_json) for i in run.config.update}
    assert config["dataset"]["name"] == "longmemeval_s" and config["memory"]["name"] == "magma"
    assert run.project == "magma-torch" and list(run.tags) == ["fixture"] and run.display_name == out.name
    summary = {}
    for r in by_kind["summary"]:
        summary.update({i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in r.summary.update})
    metrics = json.loads((out / "metrics.json").read_text())
    assert summary["overall/recall_all@10"] == metrics["overall"]["recall_all@10"]
    assert summary["by_category/temporal-reasoning/session_recall_all@5"] == \
        metrics["by_category"]["temporal-reasoning"]["session_recall_all@5"]
    assert summary["build/events"] == metrics["build"]["events"] and summary["abstention/n"] == 1
    assert by_kind["exit"][0].exit.exit_code == 0

    (table,) = (run_dir / "files" / "media" / "table").glob("predictions_*.table.json")
    t = json.loads(table.read_text())
    rows = [json.loads(x) for x in (out / "predictions.jsonl").read_text().splitlines()]
    qid = t["columns"].index("question_id")
    assert [r[qid] for r in t["data"]] == [r["question_id"] for r in rows]
    (png,) = (run_dir / "files" / "media" / "images" / "plots").glob("recall_by_category_*.png")
    assert png.read_bytes() == (out / "recall_by_category.png").read_bytes()


def test_wandb_failure_is_one_line_and_no_finished_folder(tmp_path):
    out = tmp_path / "run"
    env = clean_env() | {"WANDB_API_KEY": "0" * 40, "WANDB_BASE_URL": "http://127.0.0.1:9",  # nothing listens there
                         "WANDB_INIT_TIMEOUT": "5"}
    proc = subprocess.run(RUN + ["dataset.limit=1", f"out_dir={out}"], capture_output=True, text=True,
                          timeout=600, env=env)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines()[-1].startswith("magma-run: error: W&B could not start (online)")
    assert not (out / "metrics.json").exists()


def test_a_tracker_that_cannot_start_leaves_a_finished_folder_finished(tmp_path):
    """Before: a typo in logger.mode, or W&B failing to start, removed metrics.json of the finished run."""
    out = tmp_path / "run"
    finish = [sys.executable, "-m", "magma_torch.eval.cli", "dataset=demo", "dataset.limit=1", "memory=bm25",
              "progress=false", f"out_dir={out}"]
    assert subprocess.run(finish, capture_output=True, timeout=600).returncode == 0
    finished = (out / "metrics.json").read_bytes()
    env = clean_env() | {"WANDB_API_KEY": "0" * 40, "WANDB_BASE_URL": "http://127.0.0.1:9", "WANDB_INIT_TIMEOUT": "5"}
    for mode, said in (("ofline", "logger.mode=ofline is not a W&B mode; options: auto, online, offline"),
                       ("online", "W&B could not start (online)")):
        proc = subprocess.run(finish + ["logger=wandb", f"logger.mode={mode}"], capture_output=True, text=True,
                              timeout=600, env=env)
        assert proc.returncode == 2
        assert proc.stderr.strip().splitlines()[-1].startswith(f"magma-run: error: {said}"), proc.stderr
        assert (out / "metrics.json").read_bytes() == finished
