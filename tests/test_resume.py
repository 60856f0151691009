"""Resuming a run folder: a SIGTERM'd magma-run continues where it stopped, nothing redone or counted twice."""
from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from magma_torch.eval.run_folder import TEXT_FIELDS, RunFolder, RunFolderError
from magma_torch.files import DamagedFileError

RUN = [sys.executable, "-m", "magma_torch.eval.cli", "dataset=demo", "memory=magma", "progress=false"]
TIMING = {"retrieval_ms_per_question_batch_mean", "retrieval_ms_p50", "retrieval_ms_p95", "fast_path_s", "consolidation_s"}


def without_timings(d):
    if isinstance(d, dict):
        return {k: without_timings(v) for k, v in d.items() if k not in TIMING}
    return d


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def test_sigterm_then_rerun_equals_an_uninterrupted_run(tmp_path):
    whole = tmp_path / "whole"
    done = subprocess.run(RUN + [f"out_dir={whole}"], capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]

    out = tmp_path / "resumed"
    proc = subprocess.Popen(RUN + [f"out_dir={out}"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # Stop it once the first of the three conversations is finished (polling, not timing).
    while not lines(out / "samples.jsonl") and proc.poll() is None:
        time.sleep(0.02)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 128 + signal.SIGTERM, err[-2000:]
    assert "magma-run: stopped by SIGTERM" in err.strip().splitlines()[-1] and "Traceback" not in err
    assert not (out / "metrics.json").exists()                 # not presented as finished
    first = lines(out / "predictions.jsonl")
    assert 0 < len(first) < 70 and len(lines(out / "samples.jsonl")) < 3

    again = subprocess.run(RUN + [f"out_dir={out}"], capture_output=True, text=True, timeout=900)
    assert again.returncode == 0, again.stderr[-2000:]
    final = lines(out / "predictions.jsonl")
    assert final[: len(first)] == first                        # finished questions kept as they were, not redone
    ids = [json.loads(x)["question_id"] for x in final]
    assert len(ids) == len(set(ids)) == 70
    # scores.jsonl: the same questions, in the same order, with the same figures and none of the text
    scores = [json.loads(x) for x in lines(out / "scores.jsonl")]
    assert scores == [{k: v for k, v in json.loads(x).items() if k not in TEXT_FIELDS} for x in final]
    assert sorted(json.loads(x)["sample_id"] for x in lines(out / "samples.jsonl")) == sorted(
        json.loads(x)["sample_id"] for x in lines(whole / "samples.jsonl"))
    a = json.loads((whole / "metrics.json").read_text())
    b = json.loads((out / "metrics.json").read_text())
    assert without_timings(b) == without_timings(a)


CFG = OmegaConf.create({"out_dir": "x", "progress": False, "dataset": {"name": "demo", "limit": None},
                        "memory": {"name": "magma"}})


def test_reopen_drops_a_torn_line_and_the_stale_finish_marker(tmp_path):
    folder = RunFolder(tmp_path)
    folder.open(CFG)
    folder.append([{"question_id": "a/q0"}, {"question_id": "a/q1"}], {"sample_id": "a"})
    folder.close()
    with (tmp_path / "predictions.jsonl").open("a") as f:
        f.write('{"question_id": "b/q0", "trunc')                # killed mid-line
    (tmp_path / "metrics.json").write_text("{}")                 # from an earlier, finished attempt
    again = RunFolder(tmp_path)
    again.open(OmegaConf.merge(CFG, {"progress": True, "dataset": {"limit": 2}}))   # harmless changes
    assert again.done_questions == {"a/q0", "a/q1"} and list(again.builds) == ["a"]
    assert (tmp_path / "predictions.jsonl").read_text().endswith("}\n")
    assert (tmp_path / "metrics.json").exists()     # until the run starts: a tracker may yet fail to
    again.start()
    assert not (tmp_path / "metrics.json").exists()
    again.close()


@pytest.mark.parametrize("damage, message", [
    ("garbage\n", r"predictions\.jsonl line 3: not JSON"),
    ("[1, 2]\n", r"predictions\.jsonl line 3: expected a JSON object, got list"),
    ('{"sample_id": "b"}\n', r"predictions\.jsonl line 3: no 'question_id'"),
    ('{"question_id": ["b/q0"]}\n', r"""predictions\.jsonl line 3: 'question_id' is not a string \(\["b/q0"\]\)"""),
])
def test_a_damaged_line_fails_naming_file_and_line_and_leaves_the_finished_run_as_it_was(tmp_path, damage, message):
    folder = RunFolder(tmp_path)
    folder.open(CFG)
    folder.append([{"question_id": "a/q0"}, {"question_id": "a/q1"}], {"sample_id": "a"})
    folder.close()
    folder.finish({"n_questions": 2})
    with (tmp_path / "predictions.jsonl").open("a") as f:
        f.write(damage)
    (tmp_path / "scores.jsonl").write_text((tmp_path / "scores.jsonl").read_text() + '{"question_id": "b/q0", "tru')
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    with pytest.raises(DamagedFileError, match=message):
        RunFolder(tmp_path).open(CFG)
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before     # metrics.json and the torn line kept


def test_config_yaml_is_resolved_and_resumes_compare_it_resolved(tmp_path, monkeypatch):
    monkeypatch.setenv("MAGMA_TEST_MODELS", "/models")
    # as Hydra composes it: out_dir defaults to Hydra's run dir, other settings interpolate
    cfg = OmegaConf.merge(CFG, {"out_dir": "${hydra:runtime.output_dir}", "reader": "${oc.env:MAGMA_TEST_MODELS}/q.gguf",
                                "cache": "${out_dir}/cache.jsonl"})
    folder = RunFolder(tmp_path)
    folder.open(cfg)
    folder.append([{"question_id": "a/q0"}], {"sample_id": "a"})
    folder.close()
    saved = OmegaConf.load(tmp_path / "config.yaml")
    assert "${" not in (tmp_path / "config.yaml").read_text()
    assert (saved.out_dir, saved.reader, saved.cache) == (str(tmp_path), "/models/q.gguf", f"{tmp_path}/cache.jsonl")
    RunFolder(tmp_path).open(cfg)                                                # the same command again
    RunFolder(tmp_path).open(OmegaConf.merge(cfg, {"out_dir": str(tmp_path)}))   # out_dir given, not defaulted
    (tmp_path / "config.yaml").write_text(OmegaConf.to_yaml(cfg))                # written unresolved, as before
    RunFolder(tmp_path).open(cfg)
    monkeypatch.setenv("MAGMA_TEST_MODELS", "/other")
    with pytest.raises(RunFolderError, match="reader: '/models/q.gguf' -> '/other/q.gguf'"):
        RunFolder(tmp_path).open(cfg)


ROW = {"question_id": "a/q0", "sample_id": "a", "question": "Where did Caroline move from?", "gold": "Sweden",
       "prediction": "Sweden", "reader_text": "sweden", "f1": 1.0, "judge": 1, "answer_prompt_tokens": 1300}


def test_scores_keep_every_figure_and_no_text(tmp_path):
    folder = RunFolder(tmp_path)
    folder.open(CFG)
    folder.append([ROW, {**ROW, "question_id": "a/q1", "f1": 0.5}])
    folder.close()
    scores = [json.loads(x) for x in lines(tmp_path / "scores.jsonl")]
    assert scores == [{"question_id": "a/q0", "sample_id": "a", "f1": 1.0, "judge": 1, "answer_prompt_tokens": 1300},
                      {"question_id": "a/q1", "sample_id": "a", "f1": 0.5, "judge": 1, "answer_prompt_tokens": 1300}]
    assert "Sweden" not in (tmp_path / "scores.jsonl").read_text()


def test_a_clone_without_predictions_resumes_from_its_scores(tmp_path):
    folder = RunFolder(tmp_path)
    folder.open(CFG)
    folder.append([ROW], {"sample_id": "a"})
    folder.append([{**ROW, "question_id": "b/q0", "sample_id": "b"}])
    folder.close()
    (tmp_path / "predictions.jsonl").unlink()                    # git-ignored: not in a clone
    again = RunFolder(tmp_path)
    again.open(CFG)
    assert again.done_questions == {"a/q0", "b/q0"} and list(again.builds) == ["a"]
    assert [r["f1"] for r in again.rows] == [1.0, 1.0] and "question" not in again.rows[0]
    again.append([{**ROW, "question_id": "b/q1", "sample_id": "b"}], {"sample_id": "b"})
    again.close()
    # both files hold every question again: the resumed ones without text, the new one whole
    preds = [json.loads(x) for x in lines(tmp_path / "predictions.jsonl")]
    assert [r["question_id"] for r in preds] == ["a/q0", "b/q0", "b/q1"] and preds[2]["gold"] == "Sweden"
    assert [json.loads(x)["question_id"] for x in lines(tmp_path / "scores.jsonl")] == ["a/q0", "b/q0", "b/q1"]


def test_a_folder_from_before_scores_gets_them_on_reopen(tmp_path):
    (tmp_path / "predictions.jsonl").write_text(json.dumps(ROW) + "\n")
    folder = RunFolder(tmp_path)
    folder.open(CFG)
    folder.close()
    assert [json.loads(x) for x in lines(tmp_path / "scores.jsonl")] == [
        {k: v for k, v in ROW.items() if k not in TEXT_FIELDS}]
    assert lines(tmp_path / "predictions.jsonl") == [json.dumps(ROW)]


def test_reopen_with_another_config_is_refused(tmp_path):
    folder = RunFolder(tmp_path)
    folder.open(CFG)
    folder.append([{"question_id": "a/q0"}], {"sample_id": "a"})
    folder.close()
    before = (tmp_path / "config.yaml").read_text()
    with pytest.raises(RunFolderError, match="holds a run with another configuration: memory.name: 'magma' -> 'bm25'. "
                                             "Only out_dir, progress"):
        RunFolder(tmp_path).open(OmegaConf.merge(CFG, {"memory": {"name": "bm25"}}))
    assert (tmp_path / "config.yaml").read_text() == before
    # every differing setting is named, one set on one side only included; nested keys by their path
    changed = OmegaConf.merge(CFG, {"dataset": {"name": "locomo", "path": "/data/l.json"}, "seed": 1})
    with pytest.raises(RunFolderError) as err:
        RunFolder(tmp_path).open(changed)
    assert "dataset.name: 'demo' -> 'locomo'; dataset.path: (not set) -> '/data/l.json'; seed: (not set) -> 1." \
        in str(err.value)
    assert (tmp_path / "config.yaml").read_text() == before


def test_a_refused_resume_leaves_the_folder_and_its_hydra_files_as_they_were(tmp_path):
    folder = RunFolder(tmp_path)
    folder.open(CFG)
    folder.append([{"question_id": "a/q0"}], {"sample_id": "a"})
    folder.close()
    (tmp_path / ".hydra").mkdir()
    (tmp_path / ".hydra" / "config.yaml").write_text("the first run's composed config\n")
    (tmp_path / "runner.log").write_text("the first run's log\n")
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    proc = subprocess.run(RUN + ["dataset.limit=1", f"out_dir={tmp_path}"], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 2 and "holds a run with another configuration" in proc.stderr, proc.stderr
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == before


def test_a_second_run_in_a_folder_in_use_is_refused_and_changes_nothing(tmp_path):
    first = RunFolder(tmp_path)
    first.open(CFG)
    first.append([{"question_id": "a/q0"}], {"sample_id": "a"})
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    with pytest.raises(RunFolderError, match=f"{tmp_path} is being written by another run"):
        RunFolder(tmp_path).open(OmegaConf.merge(CFG, {"progress": True}))
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before
    first.close()
    again = RunFolder(tmp_path)      # free once the first run has ended
    again.open(CFG)
    assert again.done_questions == {"a/q0"}
    again.close()
