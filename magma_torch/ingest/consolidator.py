"""What the slow path and a consolidator exchange: the events it is shown (``EventView``), what it
proposes for each (``Proposal``: entity mentions, causal and supersession links), and the
``Consolidator`` protocol that the heuristic and the LLM consolidator implement."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol


@dataclass(frozen=True)
class EventView:
    id: int                 # the event's store row: a stream's rows follow its chain, backfilled events included
    text: str
    speaker: str | None
    stream: str             # conversation / stream id; causal links only within a stream
    timestamp: datetime


def time_order(ev: EventView) -> tuple[datetime, int]:
    """Sort key of "happened before", the order every causal link must follow from cause to effect:
    the timestamp, then the row, which breaks ties (LoCoMo gives every turn of a session one
    timestamp). A stream's rows follow its chain, a backfilled event's included (its stable id,
    newer than its place, would not)."""
    return ev.timestamp, ev.id


@dataclass(frozen=True)
class EntityMention:
    name: str               # canonical key, e.g. "violin", "support group", "max"
    kind: str               # person | place | org | object | activity | work | event | group | other
    surface: str            # as written, for display


@dataclass(frozen=True)
class CausalLink:
    cause: int              # event id
    effect: int             # event id
    confidence: float       # in (0, 1]
    cue: str                # the discourse cue that triggered it, e.g. "that's why"


@dataclass
class Proposal:
    event_id: int
    entities: list[EntityMention]
    causal: list[CausalLink]
    supersedes: list[SupersessionLink] = field(default_factory=list)   # earlier facts this event updates


@dataclass(frozen=True)
class SupersessionLink:
    later: int              # event id of the update
    earlier: int            # event id whose fact it ends
    confidence: float       # in (0, 1]
    cue: str                # what triggered it, e.g. "residence: moved"


class Consolidator(Protocol):
    def propose(self, batch: Sequence[EventView], context: dict[int, Sequence[EventView]]) -> list[Proposal]: ...

    def backfill(self) -> list[tuple[int, EntityMention]]: ...

    def state_dict(self) -> dict: ...

    def load_state_dict(self, state: dict) -> None: ...


class Unasked:
    """A read-only view's stand-in for a consolidator it does not build (one that needs an LLM): it
    holds the saved state for a save of the view, is never asked (the view consolidates nothing), and
    restates nothing, so a lifecycle record replayed onto the view queues the later events of the
    changed stream again, as the consolidator it stands for did in the writer."""

    def __init__(self):
        self._state = None

    def load_state_dict(self, state) -> None:
        self._state = state

    def state_dict(self):
        return self._state

    def propose(self, batch: Sequence[EventView], context) -> list[Proposal]:
        raise RuntimeError("a read-only view consolidates nothing")   # consolidate() refuses first
