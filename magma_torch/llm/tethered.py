"""Run a module as ``__main__`` and end it when the process that started it dies.

    python -m magma_torch.llm.tethered <parent pid> <module> [args...]

A server child (the llama.cpp server) is in its own session so that ``stop()`` can signal
its whole group; but then nothing ends it when its parent is killed with SIGKILL, and it
would keep a model in memory and the CPU busy. A watcher thread here polls the parent
(``os.getppid()`` changes when it dies), then sends this process SIGTERM and, after a grace
period, SIGKILL. Polling rather than ``prctl(PR_SET_PDEATHSIG)``: that fires when the
*thread* that forked exits, and a memory's background worker may start a server from a
thread that ends before the process does.
"""
from __future__ import annotations

import os
import runpy
import signal
import sys
import threading
import time

POLL_S = 1.0
GRACE_S = 10.0


def watch(parent: int, poll_s: float = POLL_S, grace_s: float = GRACE_S) -> None:
    while os.getppid() == parent:
        time.sleep(poll_s)
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(grace_s)
    os.kill(os.getpid(), signal.SIGKILL)


def main(argv: list[str]) -> None:
    if len(argv) < 2 or not argv[0].isdigit():
        sys.exit("usage: python -m magma_torch.llm.tethered <parent pid> <module> [args...]")
    parent, module = int(argv[0]), argv[1]
    threading.Thread(target=watch, args=(parent,), daemon=True, name="tethered-watch").start()
    sys.argv = [module, *argv[2:]]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main(sys.argv[1:])
