"""Temporal normalisation: turn timestamps and date expressions into calendar dates.

Every ingested turn carries a timestamp; relative expressions in it ("yesterday",
"two weekends ago", "in May") are resolved against that timestamp so event nodes can
carry absolute dates and the linearised context can show them.

Design choices:

* A compiled cue gate runs first. Most conversational turns contain no temporal cue
  word, month name or year and are rejected in about a microsecond.
* Absolute dates ("8 May 2023", "the 5th of June", "2023-05-08", "5/8/2023") are
  parsed by dateparser, which knows the many spellings. It only ever sees spans
  that a rule already located: ``search_dates`` on whole sentences returns
  false positives on ordinary words ("may", "we", "second") and costs ~1 ms.
* Relative expressions go through a small rule table. dateparser resolves them
  to a single instant ("last month" -> the same day a month ago), while memory
  retrieval needs the calendar period (all of April), and it misses weekends,
  seasons, holidays and fuzzy counts ("a few days ago") altogether.

Conventions: weeks run Monday..Sunday; "last X" is the most recent X strictly
before the reference and "next X" the first one strictly after it; a weekend is
Saturday..Sunday of its week; seasons are northern meteorological (winter =
December..February, named by its December). Tense is read per sentence. A bare
weekday ("on Friday") points to the past unless the sentence reads as future tense; a
bare yearly name or a date without a year ("in September", "at Christmas", "on April 20")
points to the past in a past-tense sentence and otherwise to the next one, since plans
are what people date that way.
"""
from __future__ import annotations

import bisect
import calendar
import datetime as dt
import functools
import math
import numbers
import re
from dataclasses import dataclass
from typing import Callable

import numpy as np
from dateparser import parse as _dateparser_parse
from dateutil.relativedelta import relativedelta

__all__ = ["ResolvedDate", "parse_timestamp", "resolve_dates", "question_time_window"]


@dataclass(frozen=True)
class ResolvedDate:
    """A date expression found in text and the inclusive calendar range it denotes."""

    expression: str
    start: dt.date
    end: dt.date
    granularity: str  # "day" | "week" | "month" | "season" | "year"

    def label(self) -> str:
        """Compact form for the linearised context: 2023-05-07, 2023-05, 2023 or a range."""
        if self.start == self.end:
            return self.start.isoformat()
        if self.granularity == "month" and self.start.day == 1 and self.end == _month_end(self.start):
            return self.start.strftime("%Y-%m")
        if (self.granularity == "year" and (self.start.month, self.start.day) == (1, 1)
                and (self.end.month, self.end.day) == (12, 31) and self.start.year == self.end.year):
            return str(self.start.year)
        return f"{self.start.isoformat()}..{self.end.isoformat()}"


# ---------------------------------------------------------------------------
# Timestamps

_LOCOMO_RE = re.compile(r"^\s*(\d{1,2}:\d{2}\s*[ap]m)\s+on\s+(\d{1,2}\s+[a-z]+),?\s+(\d{4})\s*$", re.I)
_EPOCH_RE = re.compile(r"-?(\d+)(\.\d+)?")
_MIN_EPOCH_DIGITS = 9  # 100000000 s is March 1973; shorter digit strings are years or typos, not times
_YEAR_MONTH_DAY_RE = re.compile(r"(\d{4})[-/](\d{1,2})[-/](\d{1,2})\b")
_WEEKDAY_IN_PARENS_RE = re.compile(r"\s*\([A-Za-z]{3,9}\)\s*")
_TIMESTAMP_SETTINGS = {
    "PARSERS": ["absolute-time"],  # relative words must not resolve against "now"
    "REQUIRE_PARTS": ["day", "month", "year"],
    "RETURN_AS_TIMEZONE_AWARE": False,
}


