"""Columnar node attributes: tensors for what queries compute on, lists for text."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime, timezone

import torch

from magma_torch.store import packed_half
from magma_torch.store.growable import GrowableTensor
from magma_torch.tokens import count_tokens


# A copy of the embeddings in this dtype is kept as columns [d, N], any other as rows [N, d]
# (EventTable.scan_embeddings; query/similarity.py reads each layout its own way).
COLUMNS_DTYPE = torch.float32


def scan_copy_name(copy: torch.Tensor | packed_half.PackedView | None) -> str | None:
    """What a snapshot's ``scan_embeddings`` is, for records: its torch dtype, or ``packed_half.NAME``."""
    if copy is None:
        return None
    return packed_half.NAME if isinstance(copy, packed_half.PackedView) else str(copy.dtype)


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


def content_key(text: str, timestamp: float, speaker: str | None, stream: str) -> tuple:
    """What identifies an event added without a source id: re-adding it is a no-op."""
    return (text, timestamp, speaker, stream)


def date_span(row: EventRow) -> tuple[float, float]:
    """[start, end] epoch seconds of the dates the row's text mentions; NaN when none."""
    if not row.dates:
        return (math.nan, math.nan)
    start = min(d["start"] for d in row.dates)
    end = max(d["end"] for d in row.dates)
    return (_epoch(start), _epoch(end) + 86399.0)


def _epoch(iso_date: str) -> float:
    return datetime.fromisoformat(iso_date).replace(tzinfo=timezone.utc).timestamp()


