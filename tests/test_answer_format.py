"""The reader's answer text as scored: ISO dates spelled out as the answer prompts ask."""
import pytest

from magma_torch.eval.datasets.base import Question
from magma_torch.eval.qa import answer_questions, score_answer
from magma_torch.llm.answer_format import format_answer, spell_out_dates
from magma_torch.llm.base import Generation


@pytest.mark.parametrize("text, expected", [
    ("2023-05-07", "7 May 2023"),
    ("On 2023-07-02, and again in 2023-07.", "On 2 July 2023, and again in July 2023."),
    ("2024-02-29", "29 February 2024"),                       # a leap day
    ("2023-02-29", "2023-02-29"),                             # no such day: left
    ("2023-13-01", "2023-13-01"),                             # no such month: left
    ("0000-05-07", "0000-05-07"),                             # no year 0: left (before: "7 May 0")
    ("call 555-1234", "call 555-1234"),
    ("order 2023-05-07-12", "order 2023-05-07-12"),           # part of a longer number
    ("7 May 2023", "7 May 2023"),
    # before, each of these was spelled out as a month: "the November 2010 season", "pages December 1204"
    ("the 2010-11 season", "the 2010-11 season"), ("in the 2008-09 school year", "in the 2008-09 school year"),
    ("pages 1204-12", "pages 1204-12"), ("score 1000-10", "score 1000-10"), ("part A1234-10", "part A1234-10"),
    ("3.1415-9", "3.1415-9"), ("2023-05-07T10:00", "2023-05-07T10:00"), ("2023-05-07/08", "2023-05-07/08"),
    ("(2023-05-07).", "(7 May 2023)."), ("2023-5", "2023-5"),
])
def test_iso_dates_are_spelled_out_and_nothing_else_changes(text, expected):
    assert spell_out_dates(text) == expected


class ISOReader:
    def generate(self, prompts, **kw):
        return [Generation("2023-05-07", None, 10, 3) for _ in prompts]


class R:
    context, intent = "[7 May 2023] (D1:1) Jo: I ran a charity race today.", "WHEN"


def test_the_answer_keeps_the_readers_text_and_scores_the_formatted_one():
    qs = [Question("s/q0", "When did Jo run the race?", "7 May 2023", ("D1:1",), "temporal", None)]
    a = answer_questions([R()], qs, ISOReader())[0]
    assert (a.prediction, a.reader_text) == ("7 May 2023", "2023-05-07")
    assert score_answer(a.prediction, "7 May 2023", "temporal")["f1"] == 1.0
    assert score_answer(a.reader_text, "7 May 2023", "temporal")["f1"] == 0.0
    kept = answer_questions([R()], qs, ISOReader(), dates="as_written")[0]
    assert kept.prediction == kept.reader_text == "2023-05-07"


def test_an_unknown_date_style_fails_before_the_reader_runs():
    class Never:
        def generate(self, prompts, **kw):
            raise AssertionError("the reader ran")
    with pytest.raises(ValueError, match=r"unknown answer date style 'iso' \(dates, task\.answer_dates; known: "):
        answer_questions([R()], [Question("s/q0", "When?", "x", (), "temporal", None)], Never(), dates="iso")
    assert format_answer("2023-05-07", "as_written") == "2023-05-07"


def test_the_facade_answers_with_the_same_date_style():
    from magma_torch import MagmaMemory
    with MagmaMemory(consolidation="none", device="cpu") as mem:
        mem.add("I ran a charity race today.", "2023-05-07 10:00", speaker="Jo")
        assert mem.answer("When did Jo run the race?", ISOReader())[0] == "7 May 2023"
        assert mem.answer("When did Jo run the race?", ISOReader(), dates="as_written")[0] == "2023-05-07"
