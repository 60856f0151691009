"""experiments/report.py on small synthetic run folders: the paper's tables as Markdown and PNG."""
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from magma_torch.testing import experiment_script

ROOT = Path(__file__).resolve().parents[1]
REPORT = ROOT / "experiments" / "report.py"
LOCOMO = ("single-hop", "multi-hop", "temporal", "open-domain", "adversarial")


# retrieval time per question as metrics.json names it now, and as runs written before did
TIMING = {"retrieval_ms_per_question_batch_mean": 4.0}
OLD_TIMING = {"retrieval_ms_p50": 3.0, "retrieval_ms_p95": 9.0}


def block(r10, r2k, n=10, timing=None, **extra):
    return {"n": n, "recall_all@10": r10, "recall_all@2000tok": r2k, "context_tokens_mean": 1500.0,
            **(timing or OLD_TIMING), "f1": None, "judge": None, **extra}


def make_run(root: Path, name: str, dataset: str, memory: str, score: float, cats=LOCOMO, qa=False,
             timing=None, **cfg):
    folder = root / name
    folder.mkdir(parents=True)
    by_cat = {c: block(None, None, timing=timing) if c == "adversarial"
              else block(score - i / 100, score, timing=timing, f1=score if qa else None) for i, c in enumerate(cats)}
    metrics = {"dataset": dataset, "memory": memory, "n_questions": 10 * len(cats),
               "overall": block(score, min(score + 0.1, 1.0), timing=timing, f1=score / 2 if qa else None),
               "by_category": by_cat,
               "build": {"events": 100, "entities": 5, "edges": {"temporal": 99}, "fast_path_s": 2.5,
                         "consolidation_s": 0.5, "llm_calls": 0, "llm_tokens": 0}}
    if qa:
        metrics["answering"] = {"per_question": {"calls": 1.0, "prompt_tokens": 900.0, "completion_tokens": 12.0}}
    (folder / "metrics.json").write_text(json.dumps(metrics))
    (folder / "config.yaml").write_text(yaml.safe_dump({"task": {"name": "qa" if qa else "retrieval"},
                                                         "memory": {"name": memory, **cfg}, "out_dir": "x"}))
    return folder


def report(*args):
    return subprocess.run([sys.executable, str(REPORT), *map(str, args)], capture_output=True, text=True, timeout=300)


@pytest.fixture
def sweeps(tmp_path):
    t1, t4, lme = tmp_path / "table1", tmp_path / "table4", tmp_path / "lme"
    for i, (memory, score) in enumerate([("magma", 0.7), ("bm25", 0.5), ("hybrid_rag", 0.6)]):
        make_run(t1, f"{i}_locomo_{memory}", "locomo", memory, score)
    for i, (memory, score) in enumerate([("magma", 0.7), ("magma_no_causal", 0.65), ("magma_no_temporal", 0.4)]):
        make_run(t4, f"{i}_locomo_{memory}", "locomo", memory, score)
    for i, (memory, score) in enumerate([("magma", 0.8), ("vector_rag", 0.55)]):
        make_run(lme, f"{i}_{memory}", "longmemeval_s", memory, score, timing=TIMING,
                 cats=("single-session-user", "temporal-reasoning", "knowledge-update"))
    return tmp_path


def test_tables_and_charts(sweeps, tmp_path):
    out = tmp_path / "out"
    proc = report(sweeps / "table1", sweeps / "table4", sweeps / "lme", "--out", out)
    assert proc.returncode == 0, proc.stderr
    for name in ("table1", "table2", "table3", "table4"):
        assert (out / f"{name}.md").is_file()
        png = (out / f"{name}.png").read_bytes()
        assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 5000
    t1 = (out / "table1.md").read_text()
    rows = [line for line in t1.splitlines() if line.startswith("| ") and "---" not in line][1:]
    assert [r.split("|")[1].strip() for r in rows] == ["magma", "hybrid_rag", "bm25"]   # best first
    assert "magma_no_causal" not in t1                      # ablations go to Table 4 only
    assert "| magma | 0.700 / 0.800 | 0.700 / 0.700 | 0.690 / 0.700 |" in t1
    assert "adversarial" not in t1                          # no recall on adversarial: no column
    t2 = (out / "table2.md").read_text()
    assert "temporal-reasoning (n=10)" in t2 and "| vector_rag |" in t2 and "bm25" not in t2
    t3 = (out / "table3.md").read_text()
    assert "| locomo | magma | 50 | 2.5 + 0.5 | 0 | 1500 | – | 3.0 |" in t3            # an older run: its p50
    assert "| longmemeval_s | magma | 30 | 2.5 + 0.5 | 0 | 1500 | – | 4.0 |" in t3
    t4 = (out / "table4.md").read_text()
    rows = [line.split("|")[1].strip() for line in t4.splitlines() if line.startswith("| magma")]
    assert rows[:3] == ["magma", "magma_no_causal", "magma_no_temporal"]   # the paper's order
    assert "| magma_no_temporal | -0.300 / -0.300 |" in t4
    assert "longmemeval" not in t4                          # no ablations were run there


