"""A script may end without ``close()``: the interpreter exits cleanly (status 0), and a durable
memory's acknowledged events are there when the store is reopened."""
import os
import subprocess
import sys
from pathlib import Path

from magma_torch import MagmaMemory

CHILD = Path(__file__).resolve().parent / "exit_child.py"
README_EXAMPLE = """
from magma_torch import MagmaMemory
m = MagmaMemory()
m.add("hello there", "2023-05-08 13:56", speaker="A")
"""
SPACY_BUSY_AT_EXIT = """
from magma_torch import MagmaMemory
m = MagmaMemory()
m.add("I adopted a dog named Rex.", "2023-05-01 10:00", speaker="A")
m.consolidate()   # the first batch loads spaCy, and with it blis, whose atexit hook then runs first
m.add_many([{"text": f"Turn {i}: Bob talked about Berlin, Paris and his new job at Acme number {i}.",
             "timestamp": f"2023-05-02 10:{i:02d}", "speaker": "B"} for i in range(60)])
"""


def run(args: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "TQDM_DISABLE": "1"})


def test_plain_script_without_close_exits_cleanly():
    proc = run(["-c", README_EXAMPLE])
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_exit_with_a_batch_in_flight_is_clean():
    proc = run([str(CHILD)])
    assert "batch in flight" in proc.stdout
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "terminate called" not in proc.stderr


def test_exit_with_the_worker_inside_spacy_is_clean():
    # The crash (blis finalised under the worker) came in most runs, not all: a few runs catch it.
    for _ in range(3):
        proc = run(["-c", SPACY_BUSY_AT_EXIT])
        assert proc.returncode == 0, proc.stderr[-2000:]


def test_durable_store_survives_an_exit_without_close(tmp_path):
    store = tmp_path / "store"
    proc = run([str(CHILD), str(store)])
    assert "batch in flight" in proc.stdout
    assert proc.returncode == 0, proc.stderr[-2000:]
    # The saved consolidation config names the child's __main__ consolidator: reopen with the stock one.
    with MagmaMemory(store_dir=store, durable=True, consolidation="heuristic") as mem:
        assert [r.text for r in mem.store.events.rows] == ["hello there"]
        mem.consolidate()   # the event the exit left unconsolidated is queued again and finishes
        assert mem.worker.status[0][0] == "consolidated"
