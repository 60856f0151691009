"""task=qa plumbing with ScriptedLLM (tests/scripted_llm.py): prompt by predicted intent,
batching, failure rows, judge, cost accounting, full_context truncation."""
import json
import logging
import subprocess
import sys
from datetime import datetime

import pytest
from hydra import compose, initialize_config_module
from omegaconf import OmegaConf

from magma_torch import MagmaMemory
from magma_torch.config import load_group
from magma_torch.eval import runner
from magma_torch.eval.datasets.base import Question
from magma_torch.eval.prompts import JUDGE_PROMPT_VERSION, JUDGE_SCHEMA
from magma_torch.eval.qa import Answer, answer_questions, judge_answers, parse_verdict, score_answer
from magma_torch.llm.answer_format import UnknownDateStyleError
from magma_torch.llm.base import Generation
from magma_torch.eval.runner import run
from magma_torch.llm.prompts import ANSWER_PROMPTS, INTENT_INSTRUCTIONS, NOT_MENTIONED, UnknownPromptError
from magma_torch.testing import assert_no_run
from magma_torch.text.embedder import Embedder
from scripted_llm import ScriptedLLM

TURNS = [
    ("I lost my job at the bakery last month.", "2023-05-01 10:00"),
    ("Because I lost my job, I started painting landscapes to cope.", "2023-05-08 10:00"),
    ("I adopted a puppy named Max yesterday.", "2023-06-02 10:00"),
    ("Max loves the beach, we go every weekend.", "2023-06-20 10:00"),
    ("I sold my first painting at the fair today!", "2023-07-15 10:00"),
]


@pytest.fixture(scope="module")
def emb():
    return Embedder(device="cpu")


def memory(emb, name="magma", **retrieval):
    cfg = load_group("memory", name)
    cfg.slow_path.background = False
    for k, v in retrieval.items():
        cfg.retrieval[k] = v
    mem = MagmaMemory(cfg, "heuristic", device="cpu", embedder=emb)
    mem.add_many([{"text": t, "timestamp": ts, "speaker": "Jo", "source_id": f"D1:{i + 1}", "stream": "s"}
                  for i, (t, ts) in enumerate(TURNS)])
    mem.consolidate()
    return mem


def test_prompt_uses_the_predicted_intent_not_the_dataset_category(emb):
    with memory(emb) as mem:
        qs = [Question("s/q0", "Why did Jo start painting?", "lost job", ("D1:2",), "temporal", None),
              Question("s/q1", "When did Jo adopt Max?", "1 June 2023", ("D1:3",), "single-hop",
                       datetime(2023, 8, 1))]
        rs = mem.retrieve_batch([q.question for q in qs], [q.query_time for q in qs])
        assert [r.intent for r in rs] == ["WHY", "WHEN"]
        reader = ScriptedLLM()
        answers = answer_questions(rs, qs, reader, max_tokens=64)
        assert len(reader.calls) == 1 and len(reader.calls[0]["prompts"]) == 2      # one batch
        why, when = reader.calls[0]["prompts"]
        assert INTENT_INSTRUCTIONS["WHY"] in why and INTENT_INSTRUCTIONS["WHEN"] not in why
        assert INTENT_INSTRUCTIONS["WHEN"] in when and "01 August 2023" in when
        assert NOT_MENTIONED in why and rs[0].context in why
        assert [a.prediction for a in answers] == ["Why answer", "When answer"]
        # the facade: same prompt, one call, (text, retrieval)
        text, r = mem.answer("Why did Jo start painting?", reader)
        assert text == "Why answer" and r.intent == "WHY"
        assert INTENT_INSTRUCTIONS["WHY"] in reader.calls[-1]["prompts"][0]


