"""LongMemEval: the streaming loader, what models may see, retrieval metrics and the judge prompts."""
from __future__ import annotations

import json
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import pytest
from hydra import compose, initialize_config_module
from omegaconf import OmegaConf

from magma_torch.eval.datasets import DatasetError, load_dataset, load_longmemeval
from magma_torch.eval.datasets.longmemeval import QUESTION_TYPES
from magma_torch.eval.prompts import LONGMEMEVAL_JUDGE_PROMPT_VERSION, judge_prompt
from magma_torch.eval.runner import records, run
from magma_torch.memory import MagmaMemory
from scripted_llm import ScriptedLLM

DATA = Path(__file__).parent / "data"
FIXTURE = DATA / "longmemeval_fixture.json"
MALFORMED = DATA / "longmemeval_malformed.json"
RAW = json.loads(FIXTURE.read_text())
# What must never reach a model: the dataset's session ids (evidence ones start "answer_") and has_answer.
SECRETS = sorted({sid for r in RAW for sid in r["haystack_session_ids"]} | {"has_answer", "answer_"})


def test_fixture_loads_one_sample_per_question():
    samples = list(load_longmemeval(FIXTURE))
    assert [s.sample_id for s in samples] == [r["question_id"] for r in RAW]
    for s, raw in zip(samples, RAW, strict=True):
        (q,) = s.questions
        assert q.category == raw["question_type"] and q.gold == str(raw["answer"])
        assert q.abstention == raw["question_id"].endswith("_abs")
        assert q.query_time == datetime.strptime(raw["question_date"], "%Y/%m/%d (%a) %H:%M")
        assert len(s.turns) == sum(len(x) for x in raw["haystack_sessions"])
        assert [t.timestamp for t in s.turns] == sorted(t.timestamp for t in s.turns)
        turn = {t.source_id: t for t in s.turns}
        # evidence ids point at the turns the file marks has_answer, in the sessions it names
        marked = {t["content"] for sess in raw["haystack_sessions"] for t in sess if t.get("has_answer")}
        assert {turn[e].text for e in q.evidence} == marked
        by_date = sorted(zip(raw["haystack_dates"], raw["haystack_session_ids"], strict=True))
        names = {sid: f"session_{k}" for k, (_, sid) in enumerate(by_date, 1)}
        assert set(q.evidence_sessions) == {names[sid] for sid in raw["answer_session_ids"]}


def test_sessions_are_ordered_by_date_and_named_by_position():
    s = next(iter(load_longmemeval(FIXTURE)))        # dates in the file: 05-02, 05-15, 05-03
    assert [t.session_id for t in s.turns] == ["session_1"] * 2 + ["session_2"] * 2 + ["session_3"] * 2
    assert s.turns[2].text.startswith("I had my dentist appointment") and s.turns[2].source_id == "S2:1"
    assert s.questions[0].evidence == ("S2:1", "S3:1")


def test_model_facing_records_hold_no_session_ids_or_has_answer():
    for s in load_longmemeval(FIXTURE):
        text = json.dumps(records(s), default=str) + json.dumps([q.question for q in s.questions])
        for secret in SECRETS:
            assert secret not in text


def test_loader_streams_records_one_at_a_time(tmp_path):
    # A valid first record followed by a broken tail: the first sample arrives before the tail is parsed.
    path = tmp_path / "big.json"
    path.write_text("[" + json.dumps(RAW[0]) + ", {\"question_id\": ")
    it = iter(load_longmemeval(path))
    assert next(it).sample_id == RAW[0]["question_id"]
    with pytest.raises(DatasetError, match=r"big\.json: record \[1\]: invalid JSON"):
        next(it)


