"""Save folders: a store (plus the caller's JSON state) on disk, exactly and atomically.

A save is a folder:

- ``tensors.safetensors``: ``events.{embeddings,timestamps,date_spans,prev,next,episode,ids}``
  (``ids``: each row's stable event id; absent in saves from before forget: the row numbers),
  ``entities.embeddings``, ``episodes.{sums,first,last,size}`` and
  ``graph.<relation>.{src,dst,weight}`` per relation;
- ``events.jsonl``: one ``EventRow`` per line, line i = event id i (metadata must be
  JSON-serialisable and comes back as JSON types: tuples as lists);
- ``entities.json``: ``names``, ``kinds``, ``surfaces`` (index = entity id);
- ``state.json``: format, version, counts and the caller's state (for ``MagmaMemory``:
  configs, namespace, slow-path queue and statuses, consolidator state);
- ``manifest.json``: size and SHA-256 of every other file, written last.

``capture_store`` copies a store's contents out under its lock as a ``SavedStore``;
``encode_save`` turns that into these files, ``magma_torch.store.jsonl`` into portable JSON
lines, and ``load_store`` fills an empty store from either.

Nothing is pickled. ``write_save`` builds the folder as a temporary sibling, fsyncs it
and only then renames it into place, so a failed save leaves any earlier save intact;
``read_save`` verifies every file against the manifest before parsing any of it.
"""
from __future__ import annotations

import base64
import hashlib
import json
import logging
import os
import shutil
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load as load_tensors
from safetensors.torch import save as save_tensors

from magma_torch.errors import MagmaError
from magma_torch.files import fsync_dir, write_synced
from magma_torch.store.graph import RELATIONS, MultiGraph
from magma_torch.store.store import MemoryStore
from magma_torch.store.tables import EventRow

log = logging.getLogger(__name__)

FORMAT = "magma_torch.save"
VERSION = 1
TENSORS, EVENTS, ENTITIES, STATE, MANIFEST = (
    "tensors.safetensors", "events.jsonl", "entities.json", "state.json", "manifest.json")
FILES = (TENSORS, EVENTS, ENTITIES, STATE)


class CorruptSaveError(MagmaError, ValueError):
    """A save folder that is incomplete, corrupted or of an unknown format; names the file."""



class SaveNotFoundError(MagmaError, FileNotFoundError):
    """No save folder (or no checkpoint in a memory's folder) where one was to be read; names the path."""


class SaveWouldOverwriteError(MagmaError, FileExistsError):
    """A save to a path that holds something other than a save folder, which a save would replace,
    or that lies below a file; names the path (and the file in the way)."""


class StoreMismatchError(MagmaError, ValueError):
    """A save or memory folder opened as something it is not: it holds another namespace, or was
    written with other ingest settings or with embeddings of another dimension; names the path."""


@dataclass
class SavedStore:
    """A verified, parsed save folder (tensors on the CPU)."""

    path: Path | None              # None: captured from a live store (``capture_store``)
    tensors: dict[str, torch.Tensor]
    events: list[EventRow]
    entities: dict[str, list[str]]
    state: dict


# ---- save ----

def capture_store(store: MemoryStore, state: dict) -> SavedStore:
    """The store's contents and the caller's ``state`` (plus the counts) as own copies, not
    tied to a path. The caller holds ``store.lock`` (and whatever keeps ``state`` still);
    encoding them (``encode_save``, ``jsonl.write_jsonl``) then needs no lock."""
    ev, en, ep = store.events, store.entities, store.episodes
    tensors = {"events.embeddings": ev.embeddings.data, "events.timestamps": ev.timestamps.data,
               "events.date_spans": ev.date_spans.data, "events.prev": ev.prev.data,
               "events.next": ev.next.data, "events.episode": ev.episode.data,
               "entities.embeddings": en.embeddings.data, "episodes.sums": ep.sums.data,
               "episodes.first": ep.first.data, "episodes.last": ep.last.data, "episodes.size": ep.size.data,
               "events.ids": torch.tensor(ev.ids, dtype=torch.long)}
    tensors.update({f"graph.{k}": v for k, v in store.graph.state().items()})
    # Own CPU copies: the live columns are views into larger, still-growing buffers.
    tensors = {k: v.detach().cpu().contiguous().clone() for k, v in tensors.items()}
    counts = {"events": len(ev), "entities": len(en), "episodes": len(ep), "dim": store.dim,
              "edges": store.graph.counts(), "next_id": ev.next_id}
    entities = {"names": list(en.names), "kinds": list(en.kinds), "surfaces": list(en.surfaces)}
    return SavedStore(None, tensors, list(ev.rows), entities, {"counts": counts, **state})


