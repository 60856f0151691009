"""A write-ahead log of JSON records, one framed line each, fsynced before ``append`` returns.

A line is ``<payload bytes> <crc32 hex> <payload JSON>\\n``: the length and checksum let a
reader tell a record written completely from one torn by a crash mid-write. A bad *last*
line is such a torn tail: it is ignored and cut off when the log is opened, because its
``append`` never returned. A bad line with good records after it is damage, not a torn
write: opening raises ``CorruptSaveError`` naming the file and line and changes nothing.

Every record carries a sequence number ``seq`` (1, 2, ...). A checkpoint remembers the
last ``seq`` it contains, so a crash between a checkpoint and ``reset()`` (which empties
the log) replays nothing twice.
"""
from __future__ import annotations

import json
import os
import zlib
from collections.abc import Iterable
from pathlib import Path

from magma_torch.files import fsync_dir
from magma_torch.store.persistence import CorruptSaveError


def _frame(record: dict) -> bytes:
    payload = json.dumps(record, ensure_ascii=False, separators=(",", ":")).encode()
    return b"%d %08x " % (len(payload), zlib.crc32(payload)) + payload + b"\n"


def _unframe(line: bytes) -> dict | None:
    """The record of one line (without its newline), or None when the framing does not check out."""
    parts = line.split(b" ", 2)
    if len(parts) != 3 or not parts[0].isdigit():
        return None
    size, crc, payload = parts
    if int(size) != len(payload) or crc != b"%08x" % zlib.crc32(payload):
        return None
    try:
        record = json.loads(payload)
    except ValueError:
        return None
    return record if isinstance(record, dict) and isinstance(record.get("seq"), int) else None


def read_records(path: Path) -> tuple[list[dict], int]:
    """The complete records of the log at ``path`` and the bytes they take; a torn last line is left
    out, not cut (reading never writes: a writer may be appending). Raises ``CorruptSaveError`` for
    a damaged line with records after it."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return [], 0
    records, offset = [], 0
    lines = data.split(b"\n")
    for number, line in enumerate(lines, 1):
        complete = number < len(lines)  # the piece after the last newline is unterminated
        record = _unframe(line) if complete else None
        if record is None:
            if any(lines[number:]):
                raise CorruptSaveError(f"{path}: line {number} is damaged (length/checksum mismatch) "
                                       "and records follow it; the log was left as it is")
            break  # a torn tail: the last append did not complete
        records.append(record)
        offset += len(line) + 1
    return records, offset


class WriteAheadLog:
    """Open (or create) the log at ``path``; ``records`` holds what it already contained.
    Numbering goes on after ``start_seq`` (the last record of the checkpoint) or after the
    log's last record, whichever is later."""

    def __init__(self, path: str | os.PathLike, start_seq: int = 0):
        self.path = Path(path)
        self.records, valid_bytes = read_records(self.path)
        created = not self.path.exists()
        # Unbuffered appends: a failed write leaves nothing queued in a buffer to land later.
        self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        if os.fstat(self._fd).st_size != valid_bytes:  # a torn tail: cut it so appends follow good records
            os.ftruncate(self._fd, valid_bytes)
            os.fsync(self._fd)
        if created:
            fsync_dir(self.path.parent)
        self.seq = max(start_seq, self.records[-1]["seq"] if self.records else 0)

    def append(self, records: Iterable[dict]) -> int:
        """Write records (numbered here) and fsync once; returns the last sequence number."""
        seq, out = self.seq, []
        for record in records:
            seq += 1
            out.append(_frame({**record, "seq": seq}))
        data = memoryview(b"".join(out))
        start = os.fstat(self._fd).st_size
        try:
            while data:
                data = data[os.write(self._fd, data):]
            os.fsync(self._fd)
        except BaseException:
            # Nothing half-written may stay: the caller reports the failure and applies nothing.
            os.ftruncate(self._fd, start)
            raise
        self.seq = seq
        return seq

    def reset(self) -> None:
        """Empty the log (once a checkpoint holds everything it had); numbering continues."""
        os.ftruncate(self._fd, 0)
        os.fsync(self._fd)
        self.records = []

    def close(self) -> None:
        os.close(self._fd)
