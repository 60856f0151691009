"""Tests for temporal normalisation: date expressions, timestamps, question windows."""
import datetime as dt
import re

import numpy as np
import pytest

from magma_torch.text import temporal
from magma_torch.text.temporal import (
    ResolvedDate,
    parse_timestamp,
    question_time_window,
    resolve_dates,
)

MON = dt.datetime(2023, 5, 8, 13, 56)  # the LoCoMo "1:56 pm on 8 May, 2023" session
FRI = dt.datetime(2023, 5, 12, 9, 0)
SAT = dt.datetime(2023, 5, 13, 9, 0)
SUN = dt.datetime(2023, 5, 14, 21, 0)
MAR = dt.datetime(2023, 3, 15, 12, 0)  # a Wednesday, before May
JUN = dt.datetime(2023, 6, 20, 12, 0)
SEP = dt.datetime(2023, 9, 10, 12, 0)
DEC = dt.datetime(2023, 12, 27, 12, 0)
JAN = dt.datetime(2023, 1, 10, 12, 0)


def d(iso: str) -> dt.date:
    return dt.date.fromisoformat(iso)


# (sentence, reference, expected start, expected end, granularity)
CASES = [
    ("I went there yesterday.", MON, "2023-05-07", "2023-05-07", "day"),
    ("I'm at the park today.", MON, "2023-05-08", "2023-05-08", "day"),
    ("We're meeting tomorrow.", MON, "2023-05-09", "2023-05-09", "day"),
    ("I couldn't sleep last night.", MON, "2023-05-07", "2023-05-07", "day"),
    ("I ran this morning.", MON, "2023-05-08", "2023-05-08", "day"),
    ("It rained the day before yesterday.", MON, "2023-05-06", "2023-05-06", "day"),
    ("We met last Friday.", MON, "2023-05-05", "2023-05-05", "day"),
    ("We met last Friday.", FRI, "2023-05-05", "2023-05-05", "day"),
    ("We met last Friday.", SAT, "2023-05-12", "2023-05-12", "day"),
    ("We met last Friday.", SUN, "2023-05-12", "2023-05-12", "day"),
    ("I went to a concert on Friday.", MON, "2023-05-05", "2023-05-05", "day"),
    ("I'll call you on Friday.", MON, "2023-05-12", "2023-05-12", "day"),
    ("Are you free this Saturday?", MON, "2023-05-13", "2023-05-13", "day"),
    ("Let's talk next Monday.", MON, "2023-05-15", "2023-05-15", "day"),
    ("Let's talk next Monday.", FRI, "2023-05-15", "2023-05-15", "day"),
    ("Last week was busy.", MON, "2023-05-01", "2023-05-07", "week"),
    ("Last week was busy.", SUN, "2023-05-01", "2023-05-07", "week"),
    ("This week has been hard.", FRI, "2023-05-08", "2023-05-14", "week"),
    ("I start the job next week.", MON, "2023-05-15", "2023-05-21", "week"),
    ("I went camping last weekend.", MON, "2023-05-06", "2023-05-07", "week"),
    ("I went camping last weekend.", SUN, "2023-05-06", "2023-05-07", "week"),
    ("That roadtrip this past weekend was insane!", MON, "2023-05-06", "2023-05-07", "week"),
    # one year for a range of months: before, only the second month was found ("between" is no month cue)
    ("What did she paint between March and August 2023?", MON, "2023-03-01", "2023-08-31", "month"),
    ("From November to February 2024 it snowed.", MON, "2023-11-01", "2024-02-29", "month"),
    ("I'm going hiking this weekend.", MON, "2023-05-13", "2023-05-14", "week"),
    ("We painted over the weekend.", MON, "2023-05-06", "2023-05-07", "week"),
    ("I went to a pride parade two weekends ago.", MON, "2023-04-29", "2023-04-30", "week"),
    ("The weekend before, I rested.", MON, "2023-05-06", "2023-05-07", "week"),
    ("The week before last was rough.", MON, "2023-04-24", "2023-04-30", "week"),
    ("I saw her a few days ago.", MON, "2023-05-04", "2023-05-06", "day"),
    ("I adopted a cat 3 days ago.", MON, "2023-05-05", "2023-05-05", "day"),
    ("I'll go in 3 days.", MON, "2023-05-11", "2023-05-11", "day"),
    ("I signed up two weeks ago.", MON, "2023-04-24", "2023-04-30", "week"),
    ("I moved a week ago.", MON, "2023-05-01", "2023-05-07", "week"),
    ("It's been crazy the past few days.", MON, "2023-05-04", "2023-05-08", "day"),
    ("I joined a club last month.", MON, "2023-04-01", "2023-04-30", "month"),
    ("I joined a club last month.", MAR, "2023-02-01", "2023-02-28", "month"),
    ("I joined a club last month.", JAN, "2022-12-01", "2022-12-31", "month"),
    ("We move next month.", MON, "2023-06-01", "2023-06-30", "month"),
    ("I got it a month ago.", MON, "2023-04-01", "2023-04-30", "month"),
    ("I'll finish it later this month.", MON, "2023-05-08", "2023-05-31", "month"),
    ("I graduated last year.", MON, "2022-01-01", "2022-12-31", "year"),
    ("We marry next year.", MON, "2024-01-01", "2024-12-31", "year"),
    ("I met him three years ago.", MON, "2020-01-01", "2020-12-31", "year"),
    ("We moved here a couple of years ago.", MON, "2021-01-01", "2021-12-31", "year"),
    ("We met fifteen years ago.", MON, "2008-01-01", "2008-12-31", "year"),
    ("We met twenty-five years ago.", MON, "1998-01-01", "1998-12-31", "year"),
    ("We met a dozen years ago.", MON, "2011-01-01", "2011-12-31", "year"),
    ("I started painting earlier this year.", MON, "2023-01-01", "2023-05-08", "year"),
    ("We went to the beach in May.", MON, "2023-05-01", "2023-05-31", "month"),
    ("We went to the beach in May.", MAR, "2022-05-01", "2022-05-31", "month"),
    ("I'll visit them in May.", MAR, "2023-05-01", "2023-05-31", "month"),
    ("I ran a marathon last May.", MON, "2022-05-01", "2022-05-31", "month"),
    ("I ran a marathon last May.", JUN, "2023-05-01", "2023-05-31", "month"),
    ("It opened in mid-June.", MON, "2022-06-01", "2022-06-30", "month"),
    ("I moved there in 2022.", MON, "2022-01-01", "2022-12-31", "year"),
    ("In 2015 we moved.", MON, "2015-01-01", "2015-12-31", "year"),
    ("I lived there from 2019 to 2020.", MON, "2019-01-01", "2019-12-31", "year"),
    ("The show was in May 2023.", JUN, "2023-05-01", "2023-05-31", "month"),
    ("May 2023 was a good month.", JUN, "2023-05-01", "2023-05-31", "month"),
    ("It happened on 8 May 2023.", JUN, "2023-05-08", "2023-05-08", "day"),
    ("It happened on May 8, 2023.", JUN, "2023-05-08", "2023-05-08", "day"),
    ("It happened on Monday, May 8, 2023.", JUN, "2023-05-08", "2023-05-08", "day"),
    ("The deadline was 2023-05-01.", JUN, "2023-05-01", "2023-05-01", "day"),
    ("I met her on the 5th of June.", MON, "2022-06-05", "2022-06-05", "day"),
    ("I'll be there on the 5th of June.", MON, "2023-06-05", "2023-06-05", "day"),
    ("I'll see you on Feb 29.", dt.datetime(2023, 3, 1), "2024-02-29", "2024-02-29", "day"),
    ("We went to the lake last summer.", MON, "2022-06-01", "2022-08-31", "season"),
    ("We went to the lake last summer.", SEP, "2023-06-01", "2023-08-31", "season"),
    ("It snowed a lot last winter.", MON, "2022-12-01", "2023-02-28", "season"),
    ("We went to the lake this past summer.", SEP, "2023-06-01", "2023-08-31", "season"),
    ("We travelled in the summer of 2021.", MON, "2021-06-01", "2021-08-31", "season"),
    ("The fall of 2021 was hard.", MON, "2021-09-01", "2021-11-30", "season"),
    ("We moved in the fall.", MON, "2022-09-01", "2022-11-30", "season"),
    ("It opened at the end of June.", MON, "2022-06-01", "2022-06-30", "month"),
    ("We met in the second week of November.", MON, "2022-11-01", "2022-11-30", "month"),
    ("I got a guitar last Christmas.", MON, "2022-12-25", "2022-12-25", "day"),
    ("I got a guitar last Christmas.", DEC, "2023-12-25", "2023-12-25", "day"),
    ("We cooked for Thanksgiving.", MON, "2022-11-24", "2022-11-24", "day"),
    ("We partied on New Year\u2019s Eve.", MON, "2022-12-31", "2022-12-31", "day"),
]