@pytest.mark.parametrize("edit, message", [
    (lambda r: r.pop("haystack_dates"), r"record \[0\] \(question_id q_temporal_1\): missing 'haystack_dates'"),
    (lambda r: r.update(question_date="18 Dec 2023"), r"question_date: unparseable date"),
    (lambda r: r.update(question_type="trivia"), r"question_type: unknown type 'trivia'"),
    (lambda r: r["haystack_sessions"][1][0].update(has_answer="yes"), r"haystack_sessions\[1\]\[0\]\.has_answer: expected bool"),
    (lambda r: r["haystack_sessions"][0][1].pop("content"), r"haystack_sessions\[0\]\[1\]: missing 'content'"),
])
def test_bad_records_name_file_and_record(tmp_path, edit, message):
    raw = json.loads(json.dumps(RAW[:1]))
    edit(raw[0])
    path = tmp_path / "lme.json"
    path.write_text(json.dumps(raw))
    with pytest.raises(DatasetError, match=r"lme\.json: " + message if message.startswith("record") else message):
        list(load_longmemeval(path))


def test_top_level_must_be_a_list(tmp_path):
    path = tmp_path / "obj.json"
    path.write_text(json.dumps(RAW[0]))
    with pytest.raises(DatasetError, match=r"obj\.json: top level: expected a list"):
        load_dataset("longmemeval_m", str(path))            # before any record is asked for
    with pytest.raises(DatasetError, match=r"missing\.json: cannot read file"):
        load_dataset("longmemeval_s", str(tmp_path / "missing.json"))
    with pytest.raises(DatasetError, match="needs a file"):
        load_dataset("longmemeval_oracle", None)


@pytest.mark.parametrize("head", [" " * 100 + "\n\t", "\ufeff", "\ufeff\r\n"], ids=["blanks", "bom", "bom+blank"])
def test_a_list_after_many_blanks_or_a_byte_order_mark_loads(tmp_path, head):
    path = tmp_path / "lme.json"
    path.write_text(head + json.dumps(RAW), encoding="utf-8")
    assert [s.sample_id for s in load_longmemeval(path)] == [r["question_id"] for r in RAW]
    path.write_text(head + json.dumps(RAW[0]), encoding="utf-8")
    with pytest.raises(DatasetError, match=r"lme\.json: top level: expected a list"):
        load_longmemeval(path)


def test_malformed_file_fails_in_one_line_without_a_finished_folder(tmp_path):
    out = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-m", "magma_torch.eval.cli", "dataset=longmemeval_oracle",
                           f"dataset.path={MALFORMED}", f"out_dir={out}", "progress=false"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("magma-run: error: ") and "longmemeval_malformed.json: record [1] (question_id q_update_1)" in last
    assert not (out / "metrics.json").exists()


def test_a_folder_where_nothing_finished_takes_the_corrected_command(tmp_path):
    bad = json.loads(json.dumps(RAW))
    bad[0]["question_date"] = "18 Dec 2023"
    path, out = tmp_path / "lme.json", tmp_path / "run"
    path.write_text(json.dumps(bad))
    overrides = ["dataset=longmemeval_s", "progress=false", f"out_dir={out}"]
    with initialize_config_module("magma_torch.conf", version_base=None):
        failing = compose("config", overrides=[*overrides, f"dataset.path={path}"])
        fixed = compose("config", overrides=[*overrides, f"dataset.path={FIXTURE}", "dataset.limit=1"])
    with pytest.raises(DatasetError, match=r"record \[0\].*question_date: unparseable date"):
        run(failing, out)
    assert run(fixed, out)["n_questions"] == 1
    assert OmegaConf.load(out / "config.yaml").dataset.path == str(FIXTURE)


# ---------------------------------------------------------------- a run: metrics and what models saw


@pytest.fixture(scope="module")
def qa_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("lme")
    with initialize_config_module("magma_torch.conf", version_base=None):
        cfg = compose("config", overrides=["task=qa", "dataset=longmemeval_s", f"dataset.path={FIXTURE}",
                                           "progress=false", f"out_dir={out}"])
    OmegaConf.set_struct(cfg, False)
    cfg.llm = {"_target_": "scripted_llm.ScriptedLLM", "abstain_on": "violin"}
    cfg.judge = {"_target_": "scripted_llm.ScriptedLLM", "mode": "judge"}
    seen = []   # everything handed to the memory (and its consolidator) and to the LLMs
    add_many, generate = MagmaMemory.add_many, ScriptedLLM.generate

    def spy_add(self, recs):
        recs = list(recs)
        seen.append(json.dumps(recs, default=str))
        return add_many(self, recs)

    def spy_generate(self, prompts, **kw):
        seen.extend(prompts)
        return generate(self, prompts, **kw)

    mp = pytest.MonkeyPatch()
    mp.setattr(MagmaMemory, "add_many", spy_add)
    mp.setattr(ScriptedLLM, "generate", spy_generate)
    try:
        metrics = run(cfg, out)
    finally:
        mp.undo()
    rows = [json.loads(line) for line in (out / "predictions.jsonl").read_text().splitlines()]
    return metrics, rows, seen, out