class EventTable:
    """Event nodes: content, timestamp, embedding and attributes A (paper, Sec. 3)."""

    def __init__(self, dim: int, device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32,
                 chain_span: int = 4, scan_dtype: torch.dtype | str = torch.float16):
        self.embeddings = GrowableTensor((dim,), dtype, device)
        # chain_dots[v, k-1] = e_v . e_{k-th chain predecessor of v} (0 past a stream's start), k <= chain_span:
        # a temporal-context view's norm is then a few scalar reads (query/anchors.py window_norms)
        self.chain_dots = GrowableTensor((chain_span,), dtype, device)
        # The copy small query batches read (query/similarity.py): half-precision rows [N, d], half the
        # bytes for a pre-filtering scan, the same packed for FBGEMM (``packed_half.NAME``), or float32
        # columns [d, N], whose product is exact and streams each of the d rows once instead of taking
        # N dot products.
        self.scan_columns = scan_dtype == COLUMNS_DTYPE
        self.scan_packed = scan_dtype == packed_half.NAME
        self.scan_embeddings = (packed_half.PackedHalfRows(dim) if self.scan_packed
                                else GrowableTensor((), scan_dtype, device, lead_shape=(dim,)) if self.scan_columns
                                else GrowableTensor((dim,), scan_dtype, device))
        self.timestamps = GrowableTensor((), torch.float64, device)
        # [start, end] epoch seconds of the dates the text mentions (NaN when none): the time signal
        self.date_spans = GrowableTensor((2,), torch.float64, device)
        # Tokens of each event's text (tokens.py, the context budget's count): derived from the rows,
        # so every path that fills the table (add, load, forget's rebuild, import) computes it alike.
        self.text_tokens = GrowableTensor((), torch.long, device)
        self.rows: list[EventRow] = []
        self.by_source: dict[str, int] = {}
        self.by_content: dict[tuple, int] = {}    # events without a source id, by content_key
        self.last_of_stream: dict[str, int] = {}
        # Temporal chain as pointer columns (-1 at the ends): O(1) neighbour lookups for queries.
        self.prev = GrowableTensor((), torch.long, device)
        self.next = GrowableTensor((), torch.long, device)
        # The episode each event belongs to (paper Sec. 3.2); set by the fast path right after the append.
        self.episode = GrowableTensor((), torch.long, device)
        # Speakers are event attributes (not entity nodes): an id per event (-1: none) into speaker_names.
        self.speaker = GrowableTensor((), torch.long, device)
        self.speaker_names: list[str] = []
        self.speaker_ids: dict[str, int] = {}
        # Stable event ids, what users hold: row i has id ids[i]. They equal the row numbers until a
        # forget compacts the rows (memory lifecycle, magma_torch/lifecycle.py); never reused.
        self.ids: list[int] = []
        self.row_of: dict[int, int] = {}
        self.next_id = 0

    def __len__(self) -> int:
        return len(self.rows)

    def append(self, rows: list[EventRow], embeddings: torch.Tensor, ids: list[int] | None = None) -> list[int]:
        """Append rows; ``ids`` are their stable ids (default: the next unused ones). Returns row numbers."""
        # What a row can fail on (a date that does not parse, text that is not a string) is read before the
        # first write: a failure part-way left the columns a row out of step with one another.
        times = torch.tensor([r.timestamp for r in rows], dtype=torch.float64)
        spans = torch.tensor([date_span(r) for r in rows], dtype=torch.float64).reshape(-1, 2)
        tokens = torch.tensor([count_tokens(r.text) for r in rows], dtype=torch.long)
        start = len(self.rows)
        ids_given = list(range(self.next_id, self.next_id + len(rows))) if ids is None else list(ids)
        self.row_of.update(zip(ids_given, range(start, start + len(rows)), strict=True))
        self.ids.extend(ids_given)
        self.next_id = max([self.next_id, *(i + 1 for i in ids_given)])
        self.embeddings.extend(embeddings)
        if self.scan_packed:
            self.scan_embeddings.cover(self.embeddings.data)
        else:
            self.scan_embeddings.extend(embeddings.T if self.scan_columns else embeddings)
        self.timestamps.extend(times)
        self.date_spans.extend(spans)
        self.text_tokens.extend(tokens)
        self.rows.extend(rows)
        ids = list(range(start, start + len(rows)))
        prev = []
        for i, r in zip(ids, rows, strict=True):
            if r.source_id is not None:
                self.by_source[r.source_id] = i
            else:
                self.by_content.setdefault(content_key(r.text, r.timestamp, r.speaker, r.stream), i)
            prev.append(self.last_of_stream.get(r.stream, -1))
            self.last_of_stream[r.stream] = i
        prev_t = torch.tensor(prev, dtype=torch.long)
        self.prev.extend(prev_t)
        self.next.extend(torch.full((len(rows),), -1, dtype=torch.long))
        self.episode.extend(torch.full((len(rows),), -1, dtype=torch.long))
        self.speaker.extend(torch.tensor([self._speaker_id(r.speaker) for r in rows], dtype=torch.long))
        linked = prev_t >= 0
        # A reader's snapshot may now see a next pointer past its own end; queries mask those.
        dev = self.next.data.device
        self.next.data[prev_t[linked].to(dev)] = torch.tensor(ids)[linked].to(dev)
        new = torch.arange(start, start + len(rows), device=dev)
        self.chain_dots.extend(self.predecessor_cosines(new, prev_t.to(dev)))
        return ids

    def _speaker_id(self, name: str | None) -> int:
        if name is None:
            return -1
        if name not in self.speaker_ids:
            self.speaker_ids[name] = len(self.speaker_names)
            self.speaker_names.append(name)
        return self.speaker_ids[name]

    def predecessor_cosines(self, events: torch.Tensor, pred: torch.Tensor) -> torch.Tensor:
        """[len(events), chain_span]: e_v . e_(k-th predecessor of v) for k = 1.., 0 past a stream's
        start; ``pred`` holds each event's first predecessor (-1: none)."""
        emb, prev = self.embeddings.data, self.prev.data
        out = torch.zeros((events.numel(), self.chain_dots.data.shape[1]), dtype=emb.dtype, device=emb.device)
        for k in range(out.shape[1]):
            ok = (pred >= 0).nonzero().squeeze(1)
            out[ok, k] = row_dots(emb, events[ok], emb, pred[ok], emb.dtype)
            pred = torch.where(pred >= 0, prev[pred.clamp(min=0)], pred)
        return out

    def preceding(self, event: int, window: int) -> list[int]:
        """Up to ``window`` earlier events of the same stream, oldest first."""
        out, cur = [], int(self.prev.data[event])
        while cur >= 0 and len(out) < window:
            out.append(cur)
            cur = int(self.prev.data[cur])
        return out[::-1]


