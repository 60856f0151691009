"""The fast path: validate, embed, link (temporal + semantic), segment episodes, index, enqueue.

It never calls an LLM. A batch is validated completely before anything is written, so
bad input raises with the offending record named and leaves the store as it was.
"""
from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, replace
from datetime import datetime, timezone

import torch

from magma_torch.config.schema import FastPathConfig
from magma_torch.errors import MagmaError
from magma_torch.ingest.episodes import assign_episodes
from magma_torch.store.persistence import float32_from_base64, float32_to_base64
from magma_torch.store.store import MemoryStore
from magma_torch.store.tables import EventRow, content_key
from magma_torch.text.embedder import Embedder

log = logging.getLogger(__name__)

_FIELDS = {"text", "timestamp", "speaker", "source_id", "session_id", "stream", "metadata"}
_LINK_CHUNK = 256  # batch rows per semantic-neighbour search


class IngestError(MagmaError, ValueError):
    """A record the fast path refuses; the message names the record."""


def _record_name(i: int, rec: Mapping) -> str:
    sid = rec.get("source_id") if isinstance(rec, Mapping) else None
    return f"record {i}" + (f" (source_id={sid!r})" if sid is not None else "")


def validate(records: list[Mapping], store: MemoryStore, cfg: FastPathConfig,
             backfill: bool = False) -> tuple[list[EventRow], list[int | None], bool]:
    """Turn raw records into rows. Returns (new rows, per-record existing id or None, whether a
    new row is older than its stream's last event: refused unless ``backfill``)."""
    from magma_torch.text.temporal import resolve_dates  # lazy: dateparser, text records only

    rows: list[EventRow] = []
    existing: list[int | None] = []
    seen: dict = {}   # source ids and content keys of this batch's new rows -> -1 - row index
    last_ts = {stream: store.events.rows[i].timestamp for stream, i in store.events.last_of_stream.items()}
    horizon = horizon_of(cfg)
    goes_back = False
    for i, rec in enumerate(records):
        name = _record_name(i, rec)
        if not isinstance(rec, Mapping):
            raise IngestError(f"{name}: expected a mapping, got {type(rec).__name__}")
        unknown = set(rec) - _FIELDS
        if unknown:
            raise IngestError(f"{name}: unknown field(s) {sorted(unknown)}; allowed: {sorted(_FIELDS)}")
        text = checked_text(name, rec.get("text"))
        ts, epoch = checked_time(name, rec.get("timestamp"), horizon, cfg)
        source_id = (None if rec.get("source_id") is None
                     else checked_unicode(name, "source_id", str(rec["source_id"])))
        stream = checked_unicode(name, "stream", str(rec.get("stream") or cfg.default_stream))
        speaker = None if rec.get("speaker") is None else checked_unicode(name, "speaker", str(rec["speaker"]))
        # Idempotent: a known source_id, or without one the same text, time, speaker and stream,
        # returns the node it already has.
        key = source_id if source_id is not None else content_key(text, epoch, speaker, stream)
        known = store.events.by_source if source_id is not None else store.events.by_content
        if key in known or key in seen:
            if source_id is not None:
                held = store.events.rows[known[key]] if key in known else rows[-1 - seen[key]]
                _check_same_turn(name, source_id, held, content_key(text, epoch, speaker, stream))
            existing.append(known.get(key, seen.get(key)))
            continue
        if stream in last_ts and epoch < last_ts[stream]:
            if not backfill:
                last = datetime.fromtimestamp(last_ts[stream], timezone.utc).replace(tzinfo=None)
                raise IngestError(f"{name}: timestamp {ts.isoformat()} goes backwards in stream {stream!r} (last "
                                  f"event {last.isoformat()}); pass backfill=True to insert it at its place")
            goes_back = True
        last_ts[stream] = max(epoch, last_ts.get(stream, epoch))
        metadata = rec.get("metadata")
        if metadata is not None and not isinstance(metadata, Mapping):
            raise IngestError(f"{name}: metadata must be a mapping, got {type(metadata).__name__}")
        try:
            # Stored as JSON reads it back, so the store, its save, its log and an export agree.
            metadata = json.loads(json.dumps(dict(metadata), ensure_ascii=False).encode("utf-8")) if metadata else None
        except (TypeError, ValueError, RecursionError) as err:   # UnicodeEncodeError: a lone surrogate
            raise IngestError(f"{name}: metadata is not JSON-serialisable: {err}") from None
        if (depth := _depth(metadata)) > MAX_METADATA_DEPTH:
            # deeper, the save, the export and the log's record (dataclasses.asdict) ran out of recursion
            raise IngestError(f"{name}: metadata is nested {depth} levels deep, more than {MAX_METADATA_DEPTH}")
        rows.append(EventRow(text=text, timestamp=epoch, stream=stream, speaker=speaker, source_id=source_id,
                             session_id=(None if rec.get("session_id") is None
                                         else checked_unicode(name, "session_id", str(rec["session_id"]))),
                             dates=[_date_dict(d) for d in resolve_dates(text, ts)], metadata=metadata))
        existing.append(None)
        seen[key] = -len(rows)  # placeholder -1 - row index: resolved to a real id after append
    return rows, existing, goes_back


