"""What a backfill costs: one rebuild of the store, against an in-order add, on a memory of N events.

N demo turns (a minute apart, round-robin over 4 streams) are added; then, timed, each the best
of 3 (the machine is shared): one in-order add (after a warm-up add), a backfill of 1 event into
the middle of a stream, and a backfill of 20 events in one `add_many` call. `check()` must pass
afterwards.

    python experiments/backfill_cost.py --events 2000
"""
from __future__ import annotations

import argparse
import time
from datetime import datetime, timedelta

from magma_torch import MagmaMemory
from magma_torch.config import load_group
from magma_torch.eval.datasets import load_demo
from magma_torch.text.embedder import Embedder


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=2000)
    n = ap.parse_args().events
    cfg = load_group("memory", "magma")
    cfg.slow_path.background = False
    turns = [t for s in load_demo() for t in s.turns]
    t0 = datetime(2023, 1, 1)
    recs = [{"text": f"{turns[i % len(turns)].text} ({i})", "timestamp": t0 + timedelta(minutes=i),
             "stream": f"s{i % 4}", "speaker": turns[i % len(turns)].speaker} for i in range(n)]

    def late(rep: int, k: int) -> dict:
        return {"text": f"A late turn {rep}.{k}.", "timestamp": t0 + timedelta(minutes=n // 2 + k), "stream": "s1"}

    def best_ms(call) -> float:
        times = []
        for rep in range(3):
            start = time.perf_counter()
            call(rep)
            times.append((time.perf_counter() - start) * 1000)
        return min(times)

    with MagmaMemory(cfg, "none", embedder=Embedder(device="cpu"), device="cpu") as mem:
        mem.add_many(recs)
        mem.add("Warm-up.", t0 + timedelta(minutes=n + 1), stream="s2")
        add1 = best_ms(lambda rep: mem.add(f"An in-order turn {rep}.", t0 + timedelta(minutes=n + 1), stream="s1"))
        one = best_ms(lambda rep: mem.add_many([late(rep, 0)], backfill=True))
        twenty = best_ms(lambda rep: mem.add_many([late(rep, k) for k in range(20)], backfill=True))
        mem.check()
    print(f"{n} events: in-order add {add1:.0f} ms; backfill of 1 event {one:.0f} ms; "
          f"of 20 in one call {twenty:.0f} ms")


if __name__ == "__main__":
    main()