def encode_save(saved: SavedStore) -> dict[str, bytes]:
    """The contents of every file of a save folder but the manifest."""
    return {TENSORS: save_tensors(saved.tensors),
            EVENTS: "".join(event_line(i, r) for i, r in enumerate(saved.events)).encode(),
            ENTITIES: _json(saved.entities),
            STATE: _json({"format": FORMAT, "version": VERSION, **saved.state})}


def float32_to_base64(t: torch.Tensor) -> str:
    """A float tensor as base64 of its little-endian float32 bytes: exact for float32 values,
    a quarter of the size of a JSON list of the same numbers."""
    return base64.b64encode(t.detach().float().cpu().contiguous().numpy().astype("<f4").tobytes()).decode()


def float32_from_base64(text: str, shape: tuple[int, ...]) -> torch.Tensor:
    """The float32 CPU tensor ``float32_to_base64`` wrote (raises ValueError on a wrong size)."""
    return torch.from_numpy(np.frombuffer(base64.b64decode(text, validate=True), dtype="<f4").reshape(shape).copy())


def _json(obj) -> bytes:
    return json.dumps(obj, ensure_ascii=False).encode()


def event_line(i: int, row: EventRow, **extra) -> str:
    """Event ``i`` as one JSON line: its row's fields and ``extra``."""
    try:
        return json.dumps({**extra, **asdict(row)}, ensure_ascii=False) + "\n"
    except (TypeError, ValueError) as err:
        raise TypeError(f"event {i} (source_id={row.source_id!r}): metadata is not JSON-serialisable: {err}") from None


