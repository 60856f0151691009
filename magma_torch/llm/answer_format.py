"""What a reader's answer text becomes before it is scored or shown.

The answer prompts ask for dates in words ("7 May 2023"), as LoCoMo's gold answers write them.
Small readers answer with ISO dates anyway (Qwen2.5-Coder-1.5B wrote "2023-05-07" for 23 of 23
dated answers under prompt magma-answer-v2), which LoCoMo's token F1 scores 0 against "7 May
2023". Spelling them out holds the reader to the prompt's format; it reads nothing but the answer.
"""
from __future__ import annotations

import calendar
import re

from magma_torch.errors import MagmaError

# YYYY-MM-DD or YYYY-MM, standing alone: not inside a longer word, number or run of digits and hyphens
# (a phone or order number, "A1234-10", "3.1415-9"), nor followed by "/" or a time ("2023-05-07T10:00")
_ISO_DATE = re.compile(r"(?<![\w.-])(\d{4})-(\d{1,2})(?:-(\d{1,2}))?(?![\w/-]|\.\d)")
# YYYY-MM alone is read as a month only in these years and with two digits: "pages 1204-12" and
# "score 1000-10" are not, nor a season written as its two years ("the 2010-11 season")
MONTH_YEARS = range(1900, 2100)
DATE_STYLES = ("words", "as_written")


class UnknownDateStyleError(MagmaError, ValueError):
    """An answer date style that does not exist (``dates`` of ``MagmaMemory.answer``, ``task.answer_dates``)."""


def check_date_style(dates: str) -> None:
    if dates not in DATE_STYLES:
        raise UnknownDateStyleError(f"unknown answer date style {dates!r} (dates, task.answer_dates; known: "
                                    f"{', '.join(DATE_STYLES)})")


def _in_words(m: re.Match) -> str:
    year, month = int(m[1]), int(m[2])
    if not 1 <= month <= 12 or year == 0:     # the calendar has no year 0 (1 BC precedes AD 1)
        return m[0]
    if m[3] is None:
        if len(m[2]) != 2 or year not in MONTH_YEARS or month == (year + 1) % 100:
            return m[0]
        return f"{calendar.month_name[month]} {year}"
    day = int(m[3])
    return f"{day} {calendar.month_name[month]} {year}" if 1 <= day <= calendar.monthrange(year, month)[1] else m[0]


def spell_out_dates(text: str) -> str:
    """ISO dates in ``text`` written as the prompts ask: 2023-05-07 -> 7 May 2023, 2023-07 -> July
    2023. Anything that is not a valid date (2023-13-01, 2023-02-30, 0000-05-07, a phone number, a range
    of pages or seasons such as 1204-12 and 2010-11, part of a word or a datetime) is left."""
    return _ISO_DATE.sub(_in_words, text)


def format_answer(text: str, dates: str) -> str:
    """The reader's ``text`` with its dates in the style ``dates`` (one of DATE_STYLES)."""
    check_date_style(dates)
    return spell_out_dates(text) if dates == "words" else text
