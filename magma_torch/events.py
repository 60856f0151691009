"""What a memory holds, event by event: ``MagmaMemory.events()`` and ``MagmaMemory.event(id)``.

A ``StoredEvent`` is a frozen copy taken under the store lock (its dates and metadata are
copies too): holding one never blocks ingest or the slow path, and changing it cannot change
the store.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass
from datetime import datetime, timezone

from magma_torch.errors import MagmaError
from magma_torch.store.tables import EventRow


class UnknownEventError(MagmaError, KeyError):
    """An event id the memory does not hold; the message names it."""

    def __str__(self) -> str:   # KeyError would show the message quoted
        return str(self.args[0])


@dataclass(frozen=True)
class StoredEvent:
    id: int
    text: str
    timestamp: datetime                 # UTC
    speaker: str | None
    source_id: str | None
    session_id: str | None
    stream: str
    episode: int                        # id of its episode node (the store's ``episodes`` table)
    status: str                         # slow path: "pending" | "consolidated" | "failed"
    status_reason: str                  # why it failed, or what the consolidator rejected ("" when nothing)
    dates: tuple[dict, ...]             # dates its text mentions, resolved:
                                        # {expression, start, end, granularity, label}
    metadata: dict | None
    # Valid time: the span in which what the event says holds, from its timestamp until the
    # first later event that updates it (the ``supersedes`` relation); None: still current.
    valid_from: datetime
    valid_to: datetime | None = None
    superseded_by: int | None = None    # id of that later event

    @classmethod
    def from_row(cls, event: int, row: EventRow, episode: int, status: tuple[str, str],
                 superseded_by: tuple[int, float] | None = None) -> "StoredEvent":
        """``superseded_by``: (id, timestamp) of the first event that supersedes this one."""
        when = datetime.fromtimestamp(row.timestamp, timezone.utc)
        later, until = (None, None) if superseded_by is None else (
            superseded_by[0], datetime.fromtimestamp(superseded_by[1], timezone.utc))
        return cls(event, row.text, when, row.speaker, row.source_id, row.session_id, row.stream, episode,
                   status[0], status[1], copy.deepcopy(tuple(row.dates)), copy.deepcopy(row.metadata),
                   valid_from=when, valid_to=until, superseded_by=later)