def write_save(path: str | os.PathLike, files: dict[str, bytes]) -> None:
    """Write ``files`` plus a manifest as folder ``path``, replacing an earlier save only
    once the new one is complete on disk.

    A crash between moving the old save aside and moving the new one in (two renames)
    leaves the old one as a ``.<name>.old-*`` sibling. A ``path`` that holds anything but a
    save (a file, a folder with other contents) is refused with ``SaveWouldOverwriteError``.
    """
    path = Path(path)
    _check_replaceable(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # os.mkdir, not tempfile.mkdtemp: the folder becomes the save, so it keeps the umask's mode.
    tmp = path.with_name(f".{path.name}.tmp-{uuid.uuid4().hex}")
    os.mkdir(tmp)
    try:
        manifest = {"format": FORMAT, "version": VERSION,
                    "files": {name: {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
                              for name, data in files.items()}}
        for name, data in files.items():
            write_synced(tmp / name, data)
        # The manifest goes last: a folder holding one has every file it lists.
        write_synced(tmp / MANIFEST, _json(manifest))
        fsync_dir(tmp)
        _move_into_place(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def file_above(path: Path) -> Path | None:
    """The first of ``path``'s parents, from the root down, that is a file and not a folder
    (None: none is), so that a refusal names the file in the way rather than ``path``."""
    return next((p for p in reversed(path.parents) if p.exists() and not p.is_dir()), None)


def refuse_below_file(path: Path, doing: str) -> None:
    """SaveWouldOverwriteError naming the file above ``path`` (``file_above``), if there is one: ``doing``
    (save, export) below it would fail in mkdir or open with a raw FileExistsError or NotADirectoryError."""
    if (file := file_above(path)) is not None:
        raise SaveWouldOverwriteError(f"{path}: {file} is a file, not a folder; cannot {doing} below it")


def _check_replaceable(path: Path) -> None:
    refuse_below_file(path, "save")
    if path.exists() and not (path.is_dir() and (not any(path.iterdir()) or (path / MANIFEST).is_file())):
        raise SaveWouldOverwriteError(f"{path}: exists and is not a save folder (no {MANIFEST}); "
                                      "refusing to replace it")


def _move_into_place(tmp: Path, path: Path) -> None:
    if not path.exists():
        os.rename(tmp, path)
        fsync_dir(path.parent)
        return
    # POSIX cannot rename a folder over a non-empty one: move the old save aside first.
    old = path.with_name(f".{path.name}.old-{uuid.uuid4().hex}")
    os.rename(path, old)
    try:
        os.rename(tmp, path)
    except BaseException:
        os.rename(old, path)
        raise
    fsync_dir(path.parent)
    try:
        shutil.rmtree(old)
    except OSError as err:  # the new save is in place; a leftover copy of the old one is harmless
        log.warning("could not remove the replaced save %s: %s", old, err)


def recover_interrupted_save(path: str | os.PathLike) -> None:
    """Finish what a crash left of ``write_save`` at ``path`` (the caller must be the only
    writer): a missing save whose earlier version was moved aside gets that version back;
    temporary and moved-aside leftovers are removed."""
    path = Path(path)
    olds = sorted(path.parent.glob(f".{path.name}.old-*"), key=lambda p: p.stat().st_mtime)
    if olds and not path.exists():
        os.rename(olds.pop(), path)
        fsync_dir(path.parent)
    for leftover in olds + sorted(path.parent.glob(f".{path.name}.tmp-*")):
        shutil.rmtree(leftover, ignore_errors=True)


# ---- load ----

@contextmanager
def named_damage(where, errors: tuple[type[Exception], ...], what: str = "") -> Iterator[None]:
    """Around reading a save or export into tables: a bare error of ``errors`` (what a field of the wrong
    type or shape raises there) becomes a ``CorruptSaveError`` naming ``where`` (then ``what``); a
    ``MagmaError`` passes as it is."""
    try:
        yield
    except MagmaError:
        raise
    except errors as err:
        raise CorruptSaveError(f"{where}: {what}{type(err).__name__}: {err}") from None


def read_save(path: str | os.PathLike) -> SavedStore:
    """Read and verify a save folder; raises ``CorruptSaveError`` naming the bad file, ``SaveNotFoundError``
    when there is no folder at ``path``."""
    path = Path(path)
    if not path.is_dir():
        raise SaveNotFoundError(f"{path}: a file, not a save folder" if path.exists()
                                else f"{path}: no such save folder")
    manifest = _parse_json(path / MANIFEST, _read(path / MANIFEST))
    _check_format(path / MANIFEST, manifest)
    listed = manifest.get("files", {})
    blobs = {}
    for name in FILES:
        file = path / name
        if name not in listed:
            raise CorruptSaveError(f"{path / MANIFEST}: does not list {name}")
        data = _read(file)
        if len(data) != listed[name]["bytes"]:
            raise CorruptSaveError(f"{file}: {len(data)} bytes, the manifest says {listed[name]['bytes']} "
                                   "(truncated or overwritten)")
        if hashlib.sha256(data).hexdigest() != listed[name]["sha256"]:
            raise CorruptSaveError(f"{file}: SHA-256 does not match the manifest (corrupted)")
        blobs[name] = data
    state = _parse_json(path / STATE, blobs[STATE])
    _check_format(path / STATE, state)
    try:
        tensors = load_tensors(blobs[TENSORS])
    except Exception as err:  # safetensors raises its own error type
        raise CorruptSaveError(f"{path / TENSORS}: {err}") from None
    try:
        # Split on "\n" only: JSON escapes it, but not other characters splitlines() breaks on (U+2028).
        events = [EventRow(**json.loads(line)) for line in blobs[EVENTS].decode().split("\n") if line]
    except (ValueError, TypeError) as err:
        raise CorruptSaveError(f"{path / EVENTS}: {err}") from None
    saved = SavedStore(path, tensors, events, _parse_json(path / ENTITIES, blobs[ENTITIES]), state)
    check_counts(saved)
    return saved


def _read(file: Path) -> bytes:
    try:
        return file.read_bytes()
    except FileNotFoundError:
        raise CorruptSaveError(f"{file}: missing (incomplete save?)") from None


def _parse_json(file: Path, data: bytes):
    try:
        return json.loads(data)
    except ValueError as err:
        raise CorruptSaveError(f"{file}: not valid JSON: {err}") from None


def _check_format(file: Path, obj) -> None:
    if not isinstance(obj, dict) or obj.get("format") != FORMAT:
        raise CorruptSaveError(f"{file}: not a magma_torch save")
    if obj.get("version") != VERSION:
        raise CorruptSaveError(f"{file}: format version {obj.get('version')}; this magma_torch reads {VERSION}")


def check_counts(saved: SavedStore, one_file: bool = False) -> None:
    """The files agree with each other and with the counts in state.json (``one_file``: a
    JSON-lines export, whose errors name that file)."""
    c, t = saved.state["counts"], saved.tensors
    p = _Same(saved.path) if one_file else saved.path
    expected = {"events.embeddings": (c["events"], c["dim"]), "events.timestamps": (c["events"],),
                "events.date_spans": (c["events"], 2), "events.prev": (c["events"],),
                "events.next": (c["events"],), "entities.embeddings": (c["entities"], c["dim"])}
    if "episodes" in c:  # saves from before episodes: segmented again on load (load_store)
        expected.update({"events.episode": (c["events"],), "episodes.sums": (c["episodes"], c["dim"]),
                         **{f"episodes.{col}": (c["episodes"],) for col in ("first", "last", "size")}})
    if "events.ids" in t:   # saves from before forget have none: ids are the row numbers
        expected["events.ids"] = (c["events"],)
    for rel in RELATIONS:
        if rel in c["edges"]:
            expected.update({f"graph.{rel}.{col}": (c["edges"][rel],) for col in ("src", "dst", "weight")})
    for key, shape in expected.items():
        if key not in t or tuple(t[key].shape) != shape:
            got = tuple(t[key].shape) if key in t else "missing"
            raise CorruptSaveError(f"{p / TENSORS}: {key} has shape {got}, expected {shape}")
    if len(saved.events) != c["events"]:
        raise CorruptSaveError(f"{p / EVENTS}: {len(saved.events)} events, state.json says {c['events']}")
    if any(len(saved.entities[k]) != c["entities"] for k in ("names", "kinds", "surfaces")):
        raise CorruptSaveError(f"{p / ENTITIES}: entity lists do not all have {c['entities']} entries")


class _Same:
    """``_Same(path) / name`` is ``path``: ``check_counts`` names one file for every part."""

    def __init__(self, path: Path):
        self.path = path

    def __truediv__(self, _name: str) -> Path:
        return self.path


def load_store(saved: SavedStore, store: MemoryStore, keyword_text: Callable[[EventRow], str],
               tokens: list[list[str]] | None = None) -> list[list[str]]:
    """Fill an empty ``store`` from ``saved``. ``keyword_text`` gives the text the fast path
    tokenised for an event (the keyword indexes keep tokens, not texts, so they are rebuilt),
    unless the caller has the ``tokens`` already. Returns them: a save from before episodes
    leaves them to the caller to segment."""
    if len(store.events) or len(store.entities) or sum(store.graph.counts().values()):
        raise ValueError("load_store needs an empty store")
    t, dim = saved.tensors, saved.state["counts"]["dim"]
    if dim != store.dim:
        raise StoreMismatchError(f"{saved.path}: saved with {dim}-dim embeddings, the embedder gives {store.dim}; "
                                 "open it with the embedder it was saved with (memory.embedder)")
    with store.lock:
        rows = saved.events
        if tokens is None:
            tokens = store.keyword_index.tokenize([keyword_text(r) for r in rows]) if rows else []
        if rows:
            ids = t["events.ids"].tolist() if "events.ids" in t else None
            store.append_events(rows, t["events.embeddings"], tokens, ids)
            # append_events derived these columns from the rows; the saved ones are authoritative.
            for col in ("timestamps", "date_spans", "prev", "next"):
                getattr(store.events, col).data.copy_(t[f"events.{col}"])
        store.events.next_id = max(store.events.next_id, saved.state["counts"].get("next_id", 0))
        e = saved.entities
        if e["names"]:
            store.entities.append(e["names"], e["kinds"], e["surfaces"], t["entities.embeddings"])
        store.graph = MultiGraph.from_state({k[len("graph."):]: v for k, v in t.items() if k.startswith("graph.")},
                                            store.device)
        if "events.episode" in t:
            _restore_episodes(store, t, tokens)
    return tokens


def _restore_episodes(store: MemoryStore, t: dict[str, torch.Tensor], tokens: list[list[str]]) -> None:
    ev, ep = store.events, store.episodes
    ev.episode.data.copy_(t["events.episode"])
    first = t["episodes.first"].tolist()
    ep.add([ev.rows[f].stream for f in first], first, torch.zeros(0, dtype=torch.long),
           torch.zeros(0, dtype=torch.long), t["episodes.sums"][:0])
    for col in ("sums", "last", "size"):
        getattr(ep, col).data.copy_(t[f"episodes.{col}"])
    docs: list[list[str]] = [[] for _ in first]
    for e, terms in zip(t["events.episode"].tolist(), tokens, strict=True):
        docs[e].extend(terms)
    store.episode_keywords.add(docs)
