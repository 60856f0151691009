"""A persistent memory's folder, ``store_dir/<namespace>``, and how it survives a crash.

The folder holds ``checkpoint/`` (the last checkpoint, a save folder: ``persistence``), when
durable ``wal.jsonl`` (the write-ahead log of what came after it: ``wal``), and ``.lock``, which
the one memory that has the folder open holds.

``DurableFolder`` is the writer's side: it locks the folder, finishes a checkpoint a crash
interrupted, reads the checkpoint, replays the log, appends records, writes checkpoints and then
empties the log. ``read_live`` is a reader's side (``MagmaMemory.open_readonly``): no lock, no
write. What a log record does to a memory is not known here: the facade passes it in (``apply``),
with how to restore a checkpoint into the memory and how to encode the memory as one.
"""
from __future__ import annotations

import os
import re
import shutil
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import IO

from magma_torch.errors import MagmaError
from magma_torch.files import fsync_dir, lock_exclusively
from magma_torch.store import live_read, persistence
from magma_torch.store.persistence import CorruptSaveError, SavedStore, SaveNotFoundError, StoreMismatchError
from magma_torch.store.wal import WriteAheadLog

CHECKPOINT, WAL, LOCK = "checkpoint", "wal.jsonl", ".lock"
_NAMESPACE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
# Memory settings that decide which edges the log's adds make: a log is replayed only with these.
INGEST_SETTINGS = ("embedder", "fast_path")


class NamespaceError(MagmaError, ValueError):
    """A namespace name that cannot name a folder of its own."""


class UnknownNamespaceError(MagmaError, FileNotFoundError):
    """No such namespace (or no such ``store_dir``)."""


class NamespaceNotEmptyError(MagmaError, FileExistsError):
    """An import into a namespace that already holds events."""


class StoreInUseError(MagmaError, RuntimeError):
    """Another memory, in this or another process, holds the folder open."""


class ReadOnlyError(MagmaError, RuntimeError):
    """A change asked of a memory opened with ``open_readonly``."""


class NoStoreDirError(MagmaError, ValueError):
    """Durability or a checkpoint asked of a memory without a ``store_dir``."""


class StoreDirNotAFolderError(MagmaError, NotADirectoryError):
    """A ``store_dir``, a folder above it or its ``<namespace>`` folder is a file; names the file."""


def check_namespace(namespace: str) -> str:
    """A namespace names a folder of its own: letters, digits, ``._-``, no path tricks."""
    if not isinstance(namespace, str) or not _NAMESPACE.fullmatch(namespace):
        raise NamespaceError(f"namespace {namespace!r}: use 1-128 letters, digits, '.', '_' or '-', "
                             "starting with a letter or digit")
    return namespace


def namespaces(store_dir: str | os.PathLike) -> list[str]:
    """The namespaces (tenants) of ``store_dir`` that hold a checkpoint, sorted."""
    root = Path(store_dir)
    if not root.is_dir():
        raise UnknownNamespaceError(f"{root}: no such store_dir")
    return sorted(p.name for p in root.iterdir() if _NAMESPACE.fullmatch(p.name) and (p / CHECKPOINT).is_dir())


def refuse_memory_folder(path: str | os.PathLike) -> None:
    """``SaveNotFoundError`` when ``path`` is a ``store_dir`` or one namespace's folder, which ``load``
    was given in place of a save (it said "manifest.json: missing (incomplete save?)")."""
    path = Path(path)
    if (path / persistence.MANIFEST).exists() or not path.is_dir():
        return
    if (path / CHECKPOINT).is_dir() or (path / WAL).exists():
        raise SaveNotFoundError(f"{path}: a namespace folder of a store_dir, not a save: open it with "
                                f"MagmaMemory(store_dir={str(path.parent)!r}, namespace={path.name!r}) or "
                                "MagmaMemory.open_readonly")
    if any((p / CHECKPOINT).is_dir() for p in path.iterdir() if p.is_dir()):
        raise SaveNotFoundError(f"{path}: a store_dir, not a save: open one of its namespaces with "
                                f"MagmaMemory(store_dir={str(path)!r}, namespace=...)")