MAR24 = dt.datetime(2024, 3, 6, 10, 0)
AUG = dt.datetime(2023, 8, 19, 15, 0)
# Bare yearly names follow the tense of their sentence: plans forward, past tense back.
TENSE_CASES = [
    ("I'm training for the Berlin half marathon in September.", MAR24, "2024-09-01", "2024-09-30", "month"),
    ("The Berlin half marathon in September is my big goal.", MAR24, "2024-09-01", "2024-09-30", "month"),
    ("We're planning the launch in September.", AUG, "2023-09-01", "2023-09-30", "month"),
    ("The launch in September will be huge.", AUG, "2023-09-01", "2023-09-30", "month"),
    ("The app launched in September.", AUG, "2022-09-01", "2022-09-30", "month"),
    ("I booked a trip to Lisbon in October.", AUG, "2023-10-01", "2023-10-31", "month"),
    ("We signed up for a pottery class in November.", AUG, "2023-11-01", "2023-11-30", "month"),
    ("I'm getting married in June!", MAR24, "2024-06-01", "2024-06-30", "month"),
    ("My sister's wedding is in April.", MAR24, "2024-04-01", "2024-04-30", "month"),
    ("My sister's wedding is on April 20.", MAR24, "2024-04-20", "2024-04-20", "day"),
    ("I'm so excited about the concert in December.", AUG, "2023-12-01", "2023-12-31", "month"),
    ("I hope to finish the novel by November.", AUG, "2023-11-01", "2023-11-30", "month"),
    ("We visited my grandma in July.", AUG, "2023-07-01", "2023-07-31", "month"),
    ("We visited my grandma in July.", MAR24, "2023-07-01", "2023-07-31", "month"),
    ("My dog was born in October.", MAR24, "2023-10-01", "2023-10-31", "month"),
    ("It rained the whole time we were in Spain in April.", AUG, "2023-04-01", "2023-04-30", "month"),
    ("It is amazing how much we did in July.", AUG, "2023-07-01", "2023-07-31", "month"),
    ("I'm missing the beach trip we took in July.", AUG, "2023-07-01", "2023-07-31", "month"),
    ("I'm running the half in September, I trained so hard.", MAR24, "2024-09-01", "2024-09-30", "month"),
    ("I'm loving the photos from Friday.", MON, "2023-05-05", "2023-05-05", "day"),
    ("I've been sober since February.", AUG, "2023-02-01", "2023-02-28", "month"),
    ("I've been learning guitar since January.", MAR24, "2024-01-01", "2024-01-31", "month"),
    ("We adopted the kittens in January.", MAR24, "2024-01-01", "2024-01-31", "month"),
    ("We'll spend Christmas with my parents.", AUG, "2023-12-25", "2023-12-25", "day"),
    ("We spent Christmas with my parents.", AUG, "2022-12-25", "2022-12-25", "day"),
    ("Our anniversary is at Halloween.", AUG, "2023-10-31", "2023-10-31", "day"),
    ("We're going to Japan in the spring.", AUG, "2024-03-01", "2024-05-31", "season"),
    ("We went to Japan in the spring.", AUG, "2023-03-01", "2023-05-31", "season"),
]