class EpisodeTable:
    """Episode nodes: runs of consecutive events of one stream (a session, cut at long time
    gaps and topic shifts). An episode's embedding is the normalised sum of its events'
    embeddings; its searchable text is theirs (the store's episode keyword index).

    Only a stream's last episode grows: its ``sums`` row and ``last``/``size`` change in
    place when the stream's next event joins it, every other row is final.
    """

    def __init__(self, dim: int, device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32):
        self.sums = GrowableTensor((dim,), dtype, device)      # sum of the member embeddings
        self.first = GrowableTensor((), torch.long, device)    # first and last member event
        self.last = GrowableTensor((), torch.long, device)
        self.size = GrowableTensor((), torch.long, device)
        self.streams: list[str] = []
        self.last_of_stream: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self.streams)

    def add(self, streams: list[str], firsts: list[int], events: torch.Tensor, members: torch.Tensor,
            embeddings: torch.Tensor) -> None:
        """Open new episodes (their ``streams`` and ``firsts`` events; their ids follow the
        stored ones) and add ``events`` [k] (new, in id order) with ``embeddings`` [k, d] to
        the episodes ``members`` [k]."""
        if streams:
            self.sums.extend(torch.zeros((len(streams), self.sums.data.shape[1])))
            first = torch.tensor(firsts, dtype=torch.long)
            for col, values in ((self.first, first), (self.last, first), (self.size, torch.zeros_like(first))):
                col.extend(values)
            for offset, stream in enumerate(streams):
                self.last_of_stream[stream] = len(self.streams) + offset
            self.streams.extend(streams)
        if members.numel():
            dev = self.sums.data.device
            members = members.to(dev)
            self.sums.data.index_add_(0, members, embeddings.to(dev, self.sums.data.dtype))
            self.size.data.index_add_(0, members, torch.ones_like(members))
            self.last.data.scatter_reduce_(0, members, events.to(dev), "amax")



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
        for offset, (n, k, s) in enumerate(zip(names, kinds, surfaces, strict=True)):
            self.names.append(n)
            self.kinds.append(k)
            self.surfaces.append(s)
            self.by_name[n] = start + offset
        return list(range(start, start + len(names)))


def row_dots(a: torch.Tensor, a_idx: torch.Tensor, b: torch.Tensor, b_idx: torch.Tensor, dtype: torch.dtype,
             chunk: int = 2048, acc: torch.dtype | None = None) -> torch.Tensor:
    """a[a_idx[i]] . b[b_idx[i]] for every i, summed in ``acc`` (None: ``dtype``) and given in ``dtype``.
    Each pair is one row of a row-wise reduction, so equal rows give equal values wherever they fall (a
    matrix-vector product for one question, used before, summed a chunk's last rows another way: identical
    events got cosines an ulp apart). Chunks of a few thousand rows keep the gathered temporaries in cache
    (on CPU, 2048 rows ran 8x faster than 65536); index_select, not advanced indexing: several times faster
    for row gathers on CPU."""
    work = dtype if acc is None else acc
    out = torch.empty(a_idx.numel(), dtype=dtype, device=a.device)
    for start in range(0, a_idx.numel(), chunk):
        sl = slice(start, start + chunk)
        rows = b.index_select(0, b_idx[sl]).to(work)
        out[sl] = torch.linalg.vecdot(a.index_select(0, a_idx[sl]).to(work), rows).to(dtype)
    return out
