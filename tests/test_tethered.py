"""llm/tethered.py: a server child in its own session ends when its parent is SIGKILLed."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from magma_torch.llm.llamacpp_backend import TETHER

PARENT = f"""
import os, subprocess, sys, time
child = subprocess.Popen([sys.executable, {str(TETHER)!r}, str(os.getpid()), "http.server", "0",
                          "--bind", "127.0.0.1"], start_new_session=True,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
print(child.pid, flush=True)
time.sleep(600)
"""


def running(pid: int) -> bool:
    """Alive and not a zombie waiting for a reaper."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


def wait_until(cond, deadline_s: float = 60.0) -> bool:
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.2)
    return cond()


def test_child_ends_when_its_parent_is_killed():
    parent = subprocess.Popen([sys.executable, "-c", PARENT], stdout=subprocess.PIPE, text=True)
    child = int(parent.stdout.readline())
    try:
        time.sleep(2 * 1.0)                         # two watcher polls: the child survives while its parent lives
        assert running(child)
        parent.send_signal(signal.SIGKILL)
        parent.wait()
        assert wait_until(lambda: not running(child)), "the tethered child outlived its killed parent"
    finally:
        if running(child):
            os.kill(child, signal.SIGKILL)


def test_usage_error_names_the_arguments():
    out = subprocess.run([sys.executable, str(TETHER), "http.server"], capture_output=True, text=True)
    assert out.returncode != 0 and "usage: python -m magma_torch.llm.tethered <parent pid> <module>" in out.stderr
