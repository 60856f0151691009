"""Loader for LongMemEval (Wu et al., 2024): LongMemEval_S, LongMemEval_M and the oracle split.

Each record is one question with its own haystack of dated chat sessions, so each record
becomes one ``Sample`` (one memory). The file is streamed record by record with ijson:
LongMemEval_M is gigabytes and is never held in memory whole.

What a model may see is separated from what only scores it. Turns are given positional ids
("S3:2" = 2nd turn of the 3rd session in date order) and sessions positional names
("session_3"): the dataset's session ids give the evidence away (evidence sessions are
named "answer_..."), and so does ``has_answer``. Both are read here only to fill
``Question.evidence`` (turn level) and ``Question.evidence_sessions`` (session level).
"""

from __future__ import annotations

import codecs
import logging
import os
from collections.abc import Iterator
from datetime import datetime
from typing import Any, BinaryIO

import ijson

from .base import DatasetError, Question, Sample, Turn, distinct_samples, require

logger = logging.getLogger(__name__)

QUESTION_TYPES = ("single-session-user", "single-session-assistant", "single-session-preference",
                  "multi-session", "knowledge-update", "temporal-reasoning")
ABSTENTION_SUFFIX = "_abs"
_DATE_FORMAT = "%Y/%m/%d (%a) %H:%M"  # "2023/12/18 (Mon) 04:17"
_JSON_BLANKS = b" \t\r\n"  # the whitespace JSON allows between tokens


def load_longmemeval(path: str | os.PathLike[str]) -> LongMemEvalFile:
    """Stream a LongMemEval JSON file (a list of question records) as samples.

    A missing file or a wrong top level fails here; a bad record raises DatasetError naming the
    file and the record when the stream reaches it.
    """
    file = os.fspath(path)
    _open_list(file).close()
    return LongMemEvalFile(file)


class LongMemEvalFile:
    """The samples of a LongMemEval file, streamed: each iteration reads the file afresh, one record
    at a time, and ``sample_ids`` reads its question ids alone."""

    def __init__(self, file: str):
        self.file = file

    def __iter__(self) -> Iterator[Sample]:
        records = ((f"record [{index}]", _sample(raw, self.file, f"record [{index}]"))
                   for index, raw in self._items("item"))
        yield from distinct_samples(records, self.file, "question_id")

    def sample_ids(self) -> Iterator[str]:
        """The question ids in file order, building no sample: what a selection by id checks up front
        (a record without one is named when the samples are read)."""
        for _, qid in self._items("item.question_id"):
            yield qid

    def _items(self, prefix: str) -> Iterator[tuple[int, Any]]:
        with _open_list(self.file) as f:
            index = -1
            try:
                for index, item in enumerate(ijson.items(f, prefix, use_float=True)):
                    yield index, item
            except ijson.JSONError as e:
                raise DatasetError(f"{self.file}: record [{index + 1}]: invalid JSON: {e}") from e


def _open_list(file: str) -> BinaryIO:
    """``file`` opened at the start of its JSON text, checked to be a list."""
    try:
        f = open(file, "rb")
    except OSError as e:
        raise DatasetError(f"{file}: cannot read file: {e.strerror or e}") from e
    if not _at_json_list(f):
        f.close()
        raise DatasetError(f"{file}: top level: expected a list of question records")
    return f


def _at_json_list(f: BinaryIO) -> bool:
    """Whether the JSON text of ``f`` is a list; leaves ``f`` at the start of that text, past a
    UTF-8 byte-order mark, which ijson does not accept (leading blanks, however many, it skips)."""
    start = len(codecs.BOM_UTF8) if f.read(len(codecs.BOM_UTF8)) == codecs.BOM_UTF8 else 0
    f.seek(start)
    first = b""
    while not first and (chunk := f.read(1 << 16)):
        first = chunk.lstrip(_JSON_BLANKS)[:1]
    f.seek(start)
    return first == b"["


def parse_date(text: str, file: str, where: str) -> datetime:
    try:
        return datetime.strptime(text.strip(), _DATE_FORMAT)
    except ValueError:
        raise DatasetError(f"{file}: {where}: unparseable date {text!r} "
                           "(expected like '2023/12/18 (Mon) 04:17')") from None


def _str_list(raw: dict, key: str, file: str, where: str) -> list[str]:
    items = require(raw, key, list, file, where)
    for j, item in enumerate(items):
        if not isinstance(item, str):
            raise DatasetError(f"{file}: {where}.{key}[{j}]: expected str, got {type(item).__name__}")
    return items


def _sample(raw: Any, file: str, where: str) -> Sample:
    qid = require(raw, "question_id", str, file, where)
    where = f"{where} (question_id {qid})"
    qtype = require(raw, "question_type", str, file, where)
    if qtype not in QUESTION_TYPES:
        raise DatasetError(f"{file}: {where}.question_type: unknown type {qtype!r}; known: {', '.join(QUESTION_TYPES)}")
    question = require(raw, "question", str, file, where)
    gold = str(require(raw, "answer", (str, int, float), file, where))  # a few answers are numbers
    query_time = parse_date(require(raw, "question_date", str, file, where), file, f"{where}.question_date")
    session_ids = _str_list(raw, "haystack_session_ids", file, where)
    dates = _str_list(raw, "haystack_dates", file, where)
    sessions = require(raw, "haystack_sessions", list, file, where)
    if not len(session_ids) == len(dates) == len(sessions):
        raise DatasetError(f"{file}: {where}: haystack_session_ids, haystack_dates and haystack_sessions differ "
                           f"in length ({len(session_ids)}, {len(dates)}, {len(sessions)})")
    answer_ids = _str_list(raw, "answer_session_ids", file, where)

    # Sessions in date order (stable for equal dates); names are positions in that order.
    times = [parse_date(d, file, f"{where}.haystack_dates[{i}]") for i, d in enumerate(dates)]
    order = sorted(range(len(sessions)), key=times.__getitem__)
    turns: list[Turn] = []
    evidence: list[str] = []
    session_name: dict[str, str] = {}
    for k, i in enumerate(order, 1):
        name = f"session_{k}"
        session_name[session_ids[i]] = name
        if not isinstance(sessions[i], list):
            raise DatasetError(f"{file}: {where}.haystack_sessions[{i}]: expected list, "
                               f"got {type(sessions[i]).__name__}")
        for t, turn in enumerate(sessions[i], 1):
            twhere = f"{where}.haystack_sessions[{i}][{t - 1}]"
            source_id = f"S{k}:{t}"
            turns.append(Turn(source_id=source_id, speaker=require(turn, "role", str, file, twhere),
                              text=require(turn, "content", str, file, twhere), timestamp=times[i],
                              session_id=name))
            if "has_answer" in turn and require(turn, "has_answer", bool, file, twhere):
                evidence.append(source_id)
    unknown = [s for s in answer_ids if s not in session_name]
    if unknown:
        logger.warning("%s: %s: answer_session_ids not in the haystack: %s", file, where, ", ".join(unknown))
    q = Question(question_id=qid, question=question, gold=gold, evidence=tuple(evidence), category=qtype,
                 query_time=query_time,
                 evidence_sessions=tuple(session_name[s] for s in answer_ids if s in session_name),
                 abstention=qid.endswith(ABSTENTION_SUFFIX))
    return Sample(sample_id=qid, turns=tuple(turns), questions=(q,))
