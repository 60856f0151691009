"""Loader for the LoCoMo benchmark (Maharana et al., 2024).

Only the conversation and the questions are read. The benchmark's generated
annotations (``event_summary``, ``observation``, ``session_summary``) are never
accessed: reading them at inference time would leak the answers.
"""

from __future__ import annotations

import json
import logging
import os
import re
from dataclasses import replace
from datetime import datetime
from typing import Any

from .base import DatasetError, Question, Sample, Turn, distinct_samples, require as _field

logger = logging.getLogger(__name__)

CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}

_SESSION_KEY = re.compile(r"session_(\d+)")
# Tolerates the malformed ids of the full file: "D:11:26" and zero-padded "D30:05".
_DIA_ID = re.compile(r"D:?(\d+):(\d+)")
_DATE_FORMATS = ("%I:%M %p on %d %B, %Y", "%I:%M %p on %d %b, %Y")


def load_locomo(path: str | os.PathLike[str]) -> list[Sample]:
    """Load a LoCoMo-format JSON file into samples; raises DatasetError on bad input."""
    file = os.fspath(path)
    try:
        with open(file, encoding="utf-8") as f:
            data = json.load(f)
    except OSError as e:
        raise DatasetError(f"{file}: cannot read file: {e.strerror or e}") from e
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise DatasetError(f"{file}: invalid JSON: {e}") from e
    if not isinstance(data, list):
        raise DatasetError(f"{file}: top level: expected a list of samples, got {type(data).__name__}")
    return list(distinct_samples(((f"[{i}]", _sample(raw, file, f"[{i}]")) for i, raw in enumerate(data)),
                                 file, "sample_id"))


def canonical_dia_id(raw: str) -> str | None:
    """Return "D<session>:<turn>" for a (possibly malformed) dia_id, or None if unparseable."""
    m = _DIA_ID.fullmatch(raw.strip())
    return f"D{int(m[1])}:{int(m[2])}" if m else None


def _parse_date(text: str, file: str, where: str) -> datetime:
    for fmt in _DATE_FORMATS:
        try:
            return datetime.strptime(text.strip(), fmt)
        except ValueError:
            continue
    raise DatasetError(f"{file}: {where}: unparseable date {text!r}")


def _sample(raw: Any, file: str, where: str) -> Sample:
    sample_id = _field(raw, "sample_id", str, file, where)
    conv = _field(raw, "conversation", dict, file, where)
    qa = _field(raw, "qa", list, file, where)
    cwhere = f"{where}.conversation"

    # Only keys with a session list behind them count: conv-26 has extra
    # session_N_date_time keys for sessions that do not exist.
    sessions = sorted((int(m[1]), key) for key in conv if (m := _SESSION_KEY.fullmatch(key)))
    turns: list[Turn] = []
    session_time: datetime | None = None
    for _, key in sessions:
        date_key = f"{key}_date_time"
        session_time = _parse_date(_field(conv, date_key, str, file, cwhere), file, f"{cwhere}.{date_key}")
        raw_turns = _field(conv, key, list, file, cwhere)
        for k, t in enumerate(raw_turns):
            turns.append(_turn(t, key, session_time, file, f"{cwhere}.{key}[{k}]"))
    turns = _distinct_ids(turns, sample_id, file)

    known = {t.source_id for t in turns}
    dropped: list[str] = []
    questions = [
        _question(q, sample_id, i, session_time, known, dropped, file, f"{where}.qa[{i}]")
        for i, q in enumerate(qa)
    ]
    if dropped:
        logger.warning(
            "%s: sample %s: dropped evidence ids that match no turn: %s",
            file, sample_id, ", ".join(dict.fromkeys(dropped)),
        )
    return Sample(sample_id=sample_id, turns=tuple(turns), questions=tuple(questions))


def _distinct_ids(turns: list[Turn], sample_id: str, file: str) -> list[Turn]:
    """``turns`` with a repeated dia_id's later turns renamed "<id>#2", "#3", ...: a memory takes a
    known source id for the same turn again, so they would be lost. Evidence names the first."""
    seen: dict[str, int] = {}
    out = []
    for t in turns:
        seen[t.source_id] = seen.get(t.source_id, 0) + 1
        out.append(t if seen[t.source_id] == 1 else replace(t, source_id=f"{t.source_id}#{seen[t.source_id]}"))
    repeated = [sid for sid, n in seen.items() if n > 1]
    if repeated:
        logger.warning("%s: sample %s: repeated dia_ids, later turns renamed <id>#2...: %s",
                       file, sample_id, ", ".join(repeated))
    return out


def _turn(raw: Any, session_id: str, timestamp: datetime, file: str, where: str) -> Turn:
    speaker = _field(raw, "speaker", str, file, where)
    dia_id = _field(raw, "dia_id", str, file, where)
    text = _field(raw, "text", str, file, where)
    # Some image turns have a caption but no img_url; the caption is kept either way.
    if "blip_caption" in raw:
        text = f"{text} [shares an image: {_field(raw, 'blip_caption', str, file, where)}]"
    return Turn(
        source_id=canonical_dia_id(dia_id) or dia_id,
        speaker=speaker,
        text=text,
        timestamp=timestamp,
        session_id=session_id,
    )


def _question(
    raw: Any,
    sample_id: str,
    index: int,
    query_time: datetime | None,
    known: set[str],
    dropped: list[str],
    file: str,
    where: str,
) -> Question:
    question = _field(raw, "question", str, file, where)
    code = _field(raw, "category", int, file, where)
    if code not in CATEGORIES:
        raise DatasetError(f"{file}: {where}.category: unknown category {code}")
    category = CATEGORIES[code]
    # Adversarial questions carry the answer to score against in adversarial_answer;
    # a stray 'answer' next to it is not the gold.
    answer_key = "adversarial_answer" if category == "adversarial" else "answer"
    gold = None
    if answer_key in raw:
        gold = _field(raw, answer_key, (str, int, float), file, where)
        gold = str(gold)  # a few answers are ints (years)
    elif category != "adversarial":
        # Loaded (its retrieval is measured), but with no F1, BLEU-1 or judge verdict, left out of their means
        logger.warning("%s: %s: no 'answer': the question's answer is not scored", file, where)

    evidence: list[str] = []
    for j, item in enumerate(_field(raw, "evidence", list, file, where)):
        if not isinstance(item, str):
            raise DatasetError(f"{file}: {where}.evidence[{j}]: expected str, got {type(item).__name__}")
        # Some entries pack several ids: "D8:6; D9:17".
        for piece in filter(None, re.split(r"[;,\s]+", item)):
            # a turn whose dia_id does not parse keeps it as written (_turn), and evidence may cite it so
            dia_id = canonical_dia_id(piece) or piece
            if dia_id in known:
                if dia_id not in evidence:
                    evidence.append(dia_id)
            else:
                dropped.append(piece)
    return Question(
        question_id=f"{sample_id}/q{index}",
        question=question,
        gold=gold,
        evidence=tuple(evidence),
        category=category,
        query_time=query_time,
    )
