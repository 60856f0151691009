"""Columnar node attributes: tensors for what queries compute on, lists for text."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime, timezone

import torch

from magma_torch.store.growable import GrowableTensor


@dataclass
class EventRow:
    """One event as the fast path hands it to the store."""

    text: str
    timestamp: float                   # epoch seconds (UTC)
    stream: str
    speaker: str | None = None
    source_id: str | None = None
    session_id: str | None = None
    dates: list[dict] = field(default_factory=list)   # resolved dates: {expression, start, end, granularity}
    metadata: dict | None = None


def _span(row: EventRow) -> tuple[float, float]:
    if not row.dates:
        return (math.nan, math.nan)
    start = min(d["start"] for d in row.dates)
    end = max(d["end"] for d in row.dates)
    return (_epoch(start), _epoch(end) + 86399.0)


def _epoch(iso_date: str) -> float:
    return datetime.fromisoformat(iso_date).replace(tzinfo=timezone.utc).timestamp()


class EventTable:
    """Event nodes: content, timestamp, embedding and attributes A (paper, Sec. 3)."""

    def __init__(self, dim: int, device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32):
        self.embeddings = GrowableTensor((dim,), dtype, device)
        self.timestamps = GrowableTensor((), torch.float64, device)
        # [start, end] epoch seconds of the dates the text mentions (NaN when none): the time signal
        self.date_spans = GrowableTensor((2,), torch.float64, device)
        self.rows: list[EventRow] = []
        self.by_source: dict[str, int] = {}
        self.last_of_stream: dict[str, int] = {}
        # Temporal chain as pointer columns (-1 at the ends): O(1) neighbour lookups for queries.
        self.prev = GrowableTensor((), torch.long, device)
        self.next = GrowableTensor((), torch.long, device)

    def __len__(self) -> int:
        return len(self.rows)

    def append(self, rows: list[EventRow], embeddings: torch.Tensor) -> list[int]:
        start = len(self.rows)
        self.embeddings.extend(embeddings)
        self.timestamps.extend(torch.tensor([r.timestamp for r in rows], dtype=torch.float64))
        self.date_spans.extend(torch.tensor([_span(r) for r in rows], dtype=torch.float64).reshape(-1, 2))
        self.rows.extend(rows)
        ids = list(range(start, start + len(rows)))
        prev = []
        for i, r in zip(ids, rows):
            if r.source_id is not None:
                self.by_source[r.source_id] = i
            prev.append(self.last_of_stream.get(r.stream, -1))
            self.last_of_stream[r.stream] = i
        prev_t = torch.tensor(prev, dtype=torch.long)
        self.prev.extend(prev_t)
        self.next.extend(torch.full((len(rows),), -1, dtype=torch.long))
        linked = prev_t >= 0
        # A reader's snapshot may now see a next pointer past its own end; queries mask those.
        dev = self.next.data.device
        self.next.data[prev_t[linked].to(dev)] = torch.tensor(ids)[linked].to(dev)
        return ids

    def preceding(self, event: int, window: int) -> list[int]:
        """Up to ``window`` earlier events of the same stream, oldest first."""
        out, cur = [], int(self.prev.data[event])
        while cur >= 0 and len(out) < window:
            out.append(cur)
            cur = int(self.prev.data[cur])
        return out[::-1]


class EntityTable:
    """Entity nodes: a canonical name, a kind and the embedding of the name."""

    def __init__(self, dim: int, device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32):
        self.embeddings = GrowableTensor((dim,), dtype, device)
        self.names: list[str] = []
        self.kinds: list[str] = []
        self.surfaces: list[str] = []
        self.by_name: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self.names)

    def append(self, names: list[str], kinds: list[str], surfaces: list[str], embeddings: torch.Tensor) -> list[int]:
        start = len(self.names)
        self.embeddings.extend(embeddings)
        for offset, (n, k, s) in enumerate(zip(names, kinds, surfaces)):
            self.names.append(n)
            self.kinds.append(k)
            self.surfaces.append(s)
            self.by_name[n] = start + offset
        return list(range(start, start + len(names)))