def parse_timestamp(value) -> dt.datetime:
    """Turn a dataset timestamp into a naive wall-clock datetime.

    Accepts datetime, date, NumPy datetime64, epoch seconds (or milliseconds; any real number,
    NumPy's too, or a string of 9 or more digits), ISO strings, LoCoMo "1:56 pm on 8 May, 2023" and LongMemEval
    "2023/12/18 (Mon) 04:17". Timezone
    offsets are dropped, keeping the speaker's wall clock, because that is what
    "yesterday" is relative to. Raises ValueError naming the value otherwise.
    """
    if isinstance(value, np.datetime64) and not np.isnat(value):
        value = value.astype("datetime64[us]").item()     # a datetime (naive, as datetime64 is)
    if isinstance(value, dt.datetime):
        return value.replace(tzinfo=None)
    if isinstance(value, dt.date):
        return dt.datetime.combine(value, dt.time())
    if isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_)):
        return _from_epoch(float(value))
    if isinstance(value, str) and value.strip():
        parsed = _parse_timestamp_str(value.strip())
        if parsed is not None:
            return parsed
    raise ValueError(f"cannot parse timestamp {value!r}")


def _from_epoch(value: float) -> dt.datetime:
    if not math.isfinite(value):
        raise ValueError(f"cannot parse timestamp {value!r}")
    seconds = value / 1000 if abs(value) >= 1e11 else value  # 1e11 s is year 5138: must be ms
    try:
        return dt.datetime.fromtimestamp(seconds, dt.timezone.utc).replace(tzinfo=None)
    except (OverflowError, OSError, ValueError) as exc:
        raise ValueError(f"cannot parse timestamp {value!r}") from exc


def _parse_timestamp_str(text: str) -> dt.datetime | None:
    try:
        return dt.datetime.fromisoformat(text).replace(tzinfo=None)
    except ValueError:
        pass
    locomo = _LOCOMO_RE.match(text)
    if locomo:
        joined = " ".join(locomo.groups()).upper().replace(" ", "")  # 1:56PM8MAY2023
        for fmt in ("%I:%M%p%d%B%Y", "%I:%M%p%d%b%Y"):
            try:
                return dt.datetime.strptime(joined, fmt)
            except ValueError:
                continue
    try:
        return dt.datetime.strptime(_WEEKDAY_IN_PARENS_RE.sub(" ", text).strip(), "%Y/%m/%d %H:%M")
    except ValueError:
        pass
    epoch = _EPOCH_RE.fullmatch(text)
    if epoch:
        return _from_epoch(float(text)) if len(epoch.group(1)) >= _MIN_EPOCH_DIGITS else None
    year_month_day = _YEAR_MONTH_DAY_RE.match(text)
    if year_month_day:
        try:
            dt.date(*map(int, year_month_day.groups()))
        except ValueError:
            return None  # dateparser would swap month and day: "2023-13-01" -> 13 January
    return _dateparser_parse(text, languages=["en"], settings=_TIMESTAMP_SETTINGS)


# ---------------------------------------------------------------------------
# Calendar helpers

def _month_end(day: dt.date) -> dt.date:
    return day.replace(day=1) + relativedelta(months=1, days=-1)


def _day(ref: dt.date, shift: int) -> tuple[dt.date, dt.date]:
    day = ref + dt.timedelta(days=shift)
    return day, day


def _week(ref: dt.date, shift: int) -> tuple[dt.date, dt.date]:
    monday = ref - dt.timedelta(days=ref.weekday()) + dt.timedelta(weeks=shift)
    return monday, monday + dt.timedelta(days=6)


def _weekend(ref: dt.date, shift: int) -> tuple[dt.date, dt.date]:
    monday, sunday = _week(ref, shift)
    return monday + dt.timedelta(days=5), sunday


def _month(ref: dt.date, shift: int) -> tuple[dt.date, dt.date]:
    first = ref.replace(day=1) + relativedelta(months=shift)
    return first, _month_end(first)


def _year(ref: dt.date, shift: int) -> tuple[dt.date, dt.date]:
    return dt.date(ref.year + shift, 1, 1), dt.date(ref.year + shift, 12, 31)


_PERIODS: dict[str, Callable[[dt.date, int], tuple[dt.date, dt.date]]] = {
    "day": _day, "week": _week, "weekend": _weekend, "month": _month, "year": _year,
}
# A weekend is located by its week, so it reports week granularity.
_GRANULARITY = {"day": "day", "week": "week", "weekend": "week", "month": "month", "year": "year"}

_SEASON_MONTHS = {"spring": 3, "summer": 6, "fall": 9, "autumn": 9, "winter": 12}


def _season(name: str, year: int) -> tuple[dt.date, dt.date]:
    first = dt.date(year, _SEASON_MONTHS[name], 1)
    return first, _month_end(first + relativedelta(months=2))


