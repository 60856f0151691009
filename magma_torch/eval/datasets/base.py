"""Dataset records shared by every evaluation loader."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime


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
    category: str  # "multi-hop" | "temporal" | "open-domain" | "single-hop" | "adversarial"
    query_time: datetime | None  # when the question is asked


@dataclass(frozen=True)
class Sample:
    """One conversation with its questions."""

    sample_id: str
    turns: tuple[Turn, ...]  # chronological: session order, then turn order
    questions: tuple[Question, ...]


class DatasetError(ValueError):
    """A dataset file is missing or malformed; the message names the file and JSON path."""
