"""Reading a persistent memory's folder (checkpoint + write-ahead log) while its writer works on it.

Nothing here writes, truncates or locks a file. The writer puts a new checkpoint in place (the old
one renamed aside, the new one renamed in) and only then empties the log, so a checkpoint read and
then a log read belong together unless a new checkpoint landed between them. The manifest (the
SHA-256 of every checkpoint file, the log position it covers among them) is read before and after;
when it changed, both are read again. A torn last log line (an append in progress) is left out.
"""
from __future__ import annotations

import time
from pathlib import Path

from magma_torch.errors import MagmaError
from magma_torch.store.persistence import MANIFEST, CorruptSaveError, SavedStore, SaveNotFoundError, read_save
from magma_torch.store.wal import read_records

# A writer that checkpoints during every read: the waits between reads double from the first
# (about 6 s in all) before the reader gives up.
ATTEMPTS, FIRST_WAIT_S = 8, 0.05


class LiveReadTimeoutError(MagmaError, TimeoutError):
    """A memory's writer put a new checkpoint in place during every read of its folder; trying
    again later may succeed. Names the folder."""


def read_checkpoint_and_log(checkpoint: Path, log: Path) -> tuple[SavedStore, list[dict]]:
    """The checkpoint and the log records as they were at one moment. Raises SaveNotFoundError
    (a FileNotFoundError) when there is no checkpoint, CorruptSaveError naming a damaged file, and
    LiveReadTimeoutError (a TimeoutError) when a new checkpoint landed during every read."""
    for attempt in range(ATTEMPTS):
        if attempt:
            time.sleep(FIRST_WAIT_S * 2 ** (attempt - 1))
        before = _manifest(checkpoint)
        if before is None:
            if not _moved_aside(checkpoint):  # not a checkpoint between its two renames
                _raise_missing(checkpoint, log)
            continue
        try:
            saved, (records, _) = read_save(checkpoint), read_records(log)
        except (CorruptSaveError, FileNotFoundError):
            if _manifest(checkpoint) == before:
                raise  # damage, not a checkpoint replaced while it was read
            continue
        if _manifest(checkpoint) == before:
            return saved, records
    if _manifest(checkpoint) is None:
        _raise_missing(checkpoint, log)
    raise LiveReadTimeoutError(f"{checkpoint.parent}: its writer put a new checkpoint in place during each of "
                               f"{ATTEMPTS} reads; try again")


def _manifest(checkpoint: Path) -> bytes | None:
    try:
        return (checkpoint / MANIFEST).read_bytes()
    except (FileNotFoundError, NotADirectoryError):
        return None


def _moved_aside(checkpoint: Path) -> list[Path]:
    return sorted(checkpoint.parent.glob(f".{checkpoint.name}.old-*"))


def _raise_missing(checkpoint: Path, log: Path) -> None:
    old = _moved_aside(checkpoint)
    if old:
        raise CorruptSaveError(f"{checkpoint}: missing, the previous one moved aside as {old[-1].name} by a "
                               "checkpoint a crash cut short; opening the memory for writing once restores it")
    if log.exists():
        raise CorruptSaveError(f"{log}: a write-ahead log without its checkpoint {checkpoint}")
    raise SaveNotFoundError(f"{checkpoint.parent}: no {checkpoint.name}/ (not the folder of a persistent memory)")