@pytest.mark.parametrize(("sentence", "reference", "start", "end", "granularity"), CASES + TENSE_CASES)
def test_resolve_dates_table(sentence, reference, start, end, granularity):
    found = resolve_dates(sentence, reference)
    assert [(r.start, r.end, r.granularity) for r in found] == [(d(start), d(end), granularity)]
    assert found[0].expression in sentence


def test_expression_keeps_original_text_and_order():
    text = "Yesterday I booked flights for 8 May 2023 and we fly back next Monday."
    found = resolve_dates(text, dt.datetime(2023, 4, 20))
    assert [r.expression for r in found] == ["Yesterday", "8 May 2023", "next Monday"]
    assert [r.label() for r in found] == ["2023-04-19", "2023-05-08", "2023-04-24"]


def test_tense_is_read_per_sentence():
    found = resolve_dates("I went camping in August. Next I'm hiking in October.", AUG)
    assert [r.label() for r in found] == ["2023-08", "2023-10"]


@pytest.mark.parametrize(("text", "label"), [
    ("We visited St. Louis in June.", "2023-06"),
    ("We went to the U.S. in June.", "2023-06"),
    ("We met Dr. Lee in June.", "2023-06"),
    ("I'll fly to Washington D.C. on Sept. 10.", "2023-09-10"),
    ("We ate pizza, e.g. margherita, in June.", "2023-06"),
])
def test_abbreviation_periods_do_not_end_the_sentence(text, label):
    # Split there, the date's clause loses its verb and its tense.
    assert [r.label() for r in resolve_dates(text, AUG)] == [label]


