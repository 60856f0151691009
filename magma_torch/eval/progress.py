"""Progress bars (tqdm) for the long steps of a run, shown when ``progress: true``."""
from __future__ import annotations

import threading

from tqdm import tqdm

from magma_torch.memory import MagmaMemory


def consolidate(mem: MagmaMemory, enabled: bool) -> None:
    """``mem.consolidate()`` with a bar of the events the slow path has done.

    The bar is updated from a side thread (the queue drains in the worker thread, or in this one
    for a foreground slow path), so the caller's timing of consolidation stays exact.
    """
    queued = mem.worker.pending()
    if not (enabled and queued):
        mem.consolidate()
        return
    done = threading.Event()

    def follow(bar: tqdm) -> None:
        while not done.wait(0.2):
            bar.update(queued - mem.worker.pending() - bar.n)

    with tqdm(total=queued, desc="consolidation", unit="event", leave=False) as bar:
        watcher = threading.Thread(target=follow, args=(bar,), daemon=True)
        watcher.start()
        try:
            mem.consolidate()
        finally:
            done.set()
            watcher.join()
            bar.update(queued - bar.n)
