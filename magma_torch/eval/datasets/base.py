"""Dataset records shared by every evaluation loader."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from magma_torch.errors import MagmaError


@dataclass(frozen=True)
class Turn:
    """One utterance of a conversation."""

    source_id: str  # dataset id of the turn, e.g. LoCoMo dia_id "D1:3"
    speaker: str
    text: str  # image turns carry their caption: "<text> [shares an image: <caption>]"
    timestamp: datetime  # the session's date-time
    session_id: str  # e.g. "session_1"


@dataclass(frozen=True)
class Question:
    """One evaluation question about a sample's conversation."""

    question_id: str  # f"{sample_id}/q{index}"
    question: str
    gold: str | None  # reference answer; adversarial questions use the adversarial answer
    evidence: tuple[str, ...]  # normalised source_ids of the turns that support the answer
    category: str  # LoCoMo: "multi-hop" | "temporal" | ...; LongMemEval: its question_type
    query_time: datetime | None  # when the question is asked
    evidence_sessions: tuple[str, ...] = ()  # session_ids of the sessions that hold the answer
    abstention: bool = False  # unanswerable by design (LongMemEval "_abs"): judged, never in recall


@dataclass(frozen=True)
class Sample:
    """One conversation with its questions."""

    sample_id: str
    turns: tuple[Turn, ...]  # chronological: session order, then turn order
    questions: tuple[Question, ...]


class DatasetError(MagmaError, ValueError):
    """A dataset file is missing or malformed; the message names the file and JSON path."""


def require(obj: Any, key: str, kind: type | tuple[type, ...], file: str, where: str) -> Any:
    """Fetch obj[key] checked against kind, or raise naming the file and JSON path."""
    if not isinstance(obj, dict):
        raise DatasetError(f"{file}: {where}: expected an object, got {type(obj).__name__}")
    if key not in obj:
        raise DatasetError(f"{file}: {where}: missing {key!r}")
    value = obj[key]
    # bool is an int subclass, but no dataset field that wants a number takes a boolean.
    if not isinstance(value, kind) or (isinstance(value, bool) and bool not in _kinds(kind)):
        names = " or ".join(t.__name__ for t in _kinds(kind))
        raise DatasetError(f"{file}: {where}.{key}: expected {names}, got {type(value).__name__}")
    return value


def _kinds(kind: type | tuple[type, ...]) -> tuple[type, ...]:
    return kind if isinstance(kind, tuple) else (kind,)


def distinct_samples(samples: Iterable[tuple[str, Sample]], file: str, id_key: str) -> Iterator[Sample]:
    """The (where, sample) pairs' samples, refusing a sample id met before: a repeat would be run twice
    under one id, its questions' ids shared (a run folder keeps the first and skips the other)."""
    first: dict[str, str] = {}
    for where, sample in samples:
        if (earlier := first.setdefault(sample.sample_id, where)) != where:
            raise DatasetError(f"{file}: {where}: {id_key} {sample.sample_id!r} repeats {earlier}'s")
        yield sample
