"""A writer for the live-reader test in test_durability.py: ``python appending_child.py STORE_DIR``.

It opens a durable memory (a checkpoint every 3 adds, the slow path in the background), prints
``ready`` and then adds events ``e0``, ``e1``, ... one at a time, printing ``e<i>`` after each
add returned, until a line arrives on stdin. Then it adds one more, consolidates, closes and
prints ``done <events>``: the reader must have left its lock and its files as they were.
"""
from __future__ import annotations

import selectors
import sys
from datetime import datetime, timedelta, timezone

from magma_torch import MagmaMemory
from magma_torch.config import load_group

START = datetime(2024, 1, 1, tzinfo=timezone.utc)


def main(store_dir: str) -> None:
    cfg = load_group("memory", "magma")
    cfg.durability.checkpoint_every = 3   # checkpoints land while the reader reads
    stop = selectors.DefaultSelector()
    stop.register(sys.stdin, selectors.EVENT_READ)
    with MagmaMemory(cfg, store_dir=store_dir, durable=True) as mem:
        print("ready", flush=True)
        i = 0
        while not stop.select(timeout=0):
            mem.add(f"On day {i} Dana went hiking near the lake because the weather was nice.",
                    START + timedelta(hours=i), speaker="Dana", source_id=f"e{i}")
            print(f"e{i}", flush=True)
            i += 1
        mem.add("The last event, after the reader stopped.", START + timedelta(hours=i), source_id=f"e{i}")
        mem.consolidate()
        print(f"done {len(mem.store)}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