def test_no_model_sees_session_ids_or_has_answer(qa_run):
    metrics, rows, seen, out = qa_run
    assert len(seen) == len(RAW) + 2 * len(RAW)       # one memory, one answer and one judge prompt per question
    for secret in SECRETS:
        assert all(secret not in s for s in seen)
    for r in rows:  # the reader's context is the retrieval's; its sources are positional ids only
        assert all(src.startswith("S") and ":" in src for src in r["retrieved_sources"])


def test_metrics_by_question_type_with_session_recall(qa_run):
    metrics, rows, _, _ = qa_run
    assert list(metrics["by_category"]) == list(QUESTION_TYPES)
    assert metrics["n_questions"] == len(RAW) and metrics["by_category"]["multi-session"]["n"] == 1
    (abs_row,) = [r for r in rows if r["abstention"]]
    assert not any("recall" in k for k in abs_row)              # abstention: never in recall
    assert metrics["abstention"]["n"] == 1 and metrics["overall"]["n_recall"] == len(RAW) - 1
    for r in rows:
        if r["abstention"]:
            continue
        ranked = list(dict.fromkeys(f"session_{s.split(':')[0][1:]}" for s in r["retrieved_sources"]))
        assert r["session_recall_all@5"] == float(set(r["evidence_sessions"]) <= set(ranked[:5]))
        assert r["session_recall_any@10"] == float(bool(set(r["evidence_sessions"]) & set(ranked[:10])))
    rec = [r["session_recall_all@10"] for r in rows if "session_recall_all@10" in r]
    assert metrics["overall"]["session_recall_all@10"] == pytest.approx(sum(rec) / len(rec))
    assert metrics["overall"]["n_session_recall"] == len(RAW) - 1
    assert metrics["prompts"]["judge"] == LONGMEMEVAL_JUDGE_PROMPT_VERSION
    # the scripted reader abstains on the violin question; the abstention judge prompt accepts that
    assert abs_row["prediction"].startswith("Not mentioned") and abs_row["judge"] == 1


def test_judge_prompt_per_question_type():
    p = {k: judge_prompt("How many days?", "18 days", "19 days", k)
         for k in (*QUESTION_TYPES, "abstention")}
    assert "off-by-one" in p["temporal-reasoning"] and "off-by-one" not in p["multi-session"]
    assert "updated answer" in p["knowledge-update"]
    assert "rubric" in p["single-session-preference"]
    assert "cannot be answered" in p["abstention"]
    assert len(set(p.values())) == 5        # single-session-user/-assistant and multi-session share the default
    assert "Generated answer: 19 days" in p["temporal-reasoning"]
    assert "Gold answer: 18 days" in judge_prompt("q", "18 days", "x", "temporal")   # LoCoMo keeps its judge
    assert "off-by-one" not in judge_prompt("q", "18 days", "x", "temporal")


def test_a_repeated_question_id_is_refused_when_the_stream_reaches_it(tmp_path):
    path = tmp_path / "lme.json"
    path.write_text(json.dumps([RAW[0], RAW[1], RAW[0]]))
    it = iter(load_longmemeval(path))
    assert [next(it).sample_id, next(it).sample_id] == [RAW[0]["question_id"], RAW[1]["question_id"]]
    with pytest.raises(DatasetError, match=rf"lme\.json: record \[2\]: question_id '{RAW[0]['question_id']}' "
                                           r"repeats record \[0\]'s"):
        next(it)
