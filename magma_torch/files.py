"""Files that survive a crash: synced writes, synced folder entries, whole-file replacement."""
from __future__ import annotations

import fcntl
import json
import os
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import IO, TextIO

from magma_torch.errors import MagmaError


class DamagedFileError(MagmaError, ValueError):
    """A whole line of a JSON-lines file is not the JSON object it should be; the message names the
    file and the line."""


def lock_exclusively(path: Path) -> IO | None:
    """An exclusive lock on the file ``path`` (created if absent), held until the returned file is
    closed; None when another open file holds it. The kernel drops it when the process dies, so a
    killed process never leaves it locked."""
    f = open(path, "a+b")
    try:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        f.close()
        return None
    return f


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


def read_complete_lines(path: Path, cut: bool = True, key: str | Sequence[str] | None = None,
                        numbers: Sequence[str] = (), strings: Sequence[str] = ()) -> list[dict]:
    """The JSON lines of ``path`` that were written whole (none when it does not exist); with
    ``cut`` the file is then cut back to them (``cut_torn_line``). ``key`` is the field lines are
    looked up by (a string in every line), or a sequence of fields every line holds. A whole line that
    is not a JSON object, lacks ``key`` (or one of the keys ``key`` lists), holds other than a string
    in the one ``key`` or in one of the fields ``strings`` lists (text a reader hands on), or other
    than a number in one of the fields ``numbers`` lists, raises DamagedFileError before anything is cut."""
    if not path.exists():
        return []
    data = path.read_bytes()
    whole = data[: data.rfind(b"\n") + 1]
    keys = (key,) if isinstance(key, str) else tuple(key or ())
    strings = (key, *strings) if isinstance(key, str) else tuple(strings)
    lines = [_json_object(line, f"{path} line {number}", keys, tuple(numbers), strings)
             for number, line in enumerate(whole.splitlines(), 1) if line.strip()]
    if cut:
        cut_torn_line(path)
    return lines


def read_json_object(path: Path) -> dict:
    """The JSON object that the whole of ``path`` holds (a run folder's ``metrics.json``); a file that
    is not one raises DamagedFileError naming it."""
    return _json_object(Path(path).read_bytes(), str(path), ())


def _json_object(data: bytes, where: str, keys: tuple[str, ...], numbers: tuple[str, ...] = (),
                 strings: tuple[str, ...] = ()) -> dict:
    """``data`` as a JSON object with ``keys``, a number in each of its ``numbers`` fields and a string
    in each of its ``strings`` fields; a refusal names ``where`` (a file, or a file and line)."""
    try:
        value = json.loads(data)
    except ValueError as e:   # invalid JSON or invalid UTF-8
        raise DamagedFileError(f"{where}: not JSON ({e})") from None
    if not isinstance(value, dict):
        raise DamagedFileError(f"{where}: expected a JSON object, got {type(value).__name__}")
    missing = next((k for k in keys if k not in value), None)
    if missing is not None:
        raise DamagedFileError(f"{where}: no {missing!r}")
    wrong = next((k for k in numbers if k in value and not _is_number(value[k])), None)
    if wrong is not None:
        raise DamagedFileError(f"{where}: {wrong!r} is not a number ({json.dumps(value[wrong])[:40]})")
    wrong = next((k for k in strings if k in value and not isinstance(value[k], str)), None)
    if wrong is not None:
        raise DamagedFileError(f"{where}: {wrong!r} is not a string ({json.dumps(value[wrong])[:40]})")
    return value


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)   # a bool is no JSON number


def cut_torn_line(path: Path) -> None:
    """Cut ``path`` back to its last newline: a kill mid-write leaves a last line without one, and
    the next append must start a line of its own. A file that ends whole is read no further than
    its last byte (a resume's run files were just read through)."""
    if not path.exists():
        return
    with open(path, "rb") as f:
        size = f.seek(0, os.SEEK_END)
        if size == 0:
            return
        f.seek(size - 1)
        if f.read(1) == b"\n":
            return
        f.seek(0)
        whole = f.read().rfind(b"\n") + 1
    os.truncate(path, whole)


def append_synced(f: TextIO, lines: list[dict]) -> None:
    """Append ``lines`` to the open file ``f`` as JSON lines and fsync it: they survive a node
    failure, not just a killed process."""
    if not lines:
        return
    f.write("".join(json.dumps(line) + "\n" for line in lines))
    f.flush()
    os.fsync(f.fileno())
