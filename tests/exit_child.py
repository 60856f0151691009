"""A script that ends while its memory's slow path is mid-batch, without ``close()``
(tests/test_exit.py). Run as ``python exit_child.py [STORE_DIR]``: with STORE_DIR the memory
is durable.

The consolidator does the heuristic consolidator's work after a few seconds of torch matrix
products, which run in C++ without the GIL. The script adds one event, waits until the
worker is inside that batch and falls off its end, so the interpreter shuts down while the
worker thread is in native code: the state in which a still-running daemon thread aborted
the process ("terminate called without an active exception", exit status 134)."""
from __future__ import annotations

import sys
import threading

import torch

from magma_torch import MagmaMemory
from magma_torch.ingest.heuristic import HeuristicConsolidator

STARTED = threading.Event()


class BusyConsolidator(HeuristicConsolidator):
    rounds = 200

    def propose(self, batch, context):
        STARTED.set()
        a = torch.randn(256, 256)
        for _ in range(self.rounds):   # each product releases the GIL in C++ and takes it back
            a = torch.tanh(a @ a)
        return super().propose(batch, context)


if __name__ == "__main__":
    store = sys.argv[1] if len(sys.argv) > 1 else None
    mem = MagmaMemory(consolidation={"_target_": "__main__.BusyConsolidator"}, store_dir=store,
                      durable=store is not None)
    mem.add("hello there", "2023-05-08 13:56", speaker="A", source_id="D1:1")
    assert STARTED.wait(60), "the slow path never started the batch"
    print("exiting with the batch in flight", flush=True)