def forget_namespace(store_dir: str | os.PathLike, namespace: str) -> None:
    """Delete the folder ``store_dir/<namespace>`` with its checkpoint and log; refuses while a
    memory holds it open."""
    path = Path(store_dir) / check_namespace(namespace)
    if not (path / CHECKPOINT).is_dir() and not (path / WAL).exists():
        raise UnknownNamespaceError(f"{path}: no namespace {namespace!r} in {store_dir}")
    lock = lock_folder(path)
    try:
        # One rename takes the namespace away at once; what a crash leaves of the deletion is a
        # hidden folder, removed by the next call.
        doomed = path.with_name(f".{namespace}.deleting-{uuid.uuid4().hex}")
        os.rename(path, doomed)
        fsync_dir(path.parent)
    finally:
        lock.close()
    for leftover in path.parent.glob(f".{namespace}.deleting-*"):
        shutil.rmtree(leftover)


def lock_folder(path: Path) -> IO:
    """An exclusive lock on the store folder for as long as its memory is open: two writers
    appending to one log would interleave their event ids."""
    lock = lock_exclusively(path / LOCK)
    if lock is None:
        raise StoreInUseError(f"{path}: this memory is open elsewhere (another MagmaMemory or process holds "
                              f"{path / LOCK}); close that one first")
    return lock


def check_holds(saved: SavedStore, namespace: str) -> None:
    if saved.state["namespace"] != namespace:
        raise StoreMismatchError(f"{saved.path}: holds namespace {saved.state['namespace']!r}, "
                                 f"opened as {namespace!r}")


def check_same_ingest(saved: SavedStore, stored: Mapping, opened: Mapping) -> None:
    """Replaying the log with other fast-path settings would give other edges: refuse. ``stored``
    and ``opened`` are the memory configs (plain mappings; the stored one with settings added
    since the save at their defaults). The future horizon, which refuses records but makes no
    edge, is not compared."""
    for key in INGEST_SETTINGS:
        was, now = dict(stored[key]), dict(opened[key])
        if key == "fast_path":
            was.pop("future_horizon_days", None)
            now.pop("future_horizon_days", None)
        if was != now:
            raise StoreMismatchError(f"{saved.path}: stored with memory.{key}={was}, opened with "
                                     f"memory.{key}={now}; open it with the stored config (config=None)")


def replay(records: list[dict], log: Path, checkpoint_seq: int, apply: Callable[[dict], None]) -> int:
    """Apply the log's records that came after the checkpoint, in order; returns how many records
    the log holds. ``apply`` raises ``CorruptSaveError`` for a record that does not fit."""
    for rec in records:
        if rec["seq"] <= checkpoint_seq:  # already in the checkpoint (a crash before the log was emptied)
            continue
        try:
            apply(rec)
        except CorruptSaveError as err:
            raise CorruptSaveError(f"{log}: {err}; nothing was changed on disk") from None
    return len(records)


def read_live(store_dir: str | os.PathLike, namespace: str) -> tuple[Path, SavedStore, list[dict]]:
    """The folder of ``namespace``, its checkpoint and its log records as they were at one moment,
    read without a lock and without writing (``live_read``)."""
    path = Path(store_dir) / check_namespace(namespace)
    try:
        saved, records = live_read.read_checkpoint_and_log(path / CHECKPOINT, path / WAL)
    except SaveNotFoundError as err:   # no checkpoint there (a damaged one is a CorruptSaveError)
        raise UnknownNamespaceError(f"{err}; no namespace {namespace!r} in {store_dir}") from None
    check_holds(saved, namespace)
    return path, saved, records