def test_pronoun_i_still_ends_a_sentence():
    assert [r.label() for r in resolve_dates("She will come, and so will I. We met on Friday.", AUG)] == ["2023-08-18"]


def test_tense_is_read_once_per_sentence(monkeypatch):
    # Reading it again for every expression made long texts quadratic.
    sentences = []
    monkeypatch.setattr(temporal, "_tense", lambda sentence: sentences.append(sentence) or "past")
    found = resolve_dates("I ran on Monday and on Friday, yesterday and today. I rest on Sunday.", MON)
    assert len(found) == 5
    assert sentences == ["I ran on Monday and on Friday, yesterday and today", "I rest on Sunday."]


def test_longest_expression_wins_overlaps():
    assert [r.expression for r in resolve_dates("It was in May 2023.", JUN)] == ["in May 2023"]


@pytest.mark.parametrize(("resolved", "label"), [
    (ResolvedDate("yesterday", d("2023-05-07"), d("2023-05-07"), "day"), "2023-05-07"),
    (ResolvedDate("last month", d("2023-04-01"), d("2023-04-30"), "month"), "2023-04"),
    (ResolvedDate("last year", d("2022-01-01"), d("2022-12-31"), "year"), "2022"),
    (ResolvedDate("last week", d("2023-05-01"), d("2023-05-07"), "week"), "2023-05-01..2023-05-07"),
    (ResolvedDate("earlier this year", d("2023-01-01"), d("2023-05-08"), "year"), "2023-01-01..2023-05-08"),
])
def test_label(resolved, label):
    assert resolved.label() == label


@pytest.mark.parametrize("sentence", [
    "You may want to try it",
    "I was second in the race",
    "Hey Mel! Good to see you! How have you been?",
    "I sat down and had a nap.",
    "Now that's what I call art!",
    "I have 3 dogs and 2 cats.",
    "I stayed 2 days at the lake.",
    "Summer camp was so much fun.",
    "I fall asleep easily.",
    "She will march in the parade.",
    "June is my best friend.",
    "I took a photo of June and her dog.",
    "I recovered after the fall.",
    "We watched the fall of the Berlin wall documentary.",
    "Have a nice day!",
    "I scored 10/10 on the quiz.",
    "Those were the best days of my life.",
    "We go to church on Sundays.",
    "I go to yoga every Friday.",
    "Each Saturday we hike.",
    "Good Friday was lovely.",
    "What was the last book you read?",
    "I burned around 2000 calories.",
    "A crowd of 2000 people came.",
])
def test_no_false_positives(sentence):
    assert resolve_dates(sentence, MON) == []


@pytest.mark.parametrize("text", [
    "", " ", "31 February 2023", "99/99/9999", "9999 years from now", "999 years ago",
    "last year", "\x00\ufffd", "May " * 500, "in 2022 " * 200,
])
@pytest.mark.parametrize("reference", [MON, dt.datetime(1, 1, 1), dt.datetime(9999, 12, 31)])
def test_resolve_dates_never_raises(text, reference):
    assert isinstance(resolve_dates(text, reference), list)


