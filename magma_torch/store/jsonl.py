"""A memory as portable JSON lines: ``MagmaMemory.export_jsonl`` / ``MagmaMemory.import_jsonl``.

One JSON object per line, told apart by ``type``, in this order:

- ``header``: ``format`` ("magma_torch.jsonl"), ``version``, ``namespace``, the memory and
  consolidation ``config``/``consolidation``, and ``counts`` (events, entities, episodes,
  embedding ``dim``, edges per relation);
- ``event``, one per event in row order: ``id`` (the row number), ``event_id`` (its stable id,
  ``MagmaMemory.event``; absent in exports from before forget: the row number), the stored row
  (``text``, ``timestamp`` in epoch seconds UTC, ``stream``, ``speaker``, ``source_id``,
  ``session_id``, resolved ``dates``, ``metadata``), ``embedding``, ``date_span`` ([start, end]
  epoch seconds of the mentioned dates, null when none), temporal-chain ``prev``/``next`` (-1:
  none), ``episode``, and the slow path's ``status`` ([status, reason]);
- ``edges``, one per relation of ``magma_torch.store.graph.RELATIONS``: ``src``, ``dst``, ``weight``
  (``supersedes``: later event -> the earlier one it updates, which gives the events' valid time);
- ``entity``, one per entity node: ``id``, ``name``, ``kind``, ``surface``, ``embedding``;
- ``episode``, one per episode node: ``id``, ``first``, ``last``, ``size``, ``sums`` (the summed
  member embeddings);
- ``slow_path``: the ``queue`` of pending events in order and the ``consolidator``'s state;
- ``end``: ``lines``, the number of lines before it (a cut file is refused).

Vectors are base64 of little-endian float32 (``persistence.float32_to_base64``); every other
number is a JSON number, which float32 weights and float64 timestamps survive exactly. Nothing
is pickled. The contents are those of a save folder (``persistence.capture_store``), and an
import is loaded by the same ``persistence.load_store``, so the round trip is exact.
"""
from __future__ import annotations

import json
import math
import os
from collections.abc import Iterator
from pathlib import Path

import torch

from magma_torch.files import replaced_atomically
from magma_torch.store.graph import RELATIONS
from magma_torch.store.persistence import (CorruptSaveError, SavedStore, SaveNotFoundError, SaveWouldOverwriteError,
                                           check_counts, event_line, float32_from_base64, float32_to_base64,
                                           named_damage, refuse_below_file)
from magma_torch.store.tables import EventRow

FORMAT = "magma_torch.jsonl"
VERSION = 1
_HEADER_KEYS = ("namespace", "config", "consolidation")   # of the captured state, besides the counts


def write_jsonl(saved: SavedStore, path: str | os.PathLike) -> None:
    """Write ``saved`` (captured with a ``MagmaMemory`` state) to ``path``; atomic: the file
    appears complete or not at all. A folder at ``path``, or a file above it, is refused
    (``SaveWouldOverwriteError``) before anything is written."""
    path = Path(path)
    refuse_below_file(path, "export")
    if path.is_dir():   # before: IsADirectoryError from the temporary file's rename
        raise SaveWouldOverwriteError(f"{path}: a folder; an export is one file")
    path.parent.mkdir(parents=True, exist_ok=True)
    with replaced_atomically(path) as f:
        n = 0
        for line in _lines(saved):
            f.write(line)
            n += 1
        f.write(_line({"type": "end", "lines": n}))


def _line(obj: dict) -> str:
    return json.dumps(obj, ensure_ascii=False) + "\n"


