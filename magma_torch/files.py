"""Files that survive a crash: synced writes, synced folder entries, whole-file replacement."""
from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TextIO


def write_synced(path: Path, data: bytes) -> None:
    """Write ``path`` and fsync it before returning."""
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def fsync_dir(path: Path) -> None:
    """Make the entries of folder ``path`` (a file created, renamed or removed in it) durable."""
    if os.name != "posix":  # only POSIX can open a directory to fsync its entries
        return
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextmanager
def replaced_atomically(path: str | os.PathLike) -> Iterator[TextIO]:
    """A text file to write that replaces ``path`` in one rename when the block ends: readers see
    the old file or the whole new one. A failed block leaves ``path`` as it was."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{uuid.uuid4().hex}")
    try:
        with open(tmp, "w", encoding="utf-8", newline="\n") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        fsync_dir(path.parent)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_atomic(path: str | os.PathLike, text: str) -> None:
    """Replace ``path`` with ``text`` in one rename (``replaced_atomically``)."""
    with replaced_atomically(path) as f:
        f.write(text)


def read_complete_lines(path: Path, cut: bool = True) -> list[dict]:
    """The JSON lines of ``path`` that were written whole (none when it does not exist); with
    ``cut`` the file is cut back to them, so that the next append starts a line of its own."""
    if not path.exists():
        return []
    data = path.read_bytes()
    keep = data[: data.rfind(b"\n") + 1]  # a kill mid-write leaves a last line without its newline
    if cut and len(keep) != len(data):
        path.write_bytes(keep)
    return [json.loads(line) for line in keep.splitlines() if line.strip()]


def append_synced(f: TextIO, lines: list[dict]) -> None:
    """Append ``lines`` to the open file ``f`` as JSON lines and fsync it: they survive a node
    failure, not just a killed process."""
    if not lines:
        return
    f.write("".join(json.dumps(line) + "\n" for line in lines))
    f.flush()
    os.fsync(f.fileno())