def _fourth_thursday_of_november(year: int) -> dt.date:
    first = dt.date(year, 11, 1)
    return first + dt.timedelta(days=(3 - first.weekday()) % 7 + 21)


_HOLIDAYS: dict[str, Callable[[int], dt.date]] = {
    "christmas eve": lambda y: dt.date(y, 12, 24),
    "christmas": lambda y: dt.date(y, 12, 25),
    "new year's eve": lambda y: dt.date(y, 12, 31),
    "new year's day": lambda y: dt.date(y, 1, 1),
    "new year": lambda y: dt.date(y, 1, 1),
    "halloween": lambda y: dt.date(y, 10, 31),
    "valentine's day": lambda y: dt.date(y, 2, 14),
    "thanksgiving": _fourth_thursday_of_november,
}


def _pick(instance: Callable[[int], tuple[dt.date, dt.date]], ref: dt.date, mode: str):
    """Choose the yearly recurring period (a month, season, holiday) that `mode` names.

    last: latest one over before ref; next: first one starting after ref;
    this: the one containing ref, else the one starting in ref's year;
    past / future: latest started by ref / first not yet over at ref.
    """
    spans = [instance(year) for year in range(ref.year - 2, ref.year + 3)]
    if mode == "last":
        return max(s for s in spans if s[1] < ref)
    if mode == "next":
        return min(s for s in spans if s[0] > ref)
    if mode == "this":
        return next((s for s in spans if s[0] <= ref <= s[1]), instance(ref.year))
    if mode == "past":
        return max(s for s in spans if s[0] <= ref)
    return min(s for s in spans if s[1] >= ref)


# ---------------------------------------------------------------------------
# Vocabulary

_WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_MONTHS = ("january", "february", "march", "april", "may", "june", "july", "august",
           "september", "october", "november", "december")
_MONTH_ABBR = r"jan|feb|mar|apr|jun|jul|aug|sept?|oct|nov|dec"
_WEEKDAY_RE = "|".join(_WEEKDAYS)
_MONTH_RE = "|".join(_MONTHS)
_ANY_MONTH_RE = rf"(?:{_MONTH_RE}|{_MONTH_ABBR})\.?"
_YEAR_RE = r"(?:19|20)\d\d"
_DAY_RE = r"(?:[12]\d|3[01]|0?[1-9])(?:st|nd|rd|th)?"
_HOLIDAY_RE = (r"christmas\s+eve|christmas|new\s+year's\s+eve|new\s+year's\s+day|new\s+year|halloween"
               r"|valentine's\s+day|thanksgiving")
_UNIT_RE = r"day|week|weekend|month|year"
# Only after one of these is "of <month>" a date ("the end of June", not "a photo of June").
_PART_OF_MONTH_RE = rf"(?:beginning|start|middle|end|rest|half|{_UNIT_RE})s?"
# Verbs of liking in the progressive state a feeling, never a plan ("I'm loving the photos").
_STATIVE_ING = ("loving", "liking", "hating")
# Their period does not end a sentence ("We met Dr. Lee in June."); matched case-insensitively.
ABBREVIATIONS = ("mr", "mrs", "ms", "dr", "prof", "st", "mt", "jr", "sr", "vs", "e.g", "i.e")

# After a year, a lowercase word outside this list makes it a count: "around 2000 calories", "of 2000 people".
_WORDS_AFTER_A_YEAR = ("and", "or", "to", "through", "until", "till", "when", "while", "where", "after", "before",
                       "because", "but", "so", "as", "at", "in", "on", "for", "with", "that", "the", "a", "an",
                       "my", "our", "his", "her", "their", "we", "you", "he", "she", "they", "it", "was", "were",
                       "is", "has", "had", "spring", "summer", "fall", "autumn", "winter", *_MONTHS)

_ONES = ("one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve",
         "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen")
_TENS = ("twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety")
_NUMBER_WORDS = {"a": 1, "an": 1, "dozen": 12, **{w: n for n, w in enumerate(_ONES, 1)},
                 **{w: 10 * n for n, w in enumerate(_TENS, 2)}}
