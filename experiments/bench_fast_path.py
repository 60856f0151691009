"""Fast-path benchmark on a LoCoMo file: ingest throughput and `add` latency.

Throughput: every conversation through `add_many` in batches (embedding included),
turns per second over the whole file. Latency: the same turns through single `add`
calls while the background slow path consolidates what came before; p50/p99 per call.

    python experiments/bench_fast_path.py --data ../shared/data/locomo/locomo10_dev.json --json out.json
"""
from __future__ import annotations

import argparse
import json
import time

import numpy as np
from machine import machine  # experiments/machine.py

from magma_torch import MagmaMemory
from magma_torch.eval.datasets import load_locomo
from magma_torch.eval.runner import records
from magma_torch.text.embedder import Embedder


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", required=True)
    ap.add_argument("--batch", type=int, default=256, help="records per add_many call")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    samples = load_locomo(args.data)
    embedder = Embedder()
    embedder.encode(["warm-up"] * 8)

    turns, elapsed = 0, 0.0
    for s in samples:
        recs = records(s)
        with MagmaMemory(embedder=embedder, namespace=s.sample_id) as mem:
            t0 = time.perf_counter()
            for i in range(0, len(recs), args.batch):
                mem.add_many(recs[i:i + args.batch])
            elapsed += time.perf_counter() - t0
            turns += len(recs)
            mem.consolidate()

    latencies, backlog = [], []
    for s in samples:
        with MagmaMemory(embedder=embedder, namespace=s.sample_id) as mem:
            for rec in records(s):
                t0 = time.perf_counter()
                mem.add(**rec)
                latencies.append((time.perf_counter() - t0) * 1000)
                backlog.append(mem.worker.pending())
            mem.consolidate()
    lat = np.array(latencies)
    out = {"data": args.data, "turns": turns, "batch": args.batch,
           "turns_per_s": turns / elapsed, "add_ms_p50": float(np.percentile(lat, 50)),
           "add_ms_p99": float(np.percentile(lat, 99)), "add_ms_max": float(lat.max()),
           "slow_path_busy_during_adds": float(np.mean(np.array(backlog) > 0)), **machine()}
    print(json.dumps(out, indent=2))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2)


if __name__ == "__main__":
    main()
