"""Where and on what a figure was measured: every JSON an experiment script writes records it."""
from __future__ import annotations

import os
import platform
import subprocess
from datetime import datetime, timezone
from pathlib import Path

import psutil
import torch

from magma_torch.hardware import cpu_flags, cpu_model


def _commit() -> str | None:
    """The checked-out commit, marked `+dirty` when the library or its configs (magma_torch/, conf/)
    differ from it; scripts, notes and results edited meanwhile do not count."""
    root = Path(__file__).resolve().parents[1]
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True,
                              check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--",
                                "magma_torch", "conf"], cwd=root,
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None
    return head + ("+dirty" if dirty else "")


def machine() -> dict:
    """Call at the end of a measurement: the load average then covers the run."""
    return {"machine": {"cpu": cpu_model(), "cpu_flags": cpu_flags(),
                        "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(), "cpus": psutil.cpu_count(),
                        "ram_gib": round(psutil.virtual_memory().total / 2**30),
                        "load_average_1_5_15": [round(x, 2) for x in os.getloadavg()],
                        "python": platform.python_version(), "torch": torch.__version__,
                        "torch_threads": torch.get_num_threads()},
            "commit": _commit(), "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")}
