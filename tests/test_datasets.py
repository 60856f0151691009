"""Tests for the evaluation dataset loaders (LoCoMo and the packaged demo)."""

from __future__ import annotations

import json
import logging
import types
from datetime import datetime
from pathlib import Path

import pytest

from magma_torch.eval.datasets import (
    DatasetError,
    Sample,
    load_dataset,
    load_demo,
    load_locomo,
)
from magma_torch.eval.datasets import locomo as locomo_module
from magma_torch.testing import with_dataset

DEV_FILE = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "locomo" / "locomo10_dev.json"
CATEGORY_NAMES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}
GOLD_ANNOTATIONS = ("event_summary", "observation", "session_summary")


# ---------------------------------------------------------------- fixtures


def _sample(sample_id: str = "s1", sessions: dict | None = None, qa: list | None = None) -> dict:
    """A minimal LoCoMo sample, including the annotation keys the loader must not read."""
    if sessions is None:
        sessions = {
            1: ("1:56 pm on 8 May, 2023", [("A", "hello"), ("B", "hi there")]),
            2: ("10:00 am on 9 June, 2023", [("A", "back again"), ("B", "welcome back")]),
        }
    conv: dict = {"speaker_a": "A", "speaker_b": "B"}
    for n, (date, turns) in sessions.items():
        conv[f"session_{n}_date_time"] = date
        conv[f"session_{n}"] = [
            {"speaker": s, "dia_id": f"D{n}:{k}", "text": t} for k, (s, t) in enumerate(turns, 1)
        ]
    if qa is None:
        qa = [{"question": "What did A say?", "answer": "hello", "evidence": ["D1:1"], "category": 4}]
    return {
        "qa": qa,
        "conversation": conv,
        "event_summary": {"events_session_1": {"A": ["leak"], "B": [], "date": "8 May, 2023"}},
        "observation": {"session_1_observation": {"A": [["leak", "D1:1"]], "B": []}},
        "session_summary": {"session_1_summary": "leak"},
        "sample_id": sample_id,
    }