# Fuzzy counts resolve to a range of offsets rather than a guess at one value.
_FUZZY_COUNTS = {"couple": (2, 2), "few": (2, 4), "several": (3, 7)}
_COUNT_RE = (r"(?:(?:a\s+)?couple(?:\s+of)?|(?:a\s+)?few|several|(?:a\s+)?dozen|\d{1,3}"
             rf"|(?:{'|'.join(_TENS)})[-\s](?:{'|'.join(_ONES[:9])})|"       # twenty-five, twenty five
             + "|".join(sorted(_NUMBER_WORDS, key=len, reverse=True)) + ")")
# "this past weekend" is "last weekend".
_MODIFIER_RE = r"last|this\s+past|this|next|previous"

# Cheap pre-check: every rule below needs one of these, so text without them is skipped.
_GATE = re.compile(
    r"\b(?:today|tonight|tomorrow|yesterday|ago|days?|weeks?|weekends?|months?|years?|night|morning"
    rf"|afternoon|evening|{_WEEKDAY_RE}|{_MONTH_RE}|{_MONTH_ABBR}|spring|summer|fall|autumn|winter"
    r"|christmas|new\s+year|halloween|valentine|thanksgiving)\b|(?:19|20)\d\d|\d[/-]\d",
    re.I,
)
# Plans and bookings.
_FUTURE_CUE = re.compile(
    r"\b(?:will|won't|shall|gonna|(?:am|is|are|i'm|we're|you're|they're|he's|she's)\s+going\s+to"
    r"|plan(?:ning|s)?\s+(?:to|for|on)|planning|about\s+to|can't\s+wait|looking\s+forward|upcoming"
    r"|coming\s+up|hop(?:e|ing)\s+to|want\s+to|would\s+like\s+to|intend\s+to|aim(?:ing)?\s+to"
    r"|training\s+for|preparing\s+for|signed\s+up|registered|booked|scheduled)\b|\w'll\b",
    re.I,
)
# The progressive-for-future ("I'm running the half in September"); never with a stative verb.
_PROGRESSIVE = re.compile(
    rf"\b(?:i'm|we're|you're|they're|he's|she's|am|are|is)\s+"
    rf"(?!(?:{'|'.join(_STATIVE_ING)})\b)\w+ing\b(?!\s+to\b)",
    re.I,
)
# Past tense: auxiliaries, common irregular verbs and regular "-ed" forms (not "-eed": need, feed).
_PAST_CUE = re.compile(
    r"\b(?:was|were|did|didn't|had|went|got|took|made|came|saw|ran|won|lost|met|spent|left|gave"
    r"|bought|brought|thought|felt|told|said|found|began|wrote|sang|drove|flew|ate|drank|slept|wore"
    r"|became|kept|held|sent|built|caught|taught|heard|paid|sold|fell|grew|knew|threw|rode|swam"
    r"|been|ago|used\s+to|back\s+then|\w+[^e\W]ed)\b",
    re.I,
)
# "I'm so excited", "we're booked": participles used as adjectives say nothing about the past.
_ADJECTIVAL_PARTICIPLE = re.compile(
    r"\b(?:am|is|are|i'm|we're|you're|they're|he's|she's|it's|be|being|get|getting)\s+"
    r"(?:so\s+|really\s+|very\s+|super\s+|pretty\s+)?\w+ed\b",
    re.I,
)
_CLAUSE_BREAK = re.compile(r"[,:()\u2013\u2014]|\s-\s")
# Periods of abbreviations, initials ("U.S.", "J.", but not the pronoun in "so do I.") and a month
# before its day ("Sept. 10") are matched first so that they never count as sentence ends (`end`).
_SENTENCE_END_OR_ABBREVIATION = re.compile(
    rf"\b(?:(?i:{'|'.join(map(re.escape, ABBREVIATIONS))})\.|(?!I\.\s)(?:[A-Z]\.)+|(?i:{_MONTH_ABBR})\.(?=\s+\d))"
    r"|(?P<end>[.!?;]+\s+|\n)")


