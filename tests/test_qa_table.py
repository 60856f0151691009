"""The paired bootstrap (qa_metrics.paired_bootstrap, eval/compare.py) and experiments/qa_table.py
on small synthetic QA run folders."""
import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from magma_torch.eval.compare import CompareError, paired_difference
from magma_torch.eval.qa_metrics import paired_bootstrap
from magma_torch.testing import experiment_script

QA_TABLE = Path(__file__).resolve().parents[1] / "experiments" / "qa_table.py"
qa_table = experiment_script(QA_TABLE)


def test_identical_or_constantly_shifted_scores_have_a_point_interval():
    a = [0.2, 0.9, 0.4, 0.0]
    assert paired_bootstrap(a, a) == (0.0, 0.0, 0.0)
    diff, low, high = paired_bootstrap([x + 0.1 for x in a], a)
    assert diff == pytest.approx(0.1) and low == pytest.approx(0.1) and high == pytest.approx(0.1)


def test_the_interval_is_seeded_and_matches_the_normal_approximation():
    rng = np.random.default_rng(7)
    b = rng.random(400)
    a = np.clip(b + rng.normal(0.05, 0.2, 400), 0, 1)
    diff, low, high = paired_bootstrap(a, b, resamples=10_000, seed=3)
    assert paired_bootstrap(a, b, resamples=10_000, seed=3) == (diff, low, high)
    assert paired_bootstrap(a, b, resamples=10_000, seed=4) != (diff, low, high)
    half = 1.96 * np.std(a - b, ddof=1) / np.sqrt(400)          # pairing: the spread of the differences
    assert low < diff < high and (high - low) / 2 == pytest.approx(half, rel=0.1)
    # unpaired resampling would be far wider: the pairing is what the interval uses
    assert (high - low) / 2 < 0.5 * 1.96 * np.sqrt((np.var(a) + np.var(b)) / 400)


def test_unequal_lists_are_refused():
    with pytest.raises(ValueError, match="equally long"):
        paired_bootstrap([1.0, 0.0], [1.0])