MAX_METADATA_DEPTH = 64


def _depth(value) -> int:
    """Levels of nested lists and mappings in JSON ``value`` (a scalar: 0), without recursion."""
    deepest, stack = 0, [(value, 0)]
    while stack:
        v, d = stack.pop()
        if isinstance(v, (dict, list)):
            deepest = max(deepest, d + 1)
            stack.extend((x, d + 1) for x in (v.values() if isinstance(v, dict) else v))
    return deepest


def _check_same_turn(name: str, source_id: str, held: EventRow, key: tuple) -> None:
    """A known source id is the same turn again only with the same text, time, speaker and stream:
    a different one would be dropped in silence (two conversations sharing turn ids, say)."""
    differ = [f for f, a, b in zip(("text", "timestamp", "speaker", "stream"),
                                   content_key(held.text, held.timestamp, held.speaker, held.stream), key,
                                   strict=True) if a != b]
    if differ:
        raise IngestError(f"{name}: source_id {source_id!r} is already stored with another {', '.join(differ)} "
                          f"(stream {held.stream!r}); give each turn its own source_id, or update() the stored one")


def checked_text(name: str, text) -> str:
    if not isinstance(text, str) or not text.strip():
        raise IngestError(f"{name}: text is empty or not a string")
    return checked_unicode(name, "text", text)