def _lines(saved: SavedStore) -> Iterator[str]:
    t, st = saved.tensors, saved.state
    yield _line({"type": "header", "format": FORMAT, "version": VERSION, "counts": st["counts"],
                 **{k: st[k] for k in _HEADER_KEYS}})
    spans = t["events.date_spans"].tolist()
    prev, nxt, episode = (t[f"events.{c}"].tolist() for c in ("prev", "next", "episode"))
    event_ids = t["events.ids"].tolist()
    status = st["worker"]["status"]
    for i, row in enumerate(saved.events):
        yield event_line(i, row, type="event", id=i, event_id=event_ids[i],
                         embedding=float32_to_base64(t["events.embeddings"][i]),
                         date_span=[None if math.isnan(x) else x for x in spans[i]], prev=prev[i], next=nxt[i],
                         episode=episode[i], status=status[i])
    for rel in RELATIONS:
        yield _line({"type": "edges", "relation": rel,
                     **{col: t[f"graph.{rel}.{col}"].tolist() for col in ("src", "dst", "weight")}})
    e = saved.entities
    for i, (name, kind, surface) in enumerate(zip(e["names"], e["kinds"], e["surfaces"], strict=True)):
        yield _line({"type": "entity", "id": i, "name": name, "kind": kind, "surface": surface,
                     "embedding": float32_to_base64(t["entities.embeddings"][i])})
    first, last, size = (t[f"episodes.{c}"].tolist() for c in ("first", "last", "size"))
    for i in range(len(first)):
        yield _line({"type": "episode", "id": i, "first": first[i], "last": last[i], "size": size[i],
                     "sums": float32_to_base64(t["episodes.sums"][i])})
    yield _line({"type": "slow_path", "queue": st["worker"]["queue"], "consolidator": st["consolidator"]})


_ORDER = ("header", "event", "edges", "entity", "episode", "slow_path", "end")
_ROW_FIELDS = tuple(EventRow.__dataclass_fields__)


def read_jsonl(path: str | os.PathLike) -> SavedStore:
    """Parse and check an export; raises ``CorruptSaveError`` naming the file and line."""
    path = Path(path)
    if not path.is_file():   # before: open's FileNotFoundError or IsADirectoryError
        what = "a folder, not an export file" if path.is_dir() else "no such export file"
        raise SaveNotFoundError(f"{path}: {what}")
    reader = _Reader(path)
    with open(path, "rb") as f:
        # Lines split on "\n" only: JSON escapes it, not the other characters str.splitlines() breaks on.
        for number, raw in enumerate(f, 1):
            with named_damage(f"{path}:{number}", _DAMAGE):
                reader.add(json.loads(raw))
    with named_damage(path, _DAMAGE):    # the tables built from every line: a field of the wrong type fails here
        return reader.finish()


# What a field of the wrong type or shape raises where its line is read or its table built
_DAMAGE = (ValueError, TypeError, KeyError, IndexError, RuntimeError)