class DurableFolder:
    """``store_dir/<namespace>`` as its one writer holds it: the lock, the checkpoint and, when
    durable, the write-ahead log with the count of records since the last checkpoint."""

    def __init__(self, store_dir: str | os.PathLike, namespace: str):
        self.namespace = namespace
        self.path = Path(store_dir) / check_namespace(namespace)
        self.wal: WriteAheadLog | None = None
        self.since_checkpoint = 0
        self._lock: IO | None = None

    def lock_and_read(self) -> SavedStore | None:
        """Lock the folder, finish a checkpoint a crash interrupted, read the checkpoint (None: none yet)."""
        try:
            self.path.mkdir(parents=True, exist_ok=True)
        except (NotADirectoryError, FileExistsError):   # a file where a folder is to be
            raise self._not_a_folder() from None
        self._lock = lock_folder(self.path)
        try:
            persistence.recover_interrupted_save(self.path / CHECKPOINT)
            return persistence.read_save(self.path / CHECKPOINT) if (self.path / CHECKPOINT).exists() else None
        except BaseException:
            self.close()
            raise

    def _not_a_folder(self) -> StoreDirNotAFolderError:
        """The refusal of a store_dir where a file stands in the way: store_dir itself, a folder
        above it, or the namespace's folder."""
        store_dir = self.path.parent
        file = persistence.file_above(self.path)
        if file is None:
            what = f"{self.path} is a file, not the folder of namespace {self.namespace!r}"
        else:
            what = "a file, not a folder" if file == store_dir else f"{file} is a file, not a folder"
        return StoreDirNotAFolderError(f"store_dir {store_dir}: {what}")

    def open(self, saved: SavedStore | None, durable: bool, *, config: Mapping, stored_config: Mapping | None,
             restore: Callable[[SavedStore], None], apply: Callable[[dict], None],
             checkpoint: Callable[[], None]) -> None:
        """Bring the memory up to date with the folder: restore the checkpoint into it (or write an
        empty first one) and replay the log onto it. A memory opened without ``durable`` folds the
        log into a new checkpoint and logs nothing after it. ``config``: the memory's config, and
        ``stored_config`` the checkpoint's, as plain mappings."""
        if saved is None:
            if (self.path / WAL).exists():
                raise CorruptSaveError(f"{self.path / WAL}: a write-ahead log without its checkpoint "
                                       f"{self.path / CHECKPOINT}")
            checkpoint()
            seq = 0
        else:
            check_holds(saved, self.namespace)
            check_same_ingest(saved, stored_config, config)
            restore(saved)
            seq = saved.state.get("wal_seq", 0)  # 0: a folder written by save()
        if durable or (self.path / WAL).exists():
            self.wal = WriteAheadLog(self.path / WAL, seq)
            self.since_checkpoint = replay(self.wal.records, self.wal.path, seq, apply)
            if not durable:
                checkpoint()
                self.wal.close()
                self.wal = None

    def log(self, record: dict) -> None:
        """Append one record to the log, fsynced, and count it towards the next checkpoint; without
        a log there is nothing to do."""
        if self.wal is not None:
            self.wal.append([record])
            self.since_checkpoint += 1

    def checkpoint_due(self, every: int) -> bool:
        return self.wal is not None and self.since_checkpoint >= every

    def checkpoint(self, encode: Callable[[int], dict[str, bytes]]) -> None:
        """Write the files ``encode(wal_seq)`` gives as the checkpoint (atomically: temporary
        folder, fsync, rename), then empty the log. The caller keeps the memory still meanwhile."""
        files = encode(0 if self.wal is None else self.wal.seq)
        try:
            persistence.write_save(self.path / CHECKPOINT, files)
        except OSError as err:
            raise OSError(err.errno, f"checkpoint of {self.path} failed ({err.strerror or err}); the previous "
                                     "checkpoint and the write-ahead log are intact") from err
        if self.wal is not None:
            self.wal.reset()
        self.since_checkpoint = 0

    def holds_checkpoint(self) -> bool:
        """Open (locked) with a checkpoint written."""
        return self._lock is not None and (self.path / CHECKPOINT).exists()

    def close(self) -> None:
        """Close the log and release the lock."""
        if self.wal is not None:
            self.wal.close()
            self.wal = None
        if self._lock is not None:
            self._lock.close()  # releases the lock
            self._lock = None