def checked_unicode(name: str, field: str, value: str) -> str:
    """``value`` when it can be written as UTF-8; a lone surrogate ("\\ud800", from a bad decode) is
    refused naming the record, where the embedder's tokenizer raised a bare TypeError."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as err:
        raise IngestError(f"{name}: {field} is not valid Unicode ({err.reason} at character {err.start})") from None
    return value


def checked_time(name: str, value, horizon: float, cfg: FastPathConfig) -> tuple[datetime, float]:
    """(parsed timestamp, epoch seconds UTC); refuses a missing one and one past ``horizon``."""
    from magma_torch.text.temporal import parse_timestamp

    if value in (None, ""):
        raise IngestError(f"{name}: missing timestamp")
    try:
        ts = parse_timestamp(value)
    except ValueError as err:
        raise IngestError(f"{name}: {err}") from None
    epoch = as_utc(ts).timestamp()
    if epoch > horizon:
        # It would block its stream: every later add would go backwards in time.
        raise IngestError(f"{name}: timestamp {ts.isoformat()} is more than fast_path.future_horizon_days="
                          f"{cfg.future_horizon_days:g} days ahead of now")
    return ts, epoch


def horizon_of(cfg: FastPathConfig) -> float:
    """The latest epoch second a record may have: "now" is the wall clock in UTC (stored times
    are wall-clock times read as UTC, as_utc)."""
    return datetime.now(timezone.utc).timestamp() + cfg.future_horizon_days * 86400.0


def revise(store: MemoryStore, row: int, text: str | None, timestamp, cfg: FastPathConfig) -> EventRow:
    """Event ``row`` with a new text and/or timestamp (dates re-resolved), validated as ``add``
    validates: no empty text, no time past the horizon, and no time that breaks its stream's
    order (before its predecessor's or after its successor's: it keeps its place in the chain)."""
    from magma_torch.text.temporal import resolve_dates

    ev, old = store.events, store.events.rows[row]
    name = f"event {ev.ids[row]}" + (f" (source_id={old.source_id!r})" if old.source_id is not None else "")
    text = old.text if text is None else checked_text(name, text)
    if timestamp is None:
        ts, epoch = datetime.fromtimestamp(old.timestamp, timezone.utc).replace(tzinfo=None), old.timestamp
    else:
        ts, epoch = checked_time(name, timestamp, horizon_of(cfg), cfg)
    for nb, breaks in ((int(ev.prev.data[row]), lambda t: epoch < t), (int(ev.next.data[row]), lambda t: epoch > t)):
        if nb >= 0 and breaks(ev.rows[nb].timestamp):
            side = "before its predecessor" if nb == int(ev.prev.data[row]) else "after its successor"
            raise IngestError(f"{name}: timestamp {ts.isoformat()} goes {side} event {ev.ids[nb]} in stream "
                              f"{old.stream!r}; an update keeps the event's place in the stream")
    return replace(old, text=text, timestamp=epoch, dates=[_date_dict(d) for d in resolve_dates(text, ts)])


def as_utc(ts: datetime) -> datetime:
    """Naive timestamps are wall-clock times; store them as if UTC so no local zone leaks in."""
    return ts.replace(tzinfo=timezone.utc) if ts.tzinfo is None else ts.astimezone(timezone.utc)


def _date_dict(d) -> dict:
    return {"expression": d.expression, "start": d.start.isoformat(), "end": d.end.isoformat(),
            "granularity": d.granularity, "label": d.label()}


def embed_text(row: EventRow, cfg: FastPathConfig) -> str:
    return f"{row.speaker}: {row.text}" if cfg.embed_speaker and row.speaker else row.text


@dataclass
class PreparedBatch:
    """A validated, embedded batch not yet written: what a write-ahead log records."""

    rows: list[EventRow]                 # the new events, in id order
    embeddings: torch.Tensor             # [len(rows), d] in the store's dtype and device
    existing: list[int | None]           # per input record: the row it already had, or None when new
    backfill: bool = False               # some row is older than its stream's last event: inserted, not appended

    def to_record(self, store: MemoryStore) -> dict:
        """A JSON write-ahead-log record of the new events, to be written to ``store``: appended
        at row ``first`` (an add) or, a backfill, given ids from ``first`` on. The embeddings
        are logged (float32, base64), not recomputed on replay: replay must give the same
        semantic edges, and re-encoding in other batch shapes or on another device is not
        bit-exact (a cosine at the threshold could flip)."""
        first = store.events.next_id if self.backfill else len(store)
        return {"op": "backfill" if self.backfill else "add", "first": first, "rows": [asdict(r) for r in self.rows],
                "embeddings": float32_to_base64(self.embeddings)}

    @classmethod
    def from_record(cls, record: dict, store: MemoryStore) -> "PreparedBatch":
        rows = [EventRow(**r) for r in record["rows"]]
        emb = float32_from_base64(record["embeddings"], (len(rows), store.dim))
        emb = emb.to(store.device, store.events.embeddings.data.dtype)
        return cls(rows, emb, [None] * len(rows), record["op"] == "backfill")


def ingest(records: Iterable[Mapping], store: MemoryStore, embedder: Embedder, cfg: FastPathConfig,
           journal: Callable[[PreparedBatch], None] | None = None,
           submit: Callable[[list[int]], None] | None = None,
           insert: Callable[[PreparedBatch], list[int]] | None = None) -> tuple[list[int], list[int]]:
    """Add records; returns (stable event id per record, rows of the events that are new).
    ``journal`` sees each batch with new events before the store does (a write-ahead log); when
    it raises, nothing is written. ``submit`` gets the new rows before the next write can
    renumber them (a forget). ``insert`` (a backfill) writes a batch with events older than
    their stream's last one, queueing them itself, and returns their rows; without it such a
    record is refused."""
    records = list(records)
    with store.ingest_lock:
        batch = prepare(records, store, embedder, cfg, backfill=insert is not None)
        if batch.rows and journal is not None:
            journal(batch)
        # Ids, not rows: an insert renumbers the stored rows.
        known = [None if e is None or e < 0 else store.events.ids[e] for e in batch.existing]
        if batch.backfill:
            rows = insert(batch)
        else:
            rows = apply(batch, store, cfg)
            if submit is not None:
                submit(rows)
        new_ids = [store.events.ids[r] for r in rows]
        new_iter = iter(new_ids)
        out = [next(new_iter) if e is None else (k if e >= 0 else new_ids[-1 - e])
               for e, k in zip(batch.existing, known, strict=True)]
    return out, rows


def prepare(records: list[Mapping], store: MemoryStore, embedder: Embedder, cfg: FastPathConfig,
            backfill: bool = False) -> PreparedBatch:
    """Validate and embed (the caller holds ``store.ingest_lock``)."""
    rows, existing, goes_back = validate(records, store, cfg, backfill)
    emb = store.events.embeddings.data.new_zeros((0, store.dim))
    if rows:
        texts = [embed_text(r, cfg) for r in rows]
        _warn_truncation(texts, [_record_name(i, r) for i, (r, e) in enumerate(zip(records, existing, strict=True))
                                 if e is None], embedder)
        emb = embedder.encode(texts).to(store.device, store.events.embeddings.data.dtype)
    return PreparedBatch(rows, emb, existing, goes_back)


def apply(batch: PreparedBatch, store: MemoryStore, cfg: FastPathConfig) -> list[int]:
    """Write a prepared batch: events, indexes, temporal and semantic edges; returns the new ids.
    Replaying a logged batch onto the store it was prepared for gives the same events and edges."""
    if not batch.rows:
        return []
    tokens = store.keyword_index.tokenize([embed_text(r, cfg) for r in batch.rows])
    with store.lock:
        ids = store.append_events(batch.rows, batch.embeddings, tokens)
        _link(store, ids, batch.embeddings, cfg)
        assign_episodes(store, ids, batch.embeddings, cfg.episodes, tokens)
    return ids


def _link(store: MemoryStore, ids: list[int], emb: torch.Tensor, cfg: FastPathConfig) -> None:
    """Temporal edge to the stream's previous event; semantic edges to earlier neighbours."""
    link_temporal(store, ids)
    link_semantic(store, ids, emb, cfg)


