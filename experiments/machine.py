"""Where and on what a figure was measured: every JSON an experiment script writes records it."""
from __future__ import annotations

import os
import platform
from datetime import datetime, timezone

import psutil
import torch

from magma_torch.hardware import cpu_flags, cpu_model
from magma_torch.provenance import code_commit

# Read when a script imports this module, at its start: the code it runs, not a commit made while it ran.
_COMMIT = code_commit()


def machine() -> dict:
    """Call at the end of a measurement: the load average then covers the run."""
    return {"machine": {"cpu": cpu_model(), "cpu_flags": cpu_flags(),
                        "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(), "cpus": psutil.cpu_count(),
                        "ram_gib": round(psutil.virtual_memory().total / 2**30),
                        "load_average_1_5_15": [round(x, 2) for x in os.getloadavg()],
                        "python": platform.python_version(), "torch": torch.__version__,
                        "torch_threads": torch.get_num_threads()},
            "commit": _COMMIT, "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")}