def _write(tmp_path: Path, data, name: str = "locomo10.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def _qa(evidence, category: int = 4, **extra) -> dict:
    return {"question": "q?", "answer": "a", "evidence": evidence, "category": category, **extra}


# ---------------------------------------------------------------- the real dev split


@pytest.fixture(scope="module")
def dev() -> tuple[list[Sample], list]:
    return load_locomo(DEV_FILE), json.loads(DEV_FILE.read_text(encoding="utf-8"))


@with_dataset(DEV_FILE)
def test_dev_counts(dev):
    samples, _ = dev
    assert [s.sample_id for s in samples] == ["conv-26", "conv-30", "conv-41", "conv-42", "conv-43"]
    assert sum(len(s.turns) for s in samples) == 2760
    # The split's README says 1,000 questions; the file itself holds 999.
    assert sum(len(s.questions) for s in samples) == 999


@with_dataset(DEV_FILE)
def test_dev_evidence_exists_and_categories_map(dev):
    samples, raw = dev
    for sample, raw_sample in zip(samples, raw, strict=True):
        ids = {t.source_id for t in sample.turns}
        for q, raw_q in zip(sample.questions, raw_sample["qa"], strict=True):
            assert set(q.evidence) <= ids, q.question_id
            assert q.category == CATEGORY_NAMES[raw_q["category"]]
            assert q.query_time == sample.turns[-1].timestamp


@with_dataset(DEV_FILE)
def test_dev_quirks(dev, caplog):
    samples, _ = dev
    by_id = {s.sample_id: s for s in samples}
    conv26 = by_id["conv-26"]
    # conv-26 has date keys for sessions 20-35 but only 19 sessions.
    assert {t.session_id for t in conv26.turns} == {f"session_{n}" for n in range(1, 20)}
    evidence = {q.evidence for s in samples for q in s.questions}
    assert ("D8:6", "D9:17") in evidence
    assert any("D11:26" in q.evidence for q in by_id["conv-43"].questions)
    assert all(isinstance(q.gold, str) for s in samples for q in s.questions)
    assert sum(not q.evidence for s in samples for q in s.questions) >= 2
    captions = [t for s in samples for t in s.turns if "[shares an image: " in t.text]
    assert len(captions) == 602  # every turn with a blip_caption, with or without img_url


@with_dataset(DEV_FILE)
def test_dev_never_reads_gold_annotations(monkeypatch):
    _guard_json(monkeypatch)
    assert len(load_locomo(DEV_FILE)) == 5


# ---------------------------------------------------------------- parsing


def test_basic_sample(tmp_path):
    [s] = load_locomo(_write(tmp_path, [_sample()]))
    assert s.sample_id == "s1"
    assert [t.source_id for t in s.turns] == ["D1:1", "D1:2", "D2:1", "D2:2"]
    assert s.turns[0].timestamp == datetime(2023, 5, 8, 13, 56)
    assert s.turns[2].session_id == "session_2"
    [q] = s.questions
    assert q.question_id == "s1/q0"
    assert (q.gold, q.evidence, q.category) == ("hello", ("D1:1",), "single-hop")
    assert q.query_time == datetime(2023, 6, 9, 10, 0)


def test_sessions_in_numeric_order(tmp_path):
    sessions = {n: (f"9:00 am on {n} March, 2023", [("A", f"turn {n}")]) for n in (10, 2, 1)}
    [s] = load_locomo(_write(tmp_path, [_sample(sessions=sessions, qa=[])]))
    assert [t.session_id for t in s.turns] == ["session_1", "session_2", "session_10"]
    assert s.questions == ()


def test_image_caption_kept_without_img_url(tmp_path):
    data = _sample()
    turns = data["conversation"]["session_1"]
    turns[0]["blip_caption"] = "a photo of a dog"  # no img_url
    turns[1].update(blip_caption="a photo of a cake", img_url=["http://x/y.jpg"], query="cake")
    [s] = load_locomo(_write(tmp_path, [data]))
    assert s.turns[0].text == "hello [shares an image: a photo of a dog]"
    assert s.turns[1].text == "hi there [shares an image: a photo of a cake]"


def test_a_repeated_dia_id_keeps_both_turns(tmp_path, caplog):
    data = _sample()
    data["conversation"]["session_2"][1]["dia_id"] = "D2:1"      # two different turns named D2:1
    with caplog.at_level(logging.WARNING):
        [s] = load_locomo(_write(tmp_path, [data]))
    assert [t.source_id for t in s.turns] == ["D1:1", "D1:2", "D2:1", "D2:1#2"]
    assert "repeated dia_ids" in caplog.text and "D2:1" in caplog.text


def test_int_answer_becomes_str(tmp_path):
    [s] = load_locomo(_write(tmp_path, [_sample(qa=[_qa(["D1:1"], category=2, answer=2022)])]))
    assert s.questions[0].gold == "2022"
    assert s.questions[0].category == "temporal"


def test_adversarial_gold_is_adversarial_answer(tmp_path):
    qa = [
        {"question": "q?", "adversarial_answer": "trap", "answer": "No", "evidence": ["D1:1"], "category": 5},
        {"question": "q?", "adversarial_answer": "trap", "evidence": [], "category": 5},
    ]
    [s] = load_locomo(_write(tmp_path, [_sample(qa=qa)]))
    assert [(q.gold, q.category) for q in s.questions] == [("trap", "adversarial")] * 2


def test_malformed_evidence_is_normalised(tmp_path, caplog):
    sessions = {
        8: ("1:00 pm on 1 May, 2023", [("A", f"t{k}") for k in range(6)]),
        9: ("1:00 pm on 2 May, 2023", [("A", f"t{k}") for k in range(17)]),
        11: ("1:00 pm on 3 May, 2023", [("A", f"t{k}") for k in range(26)]),
        30: ("1:00 pm on 4 May, 2023", [("A", f"t{k}") for k in range(5)]),
    }
    qa = [
        _qa(["D8:6; D9:17"]),
        _qa(["D:11:26", "D30:05"]),
        _qa(["D", "D8:6"]),
        _qa(["D99:1", "D30:5", "D30:05"]),
        _qa(["D99:1"]),
        _qa([]),
    ]
    with caplog.at_level(logging.WARNING, logger=locomo_module.__name__):
        [s] = load_locomo(_write(tmp_path, [_sample(sessions=sessions, qa=qa)]))
    assert [q.evidence for q in s.questions] == [
        ("D8:6", "D9:17"),
        ("D11:26", "D30:5"),
        ("D8:6",),
        ("D30:5",),
        (),
        (),
    ]
    # One warning per sample, naming each dropped id once.
    [record] = caplog.records
    assert "s1" in record.getMessage()
    assert record.getMessage().endswith("match no turn: D, D99:1")


def test_orphan_session_date_keys_are_ignored(tmp_path):
    data = _sample()
    data["conversation"]["session_3_date_time"] = "4:10 pm on 26 October, 2023"
    data["conversation"]["session_4_date_time"] = "not even a date"
    [s] = load_locomo(_write(tmp_path, [data]))
    assert len(s.turns) == 4
    assert s.questions[0].query_time == datetime(2023, 6, 9, 10, 0)


@pytest.mark.parametrize(
    "text, expected",
    [
        ("1:56 pm on 8 May, 2023", datetime(2023, 5, 8, 13, 56)),
        ("12:09 am on 13 September, 2023", datetime(2023, 9, 13, 0, 9)),
        ("7:15 pm on 3 Sep, 2023", datetime(2023, 9, 3, 19, 15)),
        ("07:15 PM on 03 Jun, 2023", datetime(2023, 6, 3, 19, 15)),
    ],
)
def test_date_formats(tmp_path, text, expected):
    [s] = load_locomo(_write(tmp_path, [_sample(sessions={1: (text, [("A", "x")])}, qa=[])]))
    assert s.turns[0].timestamp == expected


# ---------------------------------------------------------------- gold annotations are never read


class LeakError(Exception):
    """Raised when a loader touches a benchmark annotation."""


class GuardedDict(dict):
    """A JSON object that raises when a gold-annotation key's value is accessed."""

    def __getitem__(self, key):
        if key in GOLD_ANNOTATIONS:
            raise LeakError(key)
        return super().__getitem__(key)

    def get(self, key, default=None):
        if key in GOLD_ANNOTATIONS:
            raise LeakError(key)
        return super().get(key, default)

    def pop(self, key, *default):
        raise LeakError(key)

    # These would hand out the annotations' values without __getitem__.
    def items(self):
        raise LeakError("items()")

    def values(self):
        raise LeakError("values()")


def _guard_json(monkeypatch) -> None:
    """Make the loader's json.load build GuardedDicts for every JSON object."""

    def load(f):
        return json.loads(f.read(), object_hook=GuardedDict)

    fake = types.SimpleNamespace(load=load, JSONDecodeError=json.JSONDecodeError)
    monkeypatch.setattr(locomo_module, "json", fake)


def test_guard_detects_access():
    guarded = json.loads(json.dumps(_sample()), object_hook=GuardedDict)
    for key in GOLD_ANNOTATIONS:
        assert key in guarded
        with pytest.raises(LeakError):
            guarded[key]
        with pytest.raises(LeakError):
            guarded.get(key)
    with pytest.raises(LeakError):
        list(guarded.values())


def test_gold_annotations_never_read(tmp_path, monkeypatch):
    data = _sample()
    data["conversation"]["session_1"][0]["blip_caption"] = "a photo"
    path = _write(tmp_path, [data, _sample("s2")])
    _guard_json(monkeypatch)
    samples = load_locomo(path)
    assert [s.sample_id for s in samples] == ["s1", "s2"]
    assert load_demo()  # the demo file carries the annotation keys too


# ---------------------------------------------------------------- bad input


def _error(path: Path) -> str:
    with pytest.raises(DatasetError) as info:
        load_locomo(path)
    return str(info.value)


def test_missing_file(tmp_path):
    msg = _error(tmp_path / "nope.json")
    assert "nope.json" in msg and "cannot read" in msg


def test_invalid_json(tmp_path):
    path = tmp_path / "broken.json"
    path.write_text('[{"sample_id": ', encoding="utf-8")
    msg = _error(path)
    assert "broken.json" in msg and "invalid JSON" in msg and "line 1" in msg


def test_wrong_top_level_type(tmp_path):
    msg = _error(_write(tmp_path, {"sample_id": "s1"}))
    assert msg.endswith("locomo10.json: top level: expected a list of samples, got dict")


@pytest.mark.parametrize(
    "mutate, where",
    [
        (lambda d: d.pop("sample_id"), "[1]: missing 'sample_id'"),
        (lambda d: d.pop("conversation"), "[1]: missing 'conversation'"),
        (lambda d: d.pop("qa"), "[1]: missing 'qa'"),
        (lambda d: d["conversation"]["session_2"][1].pop("text"), "[1].conversation.session_2[1]: missing 'text'"),
        (lambda d: d["conversation"]["session_1"][0].pop("speaker"), "[1].conversation.session_1[0]: missing 'speaker'"),
        (lambda d: d["conversation"]["session_1"][0].pop("dia_id"), "[1].conversation.session_1[0]: missing 'dia_id'"),
        (lambda d: d["conversation"].pop("session_2_date_time"), "[1].conversation: missing 'session_2_date_time'"),
        (lambda d: d["qa"][0].pop("question"), "[1].qa[0]: missing 'question'"),
        (lambda d: d["qa"][0].pop("category"), "[1].qa[0]: missing 'category'"),
        (lambda d: d["qa"][0].pop("evidence"), "[1].qa[0]: missing 'evidence'"),
        (lambda d: d["qa"][0].update(category=7), "[1].qa[0].category: unknown category 7"),
        (lambda d: d["qa"][0].update(category="2"), "[1].qa[0].category: expected int, got str"),
        (lambda d: d["qa"][0].update(evidence="D1:1"), "[1].qa[0].evidence: expected list, got str"),
        (lambda d: d["qa"][0].update(evidence=[3]), "[1].qa[0].evidence[0]: expected str, got int"),
        (lambda d: d["qa"][0].update(answer=["x"]), "[1].qa[0].answer: expected str or int or float, got list"),
        (lambda d: d["conversation"].update(session_1={}), "[1].conversation.session_1: expected list, got dict"),
        (lambda d: d["conversation"]["session_1"].append("text"), "[1].conversation.session_1[2]: expected an object, got str"),
        (
            lambda d: d["conversation"].update(session_2_date_time="sometime in June"),
            "[1].conversation.session_2_date_time: unparseable date 'sometime in June'",
        ),
    ],
)
def test_bad_records_name_file_and_path(tmp_path, mutate, where):
    bad = _sample("s2")
    mutate(bad)
    msg = _error(_write(tmp_path, [_sample(), bad]))
    assert msg.endswith(f"locomo10.json: {where}")


# ---------------------------------------------------------------- registry


def test_load_dataset_registry(tmp_path):
    path = _write(tmp_path, [_sample()])
    assert [s.sample_id for s in load_dataset("locomo", str(path))] == ["s1"]
    assert load_dataset("demo", None) == load_demo()
    with pytest.raises(DatasetError, match="dataset.path"):
        load_dataset("locomo", None)
    with pytest.raises(DatasetError, match="unknown dataset 'longmemeval'"):
        load_dataset("longmemeval", None)


# ---------------------------------------------------------------- demo dataset


def test_demo_dataset(caplog):
    with caplog.at_level(logging.WARNING, logger=locomo_module.__name__):
        samples = load_demo()
    assert not caplog.records  # no evidence id was dropped
    assert len(samples) == 3
    assert len({frozenset(t.speaker for t in s.turns) for s in samples}) == 3
    for s in samples:
        ids = {t.source_id for t in s.turns}
        sessions: dict[str, int] = {}
        for t in s.turns:
            sessions[t.session_id] = sessions.get(t.session_id, 0) + 1
        assert len(sessions) >= 4, s.sample_id
        assert all(10 <= n <= 16 for n in sessions.values()), sessions
        assert len(s.questions) >= 15
        assert {q.category for q in s.questions} == set(CATEGORY_NAMES.values())
        for q in s.questions:
            assert q.evidence and set(q.evidence) <= ids, q.question_id
            assert q.gold
            if q.category == "multi-hop":
                assert len({e.split(":")[0] for e in q.evidence}) >= 2, q.question_id
        # Timestamps never go backwards across sessions.
        assert [t.timestamp for t in s.turns] == sorted(t.timestamp for t in s.turns)
    captions = [t for s in samples for t in s.turns if "[shares an image: " in t.text]
    assert len(captions) >= 3


def test_demo_file_matches_locomo_schema():
    from magma_torch.eval.datasets.demo import DEMO_FILE

    raw = json.loads(DEMO_FILE.read_text(encoding="utf-8"))
    turns = []
    for sample in raw:
        assert set(sample) == {"qa", "conversation", "event_summary", "observation", "session_summary", "sample_id"}
        turns += [t for k, v in sample["conversation"].items() if k.startswith("session_") and isinstance(v, list) for t in v]
        for q in sample["qa"]:
            assert ("adversarial_answer" in q) == (q["category"] == 5)
    assert any("blip_caption" in t and "img_url" not in t for t in turns)


def test_a_repeated_sample_id_is_refused(tmp_path):
    # Before, both loaded: their question ids collided and a run kept the first conversation, skipping the other.
    path = _write(tmp_path, [_sample("c1"), _sample("c2"), _sample("c1")])
    with pytest.raises(DatasetError, match=r"locomo10\.json: \[2\]: sample_id 'c1' repeats \[0\]'s"):
        load_locomo(path)


def test_a_question_without_an_answer_loads_and_is_named(tmp_path, caplog):
    # its retrieval is measured; its answer cannot be scored, which the log now says instead of nothing
    qa = [{"question": "q?", "evidence": ["D1:1"], "category": 4}]
    with caplog.at_level(logging.WARNING, logger=locomo_module.__name__):
        [s] = load_locomo(_write(tmp_path, [_sample(qa=qa)]))
    assert s.questions[0].gold is None
    assert "qa[0]: no 'answer': the question's answer is not scored" in caplog.text


def test_a_turn_whose_dia_id_does_not_parse_can_still_be_cited(tmp_path):
    # the turn keeps "D1x" as its id; evidence citing "D1x" was dropped as matching no turn
    sample = _sample(qa=[_qa(["D1x", "D1:1"])])
    sample["conversation"]["session_1"][1]["dia_id"] = "D1x"
    [s] = load_locomo(_write(tmp_path, [sample]))
    assert [t.source_id for t in s.turns][:2] == ["D1:1", "D1x"]
    assert s.questions[0].evidence == ("D1x", "D1:1")
