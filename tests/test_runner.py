"""magma-run end to end on the demo dataset: the run-folder contract of DESIGN.md 3.2."""
import json
import subprocess
import sys

import numpy as np
import pytest
from omegaconf import OmegaConf

from magma_torch.provenance import code_commit
from magma_torch.store.graph import RELATIONS
from magma_torch.testing import assert_no_run

RUN = [sys.executable, "-m", "magma_torch.eval.cli"]
OVERALL_KEYS = {"recall_all@5", "recall_all@10", "recall_any@10", "recall_all@1000tok", "recall_all@2000tok",
                "context_tokens_mean", "retrieval_ms_per_question_batch_mean", "retrieval_ms_p50",
                "retrieval_ms_p95", "f1", "bleu1", "judge"}
ROW_KEYS = {"sample_id", "question_id", "category", "question", "gold", "evidence", "retrieved_sources",
            "context_sources", "context_tokens", "intent", "retrieval_ms"}


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("run")
    proc = subprocess.run(RUN + ["dataset=demo", "memory=magma", f"out_dir={out}", "progress=false"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "| overall |" in proc.stdout
    return out


def test_metrics_json_follows_the_contract(run_dir):
    m = json.loads((run_dir / "metrics.json").read_text())
    assert m["dataset"] == "demo" and m["memory"] == "magma" and m["n_questions"] == 70
    assert m["commit"] == code_commit()     # the code the figures came from (None outside a checkout)
    assert OVERALL_KEYS <= set(m["overall"])
    assert set(m["by_category"]) == {"single-hop", "multi-hop", "temporal", "open-domain", "adversarial"}
    assert m["overall"]["f1"] is None and m["overall"]["judge"] is None
    assert 0.0 <= m["overall"]["recall_all@10"] <= m["overall"]["recall_any@10"] <= 1.0
    assert m["overall"]["recall_all@1000tok"] <= m["overall"]["recall_all@2000tok"]
    assert m["by_category"]["adversarial"]["recall_all@10"] is None      # no recall on adversarial
    b = m["build"]
    assert b["events"] == 205 and b["entities"] > 0
    assert set(b["edges"]) == set(RELATIONS)
    assert b["edges"]["temporal"] == 205 - 3 and b["edges"]["entity"] > 0


def test_predictions_have_one_row_per_question(run_dir):
    rows = [json.loads(line) for line in (run_dir / "predictions.jsonl").read_text().splitlines()]
    assert len(rows) == 70
    for r in rows:
        assert ROW_KEYS <= set(r)
        assert r["intent"] in {"WHY", "WHEN", "ENTITY"}
        assert set(r["context_sources"]) <= set(r["retrieved_sources"])
        assert len(r["retrieved_sources"]) == len(set(r["retrieved_sources"]))
    assert (run_dir / "config.yaml").is_file()
    png = (run_dir / "recall_by_category.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 5000


def test_retrieval_time_is_named_for_what_it_is(run_dir):
    """Each row holds its conversation's batch time shared by the batch's questions, so metrics.json
    reports their mean; the contract's percentiles are over those shares."""
    rows = [json.loads(line) for line in (run_dir / "predictions.jsonl").read_text().splitlines()]
    overall = json.loads((run_dir / "metrics.json").read_text())["overall"]
    counted = [r["retrieval_ms"] for r in rows if r["category"] != "adversarial"]
    assert overall["retrieval_ms_per_question_batch_mean"] == pytest.approx(sum(counted) / len(counted))
    assert overall["retrieval_ms_p50"] == pytest.approx(float(np.percentile(counted, 50)))
    assert overall["retrieval_ms_p95"] == pytest.approx(float(np.percentile(counted, 95)))
    per_sample = {}
    for r in rows:
        per_sample.setdefault(r["sample_id"], set()).add(r["retrieval_ms"])
    assert all(len(ms) == 1 for ms in per_sample.values()), "one batch per conversation, one share per batch"


def test_hydra_files_and_the_log_go_into_out_dir(run_dir):
    assert (run_dir / ".hydra" / "config.yaml").is_file() and (run_dir / ".hydra" / "overrides.yaml").is_file()
    assert [p.name for p in run_dir.glob("*.log")] == ["runner.log"]
    # conf/config.yaml keeps third-party loggers at WARNING (bm25s sets DEBUG on import)
    assert "[bm25s][DEBUG]" not in (run_dir / "runner.log").read_text()


def test_bad_dataset_path_is_one_line_and_nonzero(tmp_path):
    out = tmp_path / "run"
    proc = subprocess.run(RUN + ["dataset=locomo", f"dataset.path={tmp_path}/missing.json", f"out_dir={out}"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1].startswith("magma-run: error:")
    assert "missing.json" in proc.stderr and "Traceback" not in proc.stderr
    assert not (out / "metrics.json").exists()


def refused_before_any_work(tmp_path, override: str, named: str) -> None:
    """magma-run with ``override`` ends in one line naming ``named``, exit 2, with no run folder."""
    out = tmp_path / "run"
    proc = subprocess.run(RUN + ["task=retrieval", "dataset=demo", override, f"out_dir={out}", "progress=false"],
                          capture_output=True, text=True)
    assert proc.returncode == 2
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("magma-run: error: ") and named in lines[0], lines
    assert_no_run(out)


@pytest.mark.parametrize("override, named", [
    ("+memory.retrieval.intent_weights.WHY.foo=1.0",
     "memory.retrieval.intent_weights.WHY.foo: Key 'foo' not in 'RelationWeights'"),
    ("+memory.retrieval.signal_weights.vectr=1.0", "memory.retrieval.signal_weights.vectr: Key 'vectr' not in 'SignalWeights'"),
    ("+memory.fast_path.episodes.max_gap=3", "memory.fast_path.episodes.max_gap: Key 'max_gap' not in 'EpisodeConfig'"),
    ("+memory.fast_path.bogus=1", "memory.fast_path.bogus: Key 'bogus' not in 'FastPathConfig'"),
    ("+consolidation.bogus=1", "consolidation.bogus: Key 'bogus' not in 'HeuristicConsolidationConfig'"),
    ("memory.fast_path.bogus=1", "unknown setting 'memory.fast_path.bogus' in override 'memory.fast_path.bogus=1': "
                                 "memory.fast_path has no 'bogus'"),
    ("memory.fast_path.semantic_k=ten", "memory.fast_path.semantic_k expects an integer (default 10), got 'ten'"),
    ("memory.retrieval.beam.beam_width=-1", "memory.retrieval.beam.beam_width: must be >= 1, got -1"),
    ("consolidation.window=-3", "consolidation.window: must be >= 0, got -3"),
])
def test_a_key_the_schema_lacks_a_wrong_type_or_a_value_out_of_range_fails_in_one_line_before_any_work(
        tmp_path, override, named):
    """Added keys (+key=value) and values out of range compose, but the schema refuses them before the
    dataset is read."""
    refused_before_any_work(tmp_path, override, named)


@pytest.mark.parametrize("override, named", [
    # before: columns recall_all@-1 (every retrieved turn but the last) and recall_all@0 (always 0), exit 0
    ("task.recall_k=[-1,0,5]", "task.recall_k must be a list of whole numbers >= 1 ([] for none), got [-1, 0, 5]"),
    ("task.recall_any_k=[true]", "task.recall_any_k must be a list of whole numbers >= 1 ([] for none), got [True]"),
    ("task.recall_tokens=[1000.5]", "task.recall_tokens must be a list of whole numbers >= 1 ([] for none), "
                                    "got [1000.5]"),
    # before: refused only after every memory was built and every question retrieved
    ("objective=recall_all@3000tok", "objective=recall_all@3000tok is not a metric of this run"),
    # before: refused after the whole run (LoCoMo's schema, the demo's too, names no evidence sessions)
    ("objective=session_recall_all@10", "objective=session_recall_all@10 is not a metric of this run"),
    # before: every trial of a sweep ran, then Optuna failed on the null ("must be float-castable")
    ("objective=f1", "objective=f1 is null in every run of task=retrieval: name a recall metric"),
])
def test_bad_recall_cut_offs_or_objective_fail_in_one_line_before_any_work(tmp_path, override, named):
    refused_before_any_work(tmp_path, override, named)


def test_a_file_for_the_demo_fails_in_one_line_before_any_work(tmp_path):
    """Before: dataset.path was ignored and the bundled demo ran."""
    refused_before_any_work(tmp_path, "dataset.path=/data/locomo10.json", "dataset.path=/data/locomo10.json: "
                            "dataset=demo is the bundled demo and reads no file; add the file's dataset=...")


def test_a_run_without_recall_at_k_cut_offs_is_summarised():
    # before: IndexError in recall_keys (no session column to look for), after the whole run
    from magma_torch.eval.runner import summarise_run

    task = {"name": "retrieval", "recall_k": [], "recall_any_k": [], "recall_tokens": [1000]}
    cfg = OmegaConf.create({"task": task, "dataset": {"name": "demo"}, "memory": {"name": "magma"}})
    rows = [{"question_id": "s0/q0", "category": "temporal", "context_tokens": 10, "retrieval_ms": 1.0,
             "recall_all@1000tok": 1.0}]
    build = {"sample_id": "s0", "events": 1, "entities": 0, "fast_path_s": 0.0, "consolidation_s": 0.0,
             "edges": {}, "llm_calls": 0, "llm_prompt_tokens": 0, "llm_completion_tokens": 0}
    overall = summarise_run(cfg, rows, [build], None, None, None)["overall"]
    assert overall["recall_all@1000tok"] == 1.0 and overall["n_recall"] == 1
    assert [k for k in overall if k.startswith(("recall_", "session_"))] == ["recall_all@1000tok"]


def test_help_lists_only_magma_runs_own_groups():
    from magma_torch.eval.cli import RUN_GROUPS

    proc = subprocess.run(RUN + ["--help"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    section = proc.stdout.split("== Config groups (group=option) ==\n", 1)[1].split("\n\n", 1)[0]
    listed = {line.split(":")[0]: line.split(": ", 1)[1] for line in section.splitlines() if not line.startswith(" ")}
    assert list(listed) == list(RUN_GROUPS)       # conf/bench and conf/intent belong to other tools
    assert "magma, " in listed["memory"] and listed["task"] == "qa, retrieval"


def test_the_runs_seed_seeds_the_global_generators(tmp_path, monkeypatch):
    # `seed` was accepted, recorded and compared on resume, but nothing read it
    import random

    import torch
    from hydra import compose, initialize_config_module

    from magma_torch.eval import runner

    draws = {}
    monkeypatch.setattr(runner, "code_commit", lambda: draws.update(
        py=random.random(), np=np.random.random(), torch=torch.rand(1).item(), initial=torch.initial_seed()))
    with initialize_config_module("magma_torch.conf", version_base=None):
        cfg = compose("config", overrides=["dataset=demo", "dataset.limit=1", "memory=bm25", "progress=false",
                                           "seed=7", f"out_dir={tmp_path}"])
    runner.run(cfg, tmp_path)
    random.seed(7)
    np.random.seed(7)
    torch.manual_seed(7)
    assert draws == {"py": random.random(), "np": np.random.random(), "torch": torch.rand(1).item(), "initial": 7}