def test_sentences_without_cues_skip_dateparser(monkeypatch):
    def fail(*args, **kwargs):
        raise AssertionError("dateparser called")

    monkeypatch.setattr(temporal, "_dateparser_parse", fail)
    assert resolve_dates("Hey Mel! Good to see you! How have you been?", MON) == []
    assert resolve_dates("We went camping last weekend.", MON)[0].label() == "2023-05-06..2023-05-07"


@pytest.mark.parametrize(("value", "expected"), [
    ("1:56 pm on 8 May, 2023", dt.datetime(2023, 5, 8, 13, 56)),
    ("10:04 am on 19 June, 2023", dt.datetime(2023, 6, 19, 10, 4)),
    ("12:09 am on 1 January, 2024", dt.datetime(2024, 1, 1, 0, 9)),
    ("2023/12/18 (Mon) 04:17", dt.datetime(2023, 12, 18, 4, 17)),
    ("2023-05-08", dt.datetime(2023, 5, 8)),
    ("2023-05-08T13:56:00", dt.datetime(2023, 5, 8, 13, 56)),
    ("2023-05-08T13:56:00+02:00", dt.datetime(2023, 5, 8, 13, 56)),
    ("2023-05-08 13:56:00Z", dt.datetime(2023, 5, 8, 13, 56)),
    ("May 8, 2023 1:56 PM", dt.datetime(2023, 5, 8, 13, 56)),
    (1683554160, dt.datetime(2023, 5, 8, 13, 56)),
    (1683554160.0, dt.datetime(2023, 5, 8, 13, 56)),
    (1683554160000, dt.datetime(2023, 5, 8, 13, 56)),
    (np.int64(1683554160), dt.datetime(2023, 5, 8, 13, 56)),         # as pandas/NumPy columns hold them
    (np.float64(1683554160), dt.datetime(2023, 5, 8, 13, 56)),
    (np.datetime64("2023-05-08T13:56"), dt.datetime(2023, 5, 8, 13, 56)),
    ("1683554160", dt.datetime(2023, 5, 8, 13, 56)),
    (dt.date(2023, 5, 8), dt.datetime(2023, 5, 8)),
    (dt.datetime(2023, 5, 8, 13, 56, tzinfo=dt.timezone.utc), dt.datetime(2023, 5, 8, 13, 56)),
])
def test_parse_timestamp(value, expected):
    assert parse_timestamp(value) == expected


@pytest.mark.parametrize("value", [
    None, "", "   ", "not a date", "yesterday", "2023-13-45", float("nan"), True, [], 1e30,
    np.bool_(True), np.datetime64("NaT"),
    "2023", "1999",                          # a year, not 33 minutes past 1970
    "2023-13-01", "2023/13/01 10:00",        # not 13 January: no swapping month and day
])
def test_parse_timestamp_rejects_bad_values(value):
    with pytest.raises(ValueError, match=re.escape(repr(value))):
        parse_timestamp(value)


def window(start: str, end: str) -> tuple[dt.datetime, dt.datetime]:
    return (dt.datetime.combine(d(start), dt.time()), dt.datetime.combine(d(end), dt.time.max))


@pytest.mark.parametrize(("question", "reference", "expected"), [
    ("What did she do last May?", MON, window("2022-05-01", "2022-05-31")),
    ("What did Caroline do in 2022?", None, window("2022-01-01", "2022-12-31")),
    ("What did Caroline do in 2022?", MON, window("2022-01-01", "2022-12-31")),
    ("Where did they go in June 2023?", None, window("2023-06-01", "2023-06-30")),
    ("What did he eat yesterday?", MON, window("2023-05-07", "2023-05-07")),
    ("What happened between May 2023 and June 2023?", None, window("2023-05-01", "2023-06-30")),
    ("What did he eat yesterday?", None, None),
    ("When did Melanie paint a sunrise?", MON, None),
    ("How many days ago did she start?", MON, None),
])
def test_question_time_window(question, reference, expected):
    assert question_time_window(question, reference) == expected