class _Sentences:
    """The sentences of a text and their tenses: tense is read per sentence, not per turn.

    Bounds are found once and each tense read once: a rescan per date expression made
    long texts quadratic.
    """

    def __init__(self, text: str):
        self.text = text
        ends = [m for m in _SENTENCE_END_OR_ABBREVIATION.finditer(text) if m.group("end")]
        self.starts = [0] + [m.end() for m in ends]
        self.stops = [m.start() for m in ends] + [len(text)]
        self.tenses: dict[int, str] = {}

    def tense_at(self, position: int) -> str:
        i = bisect.bisect_right(self.starts, position) - 1
        if i not in self.tenses:
            self.tenses[i] = _tense(self.text[self.starts[i]:self.stops[i]])
        return self.tenses[i]


def _tense(sentence: str) -> str:
    """"future", "past" or "present"; a plan outweighs a past verb ("I booked a trip in May").

    A progressive is a plan only when no past verb follows it in its clause: in "It is amazing
    how much we did in July" or "I'm missing the trip we took in July" it is an adjective or
    a feeling about the past.
    """
    if _FUTURE_CUE.search(sentence):
        return "future"
    # Blanked to the same length, so positions in the sentence hold for both.
    without_adjectives = _ADJECTIVAL_PARTICIPLE.sub(lambda m: " " * len(m.group()), sentence)
    for progressive in _PROGRESSIVE.finditer(sentence):
        clause_break = _CLAUSE_BREAK.search(sentence, progressive.end())
        clause_end = clause_break.start() if clause_break else len(sentence)
        if not _PAST_CUE.search(without_adjectives, progressive.end(), clause_end):
            return "future"
    return "past" if _PAST_CUE.search(without_adjectives) else "present"


def _count(text: str) -> tuple[int, int]:
    """(low, high) for a count phrase: "3" -> (3, 3), "a few" -> (2, 4), "twenty-five" -> (25, 25)."""
    words = text.lower().replace("-", " ").split()
    counted = [w for w in words if w not in ("a", "of")] or words     # "a" alone is one
    if counted[0].isdigit():
        return int(counted[0]), int(counted[0])
    if counted[0] in _FUZZY_COUNTS:
        return _FUZZY_COUNTS[counted[0]]
    number = sum(_NUMBER_WORDS[w] for w in counted)    # tens and ones
    return number, number


# ---------------------------------------------------------------------------
# Rules: each resolver gets (match, reference date, the sentence's tense) and returns
# (start, end, granularity) or None when the match turns out not to be a date.

_Span = tuple[dt.date, dt.date, str]

_DAY_WORDS = {"the day before yesterday": -2, "yesterday": -1, "last night": -1, "today": 0,
              "tonight": 0, "this morning": 0, "this afternoon": 0, "this evening": 0,
              "tomorrow": 1, "the day after tomorrow": 2}


def _r_day_word(m: re.Match, ref: dt.date, tense: str) -> _Span:
    start, end = _day(ref, _DAY_WORDS[" ".join(m.group(0).lower().split())])
    return start, end, "day"


def _r_weekday(m: re.Match, ref: dt.date, tense: str) -> _Span:
    target = _WEEKDAYS.index(m.group("wd").lower())
    mod = (m.group("mod") or "").lower()
    if mod == "this":
        day = _week(ref, 0)[0] + dt.timedelta(days=target)
    elif mod == "next" or (not mod and tense == "future"):
        day = ref + dt.timedelta(days=(target - ref.weekday() - 1) % 7 + 1)
    else:  # last / previous / "the Friday before" / bare in a past-tense turn
        day = ref - dt.timedelta(days=(ref.weekday() - target - 1) % 7 + 1)
    return day, day, "day"


_SHIFTS = {"this": 0, "last": -1, "previous": -1, "this past": -1, "next": 1,
           "before": -1, "before last": -2, "after": 1, "after next": 2}


def _r_relative_unit(m: re.Match, ref: dt.date, tense: str) -> _Span:
    unit = (m.group("u") or m.group("u2")).lower()
    shift = _SHIFTS[" ".join((m.group("mod") or m.group("rel")).lower().split())]
    start, end = _PERIODS[unit](ref, shift)
    return start, end, _GRANULARITY[unit]


def _r_bare_weekend(m: re.Match, ref: dt.date, tense: str) -> _Span:
    # "over the weekend": the one just past (or current), unless talking about plans.
    shift = 0 if tense == "future" or ref.weekday() >= 5 else -1
    start, end = _weekend(ref, shift)
    return start, end, "week"