class _Reader:
    """Collects an export's lines into the parts of a ``SavedStore``."""

    def __init__(self, path: Path):
        self.path, self.lines, self.stage = path, 0, 0
        self.header: dict | None = None
        self.rows: list[EventRow] = []
        self.events: dict[str, list] = {k: [] for k in ("embedding", "date_span", "prev", "next", "episode", "status",
                                                        "event_id")}
        self.edges: dict[str, dict] = {}
        self.entities: dict[str, list] = {k: [] for k in ("name", "kind", "surface", "embedding")}
        self.episodes: dict[str, list] = {k: [] for k in ("first", "last", "size", "sums")}
        self.slow_path: dict | None = None
        self.ended = False

    def _fail(self, message: str) -> CorruptSaveError:
        return CorruptSaveError(f"{self.path}:{self.lines + 1}: {message}")

    def add(self, obj) -> None:
        kind = obj.get("type") if isinstance(obj, dict) else None
        if kind not in _ORDER or self.ended:
            raise self._fail(f"unexpected line of type {kind!r}" if not self.ended else "a line after the end line")
        if _ORDER.index(kind) < self.stage or (self.header is None and kind != "header"):
            raise self._fail(f"a {kind!r} line out of order (the order is {', '.join(_ORDER)})")
        self.stage = _ORDER.index(kind)
        getattr(self, f"_{kind}")(obj)
        self.lines += 1

    def _header(self, obj: dict) -> None:
        if obj.get("format") != FORMAT:
            raise self._fail(f"not a magma_torch JSON-lines export (format {obj.get('format')!r})")
        if obj.get("version") != VERSION:
            raise self._fail(f"format version {obj.get('version')}; this magma_torch reads {VERSION}")
        self.header = obj
        self.dim = int(obj["counts"]["dim"])

    def _event(self, obj: dict) -> None:
        self._check_id(obj, len(self.rows))
        self.rows.append(EventRow(**{k: obj[k] for k in _ROW_FIELDS}))
        self.events["embedding"].append(float32_from_base64(obj["embedding"], (self.dim,)))
        self.events["date_span"].append([math.nan if x is None else float(x) for x in obj["date_span"]])
        for k in ("prev", "next", "episode", "status"):
            self.events[k].append(obj[k])
        self.events["event_id"].append(obj.get("event_id", len(self.rows) - 1))

    def _edges(self, obj: dict) -> None:
        rel = obj["relation"]
        if rel not in RELATIONS or rel in self.edges:
            raise self._fail(f"edges of unknown or repeated relation {rel!r}")
        self.edges[rel] = {col: obj[col] for col in ("src", "dst", "weight")}

    def _entity(self, obj: dict) -> None:
        self._check_id(obj, len(self.entities["name"]))
        for k in ("name", "kind", "surface"):
            self.entities[k].append(obj[k])
        self.entities["embedding"].append(float32_from_base64(obj["embedding"], (self.dim,)))

    def _episode(self, obj: dict) -> None:
        self._check_id(obj, len(self.episodes["first"]))
        for k in ("first", "last", "size"):
            self.episodes[k].append(obj[k])
        self.episodes["sums"].append(float32_from_base64(obj["sums"], (self.dim,)))

    def _slow_path(self, obj: dict) -> None:
        self.slow_path = {"queue": obj["queue"], "consolidator": obj["consolidator"]}

    def _end(self, obj: dict) -> None:
        if obj.get("lines") != self.lines:
            raise self._fail(f"the end line counts {obj.get('lines')} lines before it, the file has {self.lines}")
        self.ended = True

    def _check_id(self, obj: dict, expected: int) -> None:
        if obj.get("id") != expected:
            raise self._fail(f"{obj['type']} id {obj.get('id')!r}, expected {expected} (ids run from 0, in order)")

    def finish(self) -> SavedStore:
        if not self.ended:
            raise self._fail("no end line: the file is cut off")
        # Exports from before supersession have no such edges: none were made.
        missing = sorted(set(RELATIONS) - set(self.edges) - {"supersedes"})
        if missing or self.slow_path is None:
            raise self._fail(f"no {'edges for ' + ', '.join(missing) if missing else 'slow_path line'}")
        long, f32 = torch.long, torch.float32
        t = {"events.embeddings": _stack(self.events["embedding"], self.dim),
             "events.timestamps": torch.tensor([r.timestamp for r in self.rows], dtype=torch.float64),
             "events.date_spans": torch.tensor(self.events["date_span"], dtype=torch.float64).reshape(-1, 2),
             "entities.embeddings": _stack(self.entities["embedding"], self.dim),
             "episodes.sums": _stack(self.episodes["sums"], self.dim)}
        t.update({f"events.{k}": torch.tensor(self.events[k], dtype=long) for k in ("prev", "next", "episode")})
        t["events.ids"] = torch.tensor(self.events["event_id"], dtype=long)
        t.update({f"episodes.{k}": torch.tensor(self.episodes[k], dtype=long) for k in ("first", "last", "size")})
        for rel, cols in self.edges.items():
            t.update({f"graph.{rel}.{c}": torch.tensor(v, dtype=f32 if c == "weight" else long)
                      for c, v in cols.items()})
        h = self.header
        state = {"counts": h["counts"], **{k: h[k] for k in _HEADER_KEYS},
                 "worker": {"queue": self.slow_path["queue"], "status": self.events["status"]},
                 "consolidator": self.slow_path["consolidator"]}
        entities = {"names": self.entities["name"], "kinds": self.entities["kind"],
                    "surfaces": self.entities["surface"]}
        saved = SavedStore(self.path, t, self.rows, entities, state)
        check_counts(saved, one_file=True)
        return saved


def _stack(vectors: list[torch.Tensor], dim: int) -> torch.Tensor:
    return torch.stack(vectors) if vectors else torch.zeros((0, dim))