def link_semantic(store: MemoryStore, ids: list[int], emb: torch.Tensor, cfg: FastPathConfig) -> None:
    """Semantic edges from each of the (consecutive) rows ``ids`` to its k nearest earlier events."""
    new = torch.tensor(ids, dtype=torch.long)
    if cfg.semantic_k <= 0:
        return
    # The k nearest *earlier* events, as if the batch were added one event at a time: a
    # chunk searches only ids up to its own last event, with room for the chunk's own
    # (self and later) events, which are then dropped.
    for a in range(0, len(ids), _LINK_CHUNK):
        rows = new[a:a + _LINK_CHUNK]
        scores, nbrs = store.vector_index.search(emb[a:a + _LINK_CHUNK], cfg.semantic_k + len(rows),
                                                 upto=int(rows[-1]) + 1)
        scores, nbrs = scores.cpu(), nbrs.cpu()
        keep = (nbrs >= 0) & (nbrs < rows[:, None]) & (scores > cfg.theta_sim)
        keep &= torch.cumsum(keep.long(), 1) <= cfg.semantic_k   # results are in descending score
        src = rows[:, None].expand_as(nbrs)[keep]
        store.graph.add_edges("semantic", src, nbrs[keep], scores[keep])


def link_temporal(store: MemoryStore, ids: list[int] | range) -> None:
    """The immutable chain edge from each new event's stream predecessor to it."""
    prev = store.events.prev.data[ids[0]:].cpu()
    new = torch.arange(ids[0], ids[0] + len(ids), dtype=torch.long)
    has_prev = prev >= 0
    store.graph.add_edges("temporal", prev[has_prev], new[has_prev])


def _warn_truncation(texts: list[str], names: list[str], embedder: Embedder) -> None:
    limit = embedder.max_seq_length
    # Cheap pre-filter: a MiniLM word piece is at least one character, plus [CLS] and [SEP].
    long_idx = [i for i, t in enumerate(texts) if len(t) > limit - 2]
    if not long_idx:
        return
    counts = embedder.count_tokens([texts[i] for i in long_idx])
    for i, c in zip(long_idx, counts, strict=True):
        if c > limit:
            log.warning("%s: %d tokens; embedded truncated to %d, stored whole", names[i], c, limit)