def test_answer_prompt_v3_adds_its_rules_and_a_bad_version_fails_before_the_reader(emb):
    _, v2 = ANSWER_PROMPTS["magma-answer-v2"]
    _, v3 = ANSWER_PROMPTS["magma-answer-v3"]
    assert v3["WHY"] == v2["WHY"] and v3["WHEN"].startswith(v2["WHEN"]) and '"2022"' in v3["WHEN"]
    with memory(emb) as mem:
        qs = [Question("s/q0", "When did Jo adopt Max?", "1 June 2023", ("D1:3",), "single-hop", None)]
        rs = mem.retrieve_batch([q.question for q in qs])
        reader = ScriptedLLM()
        answer_questions(rs, qs, reader, prompt="magma-answer-v3")
        text = reader.calls[0]["prompts"][0]
        assert '"Likely yes" or "Likely no"' in text and v3["WHEN"] in text and rs[0].context in text
        answer_questions(rs, qs, reader)                                   # the default stays v2
        assert "Likely yes" not in reader.calls[1]["prompts"][0] and v2["WHEN"] in reader.calls[1]["prompts"][0]
        for call in (lambda: answer_questions(rs, qs, reader, prompt="magma-answer-v9"),
                     lambda: mem.answer("When did Jo adopt Max?", reader, prompt="magma-answer-v9")):
            with pytest.raises(UnknownPromptError, match=r"unknown answer prompt 'magma-answer-v9' "
                                                         r"\(task.answer_prompt; known: magma-answer-v2, "):
                call()
        assert len(reader.calls) == 2


def test_a_run_with_an_unknown_answer_prompt_fails_in_one_line(tmp_path):
    out = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-m", "magma_torch.eval.cli", "task=qa", "dataset=demo", "llm=llamacpp",
                           "task.answer_prompt=v9", f"out_dir={out}"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("magma-run: error: unknown answer prompt 'v9' (task.answer_prompt")
    assert_no_run(out)


def test_a_run_with_an_unknown_date_style_is_refused_before_any_work(tmp_path):
    # it was a bare ValueError once the dataset was ingested and retrieved for: a traceback, not one line
    from magma_torch.eval.cli import check_run_config

    cfg = qa_config(tmp_path / "run", "task.answer_dates=iso")
    cfg.llm = {"_target_": "scripted_llm.ScriptedLLM"}
    with pytest.raises(UnknownDateStyleError, match=r"^unknown answer date style 'iso' \(dates, task\.answer_dates; "):
        check_run_config(cfg)


def test_failed_answer_is_recorded_and_judged_wrong_without_a_call():
    reader = ScriptedLLM(fail_on="boom")

    class R:
        def __init__(self, q):
            self.context, self.intent = "[2023-05-01 10:00] (D1:1) Jo: hi", "ENTITY"
    qs = [Question(f"s/q{i}", q, "x", (), "single-hop", None) for i, q in enumerate(["What boom?", "What ok?"])]
    answers = answer_questions([R(q) for q in qs], qs, reader)
    assert answers[0] == Answer("", answers[0].prompt_tokens, 0, "scripted failure")
    assert answers[1].error is None
    judge = ScriptedLLM("judge")
    v = judge_answers(judge, [q.question for q in qs], ["x", "x"], ["single-hop", "single-hop"], answers)
    assert v[0].verdict == 0 and not v[0].called
    assert len(judge.calls[0]["prompts"]) == 1


@pytest.mark.parametrize(("text", "verdict"), [
    ('{"verdict": 1}', 1), ('Verdict follows. {"verdict": 0} Done.', 0), ('```json\n{"verdict": true}\n```', 1),
    ('{"verdict": 2}', None), ("no verdict", None), ('{"a": ' * 5000 + "1" + "}" * 5000, None),   # past the recursion limit
])
def test_a_verdict_is_read_from_the_judges_text_or_named_unparsable(text, verdict):
    got, err = parse_verdict(Generation(text))
    assert got == verdict and (err is None) == (verdict is not None)


def test_judge_batches_at_temperature_zero_and_never_sees_the_adversarial_trap():
    judge = ScriptedLLM("judge", fail_on="Q-fail", garble_on="Q-garble")
    qs = ["Q-adv", "Q-ok", "Q-fail", "Q-garble", "Q-nogold"]
    golds = ["TRAP", "Paris", "Paris", "Paris", None]
    cats = ["adversarial", "single-hop", "single-hop", "single-hop", "single-hop"]
    answers = [Answer(NOT_MENTIONED), Answer("Paris"), Answer("Paris"), Answer("Paris"), Answer("Paris")]
    v = judge_answers(judge, qs, golds, cats, answers)
    assert len(judge.calls) == 1
    call = judge.calls[0]
    assert call["temperature"] == 0.0 and call["schema"] == JUDGE_SCHEMA and len(call["prompts"]) == 4
    assert "TRAP" not in call["prompts"][0] and f"Gold answer: {NOT_MENTIONED}" in call["prompts"][0]
    assert [x.verdict for x in v] == [1, 0, None, None, None]
    assert v[2].error == "scripted failure" and "unparsable" in v[3].error
    assert not v[4].called and v[4].error is None
    assert JUDGE_PROMPT_VERSION == "locomo-judge-v1"