def _r_offset(m: re.Match, ref: dt.date, tense: str) -> _Span | None:
    direction = " ".join((m.group("dir") or "").lower().split())
    if direction == "ago":
        sign = -1
    elif direction == "from now" or (m.group("in") and tense == "future"):
        sign = 1
    else:  # "I stayed 2 days", or "in one day" in a past-tense turn: a duration, not a date
        return None
    unit = m.group("u").lower()
    low, high = _count(m.group("n"))
    first, last = sorted((sign * low, sign * high))
    return _PERIODS[unit](ref, first)[0], _PERIODS[unit](ref, last)[1], _GRANULARITY[unit]


def _r_window(m: re.Match, ref: dt.date, tense: str) -> _Span:
    unit = (m.group("u") or m.group("u1")).lower()
    high = _count(m.group("n"))[1] if m.group("n") else 1
    return ref - relativedelta(**{unit + "s": high}), ref, unit


def _r_part_of_period(m: re.Match, ref: dt.date, tense: str) -> _Span:
    unit = (m.group("u") or "day").lower()
    start, end = _PERIODS[unit](ref, 0)
    if m.group("side").lower() == "earlier":
        return start, ref, unit
    return ref, end, unit


def _recurring_mode(m: re.Match, tense: str) -> str:
    """How a yearly period with no year ("in September", "at Christmas") is placed.

    A modifier decides ("last May"); "since" looks back. Otherwise the sentence's tense:
    a past-tense sentence means the latest one, a future-tense or unmarked one the next
    ("the half marathon in September", said in March, is this September, not last).
    """
    mod = (m.group("mod") or "").lower()
    if mod:
        mod = " ".join(mod.split())
        return {"previous": "last", "this past": "last"}.get(mod, mod)
    if (m.groupdict().get("prep") or "").lower() == "since":
        return "past"
    return "past" if tense == "past" else "future"


def _r_season(m: re.Match, ref: dt.date, tense: str) -> _Span | None:
    name = m.group("s").lower()
    if m.group("y"):
        start, end = _season(name, int(m.group("y")))
    elif m.group("mod") or (m.group("prep") and not (name == "fall" and m.group("prep").lower() == "the")):
        start, end = _pick(functools.partial(_season, name), ref, _recurring_mode(m, tense))
    else:  # "summer camp", "I fall asleep", and the noun in "after the fall"
        return None
    return start, end, "season"


def _r_holiday(m: re.Match, ref: dt.date, tense: str) -> _Span:
    day_of = _HOLIDAYS[" ".join(m.group("h").lower().split())]
    if m.group("y"):
        day = day_of(int(m.group("y")))
    else:
        day = _pick(lambda y: (day_of(y), day_of(y)), ref, _recurring_mode(m, tense))[0]
    return day, day, "day"


def _r_month(m: re.Match, ref: dt.date, tense: str) -> _Span | None:
    name = m.group("m")
    month = _MONTHS.index(name.lower()) + 1
    if m.group("y"):
        start, end = _month(dt.date(int(m.group("y")), month, 1), 0)
    elif name == "may" or not (m.group("mod") or m.group("prep")):
        return None  # lower-case "may" is the verb; a bare month name is too weak a cue
    else:
        start, end = _pick(lambda y: _month(dt.date(y, month, 1), 0), ref, _recurring_mode(m, tense))
    return start, end, "month"


def _r_month_range(m: re.Match, ref: dt.date, tense: str) -> _Span:
    """"between March and August 2023": the year named once belongs to both months (a first month
    after the second is the year before: "from November to February 2024")."""
    first, last = (_MONTHS.index(m.group(k).lower()) + 1 for k in ("m1", "m2"))
    year = int(m.group("y"))
    return _month(dt.date(year - (first > last), first, 1), 0)[0], _month(dt.date(year, last, 1), 0)[1], "month"


def _r_year(m: re.Match, ref: dt.date, tense: str) -> _Span:
    year = int(m.group("y"))
    return dt.date(year, 1, 1), dt.date(year, 12, 31), "year"


_DATEPARSER_SETTINGS = {
    "PREFER_DATES_FROM": "past",
    "DATE_ORDER": "MDY",
    "PARSERS": ["absolute-time"],
    "REQUIRE_PARTS": ["day", "month"],
    "RETURN_AS_TIMEZONE_AWARE": False,
}