def make_run(root: Path, memory: str, f1: dict[str, float], questions=None):
    """A finished QA run folder: question ids -> F1 (ids ending in 'adv' are adversarial)."""
    folder = root / memory
    folder.mkdir(parents=True)
    rows = [{"question_id": q, "category": "adversarial" if q.endswith("adv") else "single-hop", "f1": v}
            for q, v in f1.items()]
    (folder / "scores.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    scored = [r["f1"] for r in rows if r["category"] != "adversarial"]
    block = {"per_question": {"prompt_tokens": 1200.0, "completion_tokens": 9.5, "seconds": 21.25}}
    metrics = {"memory": memory, "n_questions": len(rows),
               "overall": {"recall_all@1000tok": 0.8, "f1": sum(scored) / len(scored), "bleu1": 0.25, "judge": 0.5},
               "by_category": {"adversarial": {"f1": 1.0, "judge": 0.5}},
               "answering": {**block, "failed": 1}, "judging": block}
    (folder / "metrics.json").write_text(json.dumps(metrics))
    return folder


def test_the_difference_pairs_questions_by_id_and_leaves_adversarial_out(tmp_path):
    a = make_run(tmp_path, "magma", {"q1": 1.0, "q2": 0.5, "q3": 0.0, "q4adv": 1.0})
    b = make_run(tmp_path, "hybrid_rag", {"q3": 0.0, "q2": 0.25, "q1": 0.5, "q4adv": 0.0})   # other order
    d = paired_difference(a, b, resamples=1000)
    assert d["n"] == 3 and d["difference"] == pytest.approx(0.25)
    assert d["low"] <= d["difference"] <= d["high"] and d["high"] <= 0.5 and d["low"] >= 0.0


def test_runs_over_other_questions_or_unfinished_runs_are_refused(tmp_path):
    a = make_run(tmp_path, "magma", {"q1": 1.0, "q2": 0.5})
    b = make_run(tmp_path, "hybrid_rag", {"q1": 1.0, "q3": 0.5})
    with pytest.raises(CompareError, match="hold different questions"):
        paired_difference(a, b)
    (b / "metrics.json").unlink()
    with pytest.raises(CompareError, match=f"{b}: no metrics.json"):
        paired_difference(a, b)


@pytest.mark.parametrize("line, why", [("not json", "not JSON"),                     # before: a JSONDecodeError
                                       ('{"category": "single-hop", "f1": 1.0}', "no 'question_id'"),   # KeyError
                                       # before: a TypeError (unhashable list)
                                       ('{"question_id": ["q3"], "f1": 1.0}', r"'question_id' is not a string")])
def test_a_damaged_scores_line_is_a_damaged_file_error_naming_file_and_line(tmp_path, line, why):
    from magma_torch import DamagedFileError

    a = make_run(tmp_path, "magma", {"q1": 1.0, "q2": 0.5})
    b = make_run(tmp_path, "hybrid_rag", {"q1": 1.0, "q2": 0.5})
    scores = b / "scores.jsonl"
    scores.write_text(scores.read_text() + line + "\n")
    with pytest.raises(DamagedFileError, match=f"^{re.escape(str(scores))} line 3: {why}"):
        paired_difference(a, b)
    assert scores.read_text().endswith(line + "\n")       # a comparison reads the folder, never cuts it


@pytest.mark.parametrize("text, why", [('{"memory": "hybrid', r"not JSON \(Unterminated string"),   # a JSONDecodeError
                                       ("[1, 2]", "expected a JSON object, got list")])   # before: a TypeError
def test_a_damaged_metrics_json_is_a_damaged_file_error_naming_the_file(tmp_path, capsys, text, why):
    from magma_torch import DamagedFileError

    a = make_run(tmp_path, "magma", {"q1": 1.0, "q2": 0.5})
    b = make_run(tmp_path, "hybrid_rag", {"q1": 1.0, "q2": 0.5})
    metrics = b / "metrics.json"
    metrics.write_text(text)
    with pytest.raises(DamagedFileError, match=f"^{re.escape(str(metrics))}: {why}") as err:
        paired_difference(a, b)
    assert isinstance(err.value, ValueError) and "\n" not in str(err.value)
    with pytest.raises(SystemExit) as stop:             # qa_table reads each metrics.json first: one line, status 2
        qa_table.main([str(tmp_path)])
    assert stop.value.code == 2 and capsys.readouterr().err == f"qa_table: error: {err.value}\n"
    assert metrics.read_text() == text                  # read, never rewritten


def test_qa_table_writes_every_memory_and_the_interval(tmp_path):
    root = tmp_path / "qa_small"
    make_run(root, "hybrid_rag", {"q1": 0.5, "q2": 0.25, "q3adv": 0.0})
    make_run(root, "magma", {"q1": 1.0, "q2": 0.5, "q3adv": 1.0})
    out = tmp_path / "table.md"
    proc = subprocess.run([sys.executable, str(QA_TABLE), str(root), "--out", str(out)], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    lines = out.read_text().splitlines()
    assert lines[2].startswith("| magma | 3 | 0.800 | 0.750 | 0.250 | 0.500 | 1.000 / 0.500 | 1200 / 9.5 | 1200 / 9.5 | "
                               "21.2 + 21.2 | 1 |")
    assert lines[3].startswith("| hybrid_rag | 3 | 0.800 | 0.375 |")
    assert lines[-1].startswith("F1 magma − hybrid_rag: +0.375, 95 % interval [+0.250, +0.500]")
    assert "over the 2 questions of categories 1-4, 10,000 resamples, seed 0" in lines[-1]


@pytest.mark.parametrize("drop, named", [(("by_category",), "no by_category"),
                                          (("answering", "failed"), "no failed in answering")])
def test_qa_table_names_the_field_a_metrics_json_lacks(tmp_path, capsys, drop, named):
    # before: a raw KeyError from row()
    metrics = make_run(tmp_path, "magma", {"q1": 1.0, "q2": 0.5}) / "metrics.json"
    data = json.loads(metrics.read_text())
    del (data if len(drop) == 1 else data[drop[0]])[drop[-1]]
    metrics.write_text(json.dumps(data))
    with pytest.raises(SystemExit) as stop:
        qa_table.main([str(tmp_path)])
    assert stop.value.code == 2 and capsys.readouterr().err == f"qa_table: error: {metrics}: {named}\n"


def test_qa_table_names_an_empty_folder(tmp_path):
    proc = subprocess.run([sys.executable, str(QA_TABLE), str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stderr.strip() == f"qa_table: error: {tmp_path}: no finished run folder " \
                                                           "(<memory>/metrics.json) below it"


def test_a_run_of_the_same_memory_on_another_graph_is_its_own_row_and_interval(tmp_path):
    """+experiment=qa_small_llm_graph: memory magma in folder magma_llm_graph, compared with the heuristic graph's magma."""
    root = tmp_path / "qa_small"
    make_run(root, "hybrid_rag", {"q1": 0.5, "q2": 0.25})
    make_run(root, "magma", {"q1": 1.0, "q2": 0.5})
    graph = make_run(root, "magma_llm_graph", {"q1": 1.0, "q2": 1.0})
    metrics = json.loads((graph / "metrics.json").read_text())
    (graph / "metrics.json").write_text(json.dumps({**metrics, "memory": "magma"}))
    lines = qa_table.table(root, resamples=1000).splitlines()
    assert [line.split(" | ")[0] for line in lines[2:5]] == ["| magma", "| magma_llm_graph", "| hybrid_rag"]
    assert lines[6].startswith("F1 magma − hybrid_rag: +0.375") and lines[8].startswith("F1 magma_llm_graph − magma: +0.250")
    only = qa_table.table(root, compare=(("magma_llm_graph", "hybrid_rag"),), resamples=1000).splitlines()
    assert only[-1].startswith("F1 magma_llm_graph − hybrid_rag: +0.625") and len(only) == 7


def test_a_compare_naming_no_folder_and_zero_resamples_are_refused_in_one_line(tmp_path, capsys):
    # before: a typo in --compare printed the table without the comparison (exit 0), and --resamples 0
    # ended in numpy's IndexError
    make_run(tmp_path, "hybrid_rag", {"q1": 0.5, "q2": 0.25})
    make_run(tmp_path, "magma", {"q1": 1.0, "q2": 0.5})
    with pytest.raises(SystemExit) as stop:
        qa_table.main([str(tmp_path), "--compare", "magma", "hybird_rag"])
    assert stop.value.code == 2 and capsys.readouterr().err == (
        f"qa_table: error: --compare: no run folder 'hybird_rag' in {tmp_path} (folders: hybrid_rag, magma)\n")
    with pytest.raises(SystemExit) as stop:
        qa_table.main([str(tmp_path), "--resamples", "0"])
    assert stop.value.code == 2 and capsys.readouterr().err == (
        "qa_table: error: resamples must be a whole number >= 1, got 0\n")