def test_full_context_returns_everything_and_flags_truncation(emb):
    with memory(emb, "full_context", budget_tokens=10_000) as mem:
        r = mem.retrieve("Why did Jo start painting?")
        assert [n.source_ids[0] for n in r.nodes] == [f"D1:{i}" for i in range(1, 6)]   # chronological
        assert not r.truncated and all(t in r.context for t, _ in TURNS) and r.intent == "WHY"
    with memory(emb, "full_context", budget_tokens=90) as mem:
        r = mem.retrieve("Why did Jo start painting?")
        assert r.truncated and len(r.nodes) == 5
        assert r.context_tokens <= 90 and 1 < len(r.context_ids) < 5
        assert TURNS[-1][0] in r.context and TURNS[0][0] not in r.context     # newest turns kept
        assert r.context.splitlines()[0].startswith("…") and "left out to fit the context window" in r.context
        kept = [n.id for n in r.nodes if n.id in r.context_ids]
        assert kept == r.context_ids == sorted(r.context_ids) and kept[-1] == r.nodes[-1].id


@pytest.fixture(scope="module")
def qa_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("qa")
    with initialize_config_module("magma_torch.conf", version_base=None):
        cfg = compose("config", overrides=["task=qa", "dataset=demo", "memory=magma", "progress=false",
                                           f"out_dir={out}"])
    OmegaConf.set_struct(cfg, False)
    cfg.llm = {"_target_": "scripted_llm.ScriptedLLM", "fail_on": "Question: When", "abstain_on": "Why"}
    cfg.judge = {"_target_": "scripted_llm.ScriptedLLM", "mode": "judge", "garble_on": "Question: What"}
    metrics = run(cfg, out)
    rows = [json.loads(line) for line in (out / "predictions.jsonl").read_text().splitlines()]
    return metrics, rows