def test_qa_runs_report_the_qa_metric_and_reader_tokens(tmp_path):
    make_run(tmp_path / "qa", "0", "locomo", "magma", 0.6, qa=True)
    proc = report(tmp_path / "qa", "--out", tmp_path / "out")
    assert proc.returncode == 0, proc.stderr
    assert "cells: f1" in (tmp_path / "out" / "table1.md").read_text()
    assert "| 912 |" in (tmp_path / "out" / "table3.md").read_text()
    assert not (tmp_path / "out" / "table4.md").exists()


def test_same_run_twice_counts_once_but_two_different_runs_are_refused(sweeps, tmp_path):
    proc = report(sweeps / "table1", sweeps / "table4", "--out", tmp_path / "a")   # magma in both grids
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "a" / "table1.md").read_text().count("| magma |") == 1
    make_run(tmp_path / "other", "0", "locomo", "magma", 0.9, beam={"gamma": 0.9})
    proc = report(sweeps / "table1", tmp_path / "other", "--out", tmp_path / "b")
    assert proc.returncode == 2 and proc.stderr.startswith("report: error:")
    assert "two different magma runs on locomo" in proc.stderr and str(tmp_path / "other" / "0") in proc.stderr


def test_a_damaged_metrics_json_is_named_in_one_line(sweeps, tmp_path):
    (sweeps / "table1" / "0_locomo_magma" / "metrics.json").write_text('{"dataset": "locomo", ')
    proc = report(sweeps / "table1", "--out", tmp_path / "out")
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1
    assert proc.stderr.startswith(f"report: error: {sweeps / 'table1' / '0_locomo_magma' / 'metrics.json'}: not JSON")


def test_folder_without_runs_is_one_line(tmp_path):
    (tmp_path / "empty").mkdir()
    proc = report(tmp_path / "empty", "--out", tmp_path / "out")
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1
    assert "no finished run" in proc.stderr


def test_first_difference_of_two_rankings(tmp_path):
    fd = experiment_script(REPORT.parent / "first_difference.py")
    assert fd.first_difference(["a", "b", "c"], ["a", "b", "c"]) is None
    assert fd.first_difference(["a", "b", "c"], ["a", "x", "c"]) == 1
    assert fd.first_difference(["a", "b"], ["a", "b", "c"]) == 2
    for name, lists in (("base", [["a", "b", "c"], ["d", "e"]]), ("other", [["a", "b", "c"], ["d", "f"]])):
        (tmp_path / name).mkdir()
        (tmp_path / name / "predictions.jsonl").write_text("".join(
            json.dumps({"question_id": f"q{i}", "retrieved_sources": s, "context_sources": s[:1]}) + "\n"
            for i, s in enumerate(lists)))
    c = fd.compare(tmp_path / "base", tmp_path / "other")
    assert (c["questions"], c["identical"], c["first_diff_min"], c["base_context_turns_median"]) == (2, 1, 1, 1)


def test_recall_table_reads_the_committed_runs_into_the_readmes_table():
    """The metrics.json files the README cites (written before the retrieval time was renamed) still
    give the README's LoCoMo table, row for row."""
    proc = subprocess.run([sys.executable, str(ROOT / "experiments" / "recall_table.py"),
                           str(ROOT / "experiments" / "results" / "locomo_dev")], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    table = [line for line in proc.stdout.splitlines() if line.startswith("| ")]
    assert len(table) == 17 and table[0].endswith("| retrieval ms / question |")
    assert all(line in (ROOT / "README.md").read_text().splitlines() for line in table)


def test_runs_of_one_memory_on_other_questions_are_refused_not_dropped(tmp_path):
    # before: the dataset block was not compared, so the second run (70 questions against 24) vanished
    for name, limit in (("a", 1), ("b", None)):
        folder = make_run(tmp_path / name, "0", "demo", "bm25", 0.5)
        cfg = yaml.safe_load((folder / "config.yaml").read_text())
        cfg["dataset"] = {"name": "demo", "path": None, "limit": limit}
        (folder / "config.yaml").write_text(yaml.safe_dump(cfg))
    proc = report(tmp_path / "a", tmp_path / "b", "--out", tmp_path / "out")
    assert proc.returncode == 2 and "two different bm25 runs on demo" in proc.stderr


def test_recall_table_names_a_bad_folder_in_one_line_and_dashes_a_missing_figure(tmp_path):
    script = ROOT / "experiments" / "recall_table.py"
    proc = subprocess.run([sys.executable, str(script), str(tmp_path / "nope")], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 2 and proc.stderr.strip() == f"recall_table: error: {tmp_path / 'nope'}: not a folder"
    folder = make_run(tmp_path / "runs", "0", "locomo", "magma", 0.5)
    metrics = json.loads((folder / "metrics.json").read_text())
    del metrics["overall"]["recall_all@10"]                     # a run with task.recall_k=[5]: a KeyError before
    (folder / "metrics.json").write_text(json.dumps(metrics))
    proc = subprocess.run([sys.executable, str(script), str(tmp_path / "runs")], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "| magma | – / 0.600 |" in proc.stdout