@functools.lru_cache(maxsize=4096)
def _dateparse(span: str, ref: dt.date) -> dt.date | None:
    settings = dict(_DATEPARSER_SETTINGS, RELATIVE_BASE=dt.datetime.combine(ref, dt.time()))
    try:
        parsed = _dateparser_parse(span, languages=["en"], settings=settings)
    except Exception:  # dateparser raises assorted errors on odd input; a non-date is not fatal here
        return None
    return parsed.date() if parsed else None


_HAS_YEAR = re.compile(_YEAR_RE + r"|\d[/-]\d+[/-]\d")
_LOWER_MAY = re.compile(r"\bmay\b")  # case-sensitive on purpose


def _r_absolute(m: re.Match, ref: dt.date, tense: str) -> _Span | None:
    span = m.group(0)
    has_year = bool(_HAS_YEAR.search(span))
    if not has_year and _LOWER_MAY.search(span):
        return None  # "you may 2x it": lower-case "may" without a year is the verb
    day = _dateparse(span, ref)
    if day is None:
        return None
    if tense != "past" and not has_year and day < ref:
        # Parsed with a past preference (dateparser's "future" one skips today's date), so a
        # year-less date outside a past-tense sentence moves on to its next occurrence, as
        # _recurring_mode places month names.
        day = _next_year_with(day)
    return day, day, "day"


def _next_year_with(day: dt.date) -> dt.date:
    """`day`'s month and day in the first later year that has them (29 February waits for a leap year)."""
    year = day.year + 1
    while (day.month, day.day) == (2, 29) and not calendar.isleap(year):
        year += 1
    return day.replace(year=year)


_RULES: list[tuple[re.Pattern, Callable[[re.Match, dt.date, bool], _Span | None]]] = [
    (re.compile(rf"(?:\b(?:{_WEEKDAY_RE}),?\s+)?\b(?:"
                rf"(?:the\s+)?{_DAY_RE}\s+(?:of\s+)?{_ANY_MONTH_RE}(?:,?\s+{_YEAR_RE})?"
                rf"|{_ANY_MONTH_RE}\s+(?:the\s+)?{_DAY_RE}(?:,?\s+{_YEAR_RE})?"
                rf"|{_YEAR_RE}-\d{{1,2}}-\d{{1,2}}|\d{{1,2}}/\d{{1,2}}/(?:\d{{4}}|\d{{2}}))\b", re.I),
     _r_absolute),
    (re.compile(r"\b(?:the\s+day\s+before\s+yesterday|the\s+day\s+after\s+tomorrow|yesterday|today"
                r"|tonight|tomorrow|last\s+night|this\s+(?:morning|afternoon|evening))\b", re.I),
     _r_day_word),
    # Not "every Friday", "each Saturday" (a habit) nor "Good Friday" (a holiday): no one day.
    (re.compile(rf"(?<!\bevery\s)(?<!\beach\s)(?<!\bgood\s)"
                rf"\b(?:(?P<mod>{_MODIFIER_RE})\s+|the\s+)?(?P<wd>{_WEEKDAY_RE})(?:\s+before)?\b", re.I),
     _r_weekday),
    (re.compile(rf"\b(?:(?P<mod>{_MODIFIER_RE})\s+(?P<u>week|weekend|month|year)"
                r"|the\s+(?P<u2>week|weekend|month|year)\s+(?P<rel>before(?:\s+last)?|after(?:\s+next)?))\b", re.I),
     _r_relative_unit),
    (re.compile(r"\b(?:over|on|during|at)\s+the\s+weekend\b", re.I), _r_bare_weekend),
    (re.compile(rf"(?P<in>\bin\s+)?\b(?P<n>{_COUNT_RE})\s+(?P<u>{_UNIT_RE})s?\b"
                r"(?:\s+(?P<dir>ago|from\s+now)\b)?", re.I),
     _r_offset),
    (re.compile(rf"\b(?:the\s+)?(?:(?:past|last)\s+(?P<n>{_COUNT_RE})\s+(?P<u>day|week|month|year)s"
                r"|past\s+(?P<u1>day|week|month|year))\b", re.I),
     _r_window),
    (re.compile(r"\b(?P<side>earlier|later)\s+(?:this\s+(?P<u>week|month|year)|today)\b", re.I),
     _r_part_of_period),
    (re.compile(rf"\b(?:(?P<mod>{_MODIFIER_RE})\s+"
                r"|(?P<prep>(?:in|during|over|through|since)(?:\s+the)?|the)\s+)?"
                rf"(?P<s>spring|summer|fall|autumn|winter)(?:\s+(?:of\s+)?(?P<y>{_YEAR_RE}))?\b", re.I),
     _r_season),
    (re.compile(rf"\b(?:(?P<mod>{_MODIFIER_RE})\s+)?(?P<h>{_HOLIDAY_RE})(?:\s+(?P<y>{_YEAR_RE}))?\b", re.I),
     _r_holiday),
    (re.compile(rf"\b(?:between|from)\s+(?P<m1>{_MONTH_RE})\s+(?:and|to|until|till|through)\s+(?P<m2>{_MONTH_RE})"
                rf",?\s+(?:of\s+)?(?P<y>{_YEAR_RE})\b", re.I),
     _r_month_range),
    (re.compile(rf"\b(?:(?P<mod>{_MODIFIER_RE})\s+"
                rf"|(?P<prep>in|during|since|until|till|by|{_PART_OF_MONTH_RE}\s+of|early|mid|late|through"
                rf"|throughout)[\s-]+)?"
                rf"(?P<m>{_MONTH_RE})\b(?:,?\s+(?:of\s+)?(?P<y>{_YEAR_RE})\b)?", re.I),
     _r_month),
    (re.compile(rf"\b(?:in|during|since|until|till|by|of|from|around|back\s+in|early|mid|late|the\s+year)[\s-]+"
                rf"(?P<y>{_YEAR_RE})\b(?!\s+(?!(?:{'|'.join(_WORDS_AFTER_A_YEAR)})\b)(?-i:[a-z]))", re.I),
     _r_year),
]