def test_a_judge_configured_like_the_reader_is_the_reader(tmp_path, monkeypatch):
    built, build_llm = [], runner.build_llm

    def counting_build_llm(node):
        built.append(build_llm(node))
        return built[-1]

    monkeypatch.setattr(runner, "build_llm", counting_build_llm)
    with initialize_config_module("magma_torch.conf", version_base=None):
        cfg = compose("config", overrides=["task=qa", "dataset=demo", "dataset.limit=1", "memory=magma",
                                           "progress=false", f"out_dir={tmp_path}"])
    OmegaConf.set_struct(cfg, False)
    cfg.llm = cfg.judge = {"_target_": "scripted_llm.ScriptedLLM"}
    metrics = run(cfg, tmp_path)
    (llm,) = built                                   # one backend (one engine) for both roles
    sizes = [len(c["prompts"]) for c in llm.calls]   # per chunk of task.answer_chunk: answers, then verdicts
    assert sizes[::2] == sizes[1::2] and max(sizes) <= cfg.task.answer_chunk
    assert [c["schema"] is None for c in llm.calls] == [True, False] * (len(sizes) // 2)
    assert sum(sizes[::2]) == metrics["n_questions"]
    assert metrics["judging"]["calls"] == metrics["n_questions"] and llm.closed


def test_qa_rows_carry_prediction_scores_and_costs(qa_run):
    metrics, rows = qa_run
    assert len(rows) == 70
    for r in rows:
        assert {"prediction", "f1", "bleu1", "judge", "answer_prompt_tokens", "answer_completion_tokens"} <= set(r)
        if r["question"].startswith("When"):
            assert r["prediction"] == "" and r["answer_error"] == "scripted failure"
            assert r["f1"] == 0.0 and r["judge"] == 0 and "judge_prompt_tokens" not in r
        elif r["question"].startswith("What"):
            assert r["judge"] is None and r["judge_error"].startswith("unparsable")
        if r["category"] == "adversarial":
            assert r["bleu1"] is None
            assert r["f1"] == float(r["prediction"] == NOT_MENTIONED) == float(r["judge"] or 0)


def test_qa_metrics_aggregate_rows(qa_run):
    metrics, rows = qa_run
    scored = [r for r in rows if r["category"] != "adversarial"]
    for k in ("f1", "bleu1", "judge"):
        vals = [r[k] for r in scored if r[k] is not None]
        assert metrics["overall"][k] == pytest.approx(sum(vals) / len(vals))
        adv = [r[k] for r in rows if r["category"] == "adversarial" and r[k] is not None]
        assert metrics["by_category"]["adversarial"][k] == (pytest.approx(sum(adv) / len(adv)) if adv else None)
    a, j = metrics["answering"], metrics["judging"]
    assert a["calls"] == 70 and a["failed"] == sum("answer_error" in r for r in rows) > 0
    for block, key in ((a, "answer_s"), (j, "judge_s")):        # each row's share of its batches' wall time
        assert all(r[key] >= 0 for r in rows) and block["seconds"] == pytest.approx(sum(r[key] for r in rows))
        assert block["per_question"]["seconds"] == pytest.approx(block["seconds"] / 70)
    assert a["prompt_tokens"] == sum(r["answer_prompt_tokens"] for r in rows)
    assert a["per_question"]["prompt_tokens"] == pytest.approx(a["prompt_tokens"] / 70)
    assert j["calls"] == sum("judge_prompt_tokens" in r for r in rows) == 70 - a["failed"]
    assert j["failed"] == sum("judge_error" in r for r in rows) > 0
    assert metrics["prompts"]["judge"] == JUDGE_PROMPT_VERSION
    assert metrics["build"]["llm_calls"] == 0 and metrics["build"]["llm_tokens"] == 0   # heuristic slow path


@pytest.mark.parametrize("needs", ["task=qa", "consolidation=llm"])
def test_a_run_that_needs_an_llm_fails_fast_in_one_line_without_one(tmp_path, needs):
    out = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-m", "magma_torch.eval.cli", needs, "dataset=demo",
                           f"out_dir={out}"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith(f"magma-run: error: {needs} needs an llm") and "Traceback" not in proc.stderr
    assert_no_run(out)


def test_objective_judge_without_a_judge_fails_fast_in_one_line(tmp_path):
    """judge=none, the default, is {}: before, the run went on and every question waited on the reader."""
    out = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-m", "magma_torch.eval.cli", "task=qa", "llm=openai",
                           "llm.require_key=false", "llm.base_url=http://127.0.0.1:9/v1", "objective=judge",
                           "dataset=demo", f"out_dir={out}"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines()[-1].startswith(
        "magma-run: error: objective=judge is null in every run of task=qa without judge=...")
    assert_no_run(out)


def test_a_run_counts_and_names_the_events_whose_consolidation_failed(tmp_path, caplog):
    out = tmp_path / "run"
    cfg = qa_config(out, "consolidation=llm", "memory.slow_path.background=false", "memory.slow_path.batch_size=4")
    # every consolidation prompt shows the new event as "reference n0", and no answer prompt does
    cfg.llm = {"_target_": "scripted_llm.ScriptedLLM", "fail_on": "reference n0"}
    with caplog.at_level(logging.WARNING, logger="magma_torch.run"):
        metrics = run(cfg, out)
    events = metrics["build"]["events"]
    assert events > 0 and metrics["build"]["consolidation_failed"] == events
    assert f"demo-1: {events} of {events} events failed consolidation (first: llm generation failed: " \
        "scripted failure)" in caplog.text
    assert metrics["answering"]["failed"] == 0


def qa_config(out, *overrides):
    with initialize_config_module("magma_torch.conf", version_base=None):
        cfg = compose("config", overrides=["task=qa", "dataset=demo", "dataset.limit=1", "memory=magma",
                                           "progress=false", f"out_dir={out}", *overrides])
    OmegaConf.set_struct(cfg, False)
    return cfg


def predictions(out):
    return [json.loads(line) for line in (out / "predictions.jsonl").read_text().splitlines()]


def test_a_stopped_qa_run_keeps_its_finished_chunks_and_resumes_inside_the_conversation(tmp_path, monkeypatch):
    whole = qa_config(tmp_path / "whole", "task.answer_chunk=4")
    whole.llm = {"_target_": "scripted_llm.ScriptedLLM"}
    expected = run(whole, tmp_path / "whole")
    n = expected["n_questions"]
    assert n > 8

    generate = ScriptedLLM.generate

    def stop_on_third_chunk(self, prompts, **kw):
        if len(self.calls) == 2:
            raise runner.Terminated("SIGTERM")       # what the SIGTERM handler raises mid-generation
        return generate(self, prompts, **kw)

    out = tmp_path / "resumed"
    cfg = qa_config(out, "task.answer_chunk=4")
    cfg.llm = {"_target_": "scripted_llm.ScriptedLLM"}
    monkeypatch.setattr(ScriptedLLM, "generate", stop_on_third_chunk)
    with pytest.raises(runner.Terminated):
        run(cfg, out)
    assert len(predictions(out)) == 8 and (out / "samples.jsonl").read_text() == ""
    assert not (out / "metrics.json").exists()

    answered = []

    def counting(self, prompts, **kw):
        answered.extend(prompts)
        return generate(self, prompts, **kw)

    monkeypatch.setattr(ScriptedLLM, "generate", counting)
    again = qa_config(out, "task.answer_chunk=5")        # another chunk size resumes the same folder
    again.llm = cfg.llm
    metrics = run(again, out)
    assert len(answered) == n - 8                        # nothing answered twice
    rows = predictions(out)
    assert [r["question_id"] for r in rows] == [r["question_id"] for r in predictions(tmp_path / "whole")]
    timing = ("answer_s", "judge_s", "retrieval_ms")
    assert [{k: v for k, v in r.items() if k not in timing} for r in rows] == \
        [{k: v for k, v in r.items() if k not in timing} for r in predictions(tmp_path / "whole")]
    assert metrics["answering"]["calls"] == n and metrics["n_questions"] == n


def test_a_reader_that_times_out_or_returns_garbage_fails_that_question_alone(tmp_path):
    from test_llm_openai import FakeServer      # a scripted OpenAI-compatible HTTP server

    server = FakeServer(script=["sleep", "garbage"], default="Max")
    try:
        out = tmp_path / "run"
        cfg = qa_config(out, "llm=openai", f"llm.base_url={server.url}", "llm.model=fake", "llm.require_key=false",
                        "llm.concurrency=1", "llm.max_retries=0", "llm.timeout_s=0.3")
        metrics = run(cfg, out)
    finally:
        server.stop()
    rows = predictions(out)
    assert rows[0]["answer_error"].startswith("after 1 attempts: timeout after 0.3s")
    assert rows[1]["answer_error"].startswith("after 1 attempts: bad response body")
    assert [r["prediction"] for r in rows[:2]] == ["", ""] and [r["f1"] for r in rows[:2]] == [0.0, 0.0]
    assert all(r["prediction"] == "Max" and "answer_error" not in r for r in rows[2:])
    assert metrics["answering"]["failed"] == 2 and metrics["n_questions"] == len(rows) > 2
    assert (out / "metrics.json").exists()                 # the run went on and finished


def test_a_retrieval_run_whose_consolidation_borrows_the_reader_writes_its_metrics(tmp_path):
    # consolidation=llm takes the llm group's model, so a retrieval run builds a reader too; its summary
    # then read task.answer_prompt, which task=retrieval lacks: the run raised after all its work, and
    # raised again on every resume, so it never wrote metrics.json.
    with initialize_config_module("magma_torch.conf", version_base=None):
        cfg = compose("config", overrides=["task=retrieval", "dataset=demo", "dataset.limit=1", "memory=magma",
                                           "consolidation=llm", "memory.slow_path.background=false",
                                           "progress=false", f"out_dir={tmp_path}"])
    OmegaConf.set_struct(cfg, False)
    cfg.llm = {"_target_": "scripted_llm.ScriptedLLM"}
    metrics = run(cfg, tmp_path)
    assert (tmp_path / "metrics.json").is_file() and metrics["n_questions"] > 0
    assert not {"answering", "judging", "prompts"} & set(metrics)


def test_an_abstention_question_is_scored_by_whether_the_answer_abstains():
    # LongMemEval's _abs gold explains why the conversation cannot answer: word overlap with it gave
    # the invented "You play the cello." 0.40 and the right "Not mentioned in the conversation." 0.25.
    gold = "The information provided is not enough. You mentioned playing the violin but not the cello."
    kind = "single-session-user"
    assert score_answer("Not mentioned in the conversation.", gold, kind, abstention=True) == {"f1": 1.0, "bleu1": None}
    assert score_answer("You play the cello.", gold, kind, abstention=True) == {"f1": 0.0, "bleu1": None}
    assert score_answer("You play the cello.", gold, kind)["f1"] > 0     # scored on its words otherwise
