"""Which code a figure was measured on: the commit that magma-run's metrics.json, magma-bench's
JSON and the experiment scripts record beside the machine."""
from __future__ import annotations

import subprocess
from pathlib import Path

# A change here changes what a run computes; scripts, notes and results edited meanwhile do not.
CODE_PATHS = ("magma_torch", "conf")

_PACKAGE_ROOT = Path(__file__).resolve().parents[1]


def code_commit(root: Path = _PACKAGE_ROOT) -> str | None:
    """The short hash of the commit checked out at ``root``, marked ``+dirty`` when its library or
    configs (``CODE_PATHS``) differ from it. None when ``root`` is not the top of a git checkout:
    an installed package (even one inside another project's checkout) or no git."""
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=True).stdout.strip()

    try:
        if Path(git("rev-parse", "--show-toplevel")).resolve() != Path(root).resolve():
            return None
        head = git("rev-parse", "--short", "HEAD")
        dirty = git("status", "--porcelain", "--untracked-files=no", "--", *CODE_PATHS)
    except (OSError, subprocess.CalledProcessError):
        return None
    return head + ("+dirty" if dirty else "")