# ---------------------------------------------------------------------------
# Public entry points

def resolve_dates(text: str, reference: dt.datetime | dt.date) -> list[ResolvedDate]:
    """Every date expression in `text`, resolved against `reference`, in text order."""
    if not text or not _GATE.search(text):
        return []
    ref = reference.date() if isinstance(reference, dt.datetime) else reference
    normalised = text.replace("\u2019", "'")  # curly apostrophes (I’ll, New Year’s); same length
    sentences = _Sentences(normalised)
    found = []
    for pattern, resolve in _RULES:
        for m in pattern.finditer(normalised):
            try:
                span = resolve(m, ref, sentences.tense_at(m.start()))
            except (ValueError, OverflowError):  # calendar arithmetic past year 1 or 9999
                continue
            if span:
                found.append((m.start(), m.end(), span))
    chosen: list[tuple[int, int, _Span]] = []  # in text order, never overlapping
    # Longest match wins an overlap ("in May 2023" over "in May"); ties go to the earlier rule.
    for start, end, span in sorted(found, key=lambda f: f[0] - f[1]):
        i = bisect.bisect_left(chosen, start, key=lambda c: c[0])
        # Only the neighbours can overlap: checking all chosen matches made long texts quadratic.
        if (i == 0 or chosen[i - 1][1] <= start) and (i == len(chosen) or chosen[i][0] >= end):
            chosen.insert(i, (start, end, span))
    return [ResolvedDate(text[s:e], *span) for s, e, span in chosen]


# Two unrelated reference dates: an expression that resolves identically against both is absolute.
_PROBE_REFERENCES = (dt.date(2001, 3, 14), dt.date(2011, 10, 3))


def question_time_window(question: str, reference: dt.datetime | None) -> tuple[dt.datetime, dt.datetime] | None:
    """The window a question asks about, from its first day's 00:00 to its last day's last
    microsecond (``time.max``: an event at 23:59:59.5 is inside), or None if it names no time.

    Several expressions are merged into one covering window. Without a reference
    only absolute expressions ("in June 2023") count.
    """
    if reference is not None:
        found = resolve_dates(question, reference)
    else:
        first, second = (resolve_dates(question, ref) for ref in _PROBE_REFERENCES)
        found = [r for r in first if r in second]
    if not found:
        return None
    start = min(r.start for r in found)
    end = max(r.end for r in found)
    return dt.datetime.combine(start, dt.time()), dt.datetime.combine(end, dt.time.max)
