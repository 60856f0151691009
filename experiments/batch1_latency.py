"""Batch-1 latency of the query path by phase, with and without the episode views.

    python experiments/batch1_latency.py --events 100000 --queries 200 --json out.json

Builds magma-bench's synthetic memory (conf/bench/default.yaml), warms up, then times
`QueryPath` one question at a time: as configured, with every episode weight 0, and with the
episode views removed from the snapshot (what the episode hops cost even when unused).
"""
from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import statistics
import time
from pathlib import Path

from machine import machine  # experiments/machine.py

from magma_torch.bench.measure import Bench, QueryPath, load_config
from magma_torch.store.csr import IncrementalCSR
from magma_torch.store.graph import REL_ID


def timed(bench: Bench, retriever, warmup: int, queries: int) -> dict:
    path = QueryPath(bench.snap, retriever, bench.device)
    for i in range(warmup):
        path(bench.questions[i:i + 1], bench.windows[i:i + 1])
    path.phase_s = dict.fromkeys(path.phase_s, 0.0)
    ms = []
    for i in range(warmup, warmup + queries):
        t = time.perf_counter()
        path(bench.questions[i:i + 1], bench.windows[i:i + 1])
        ms.append((time.perf_counter() - t) * 1000)
    return {"ms_p50": statistics.median(ms),
            "phase_ms_per_query": {k: v * 1000 / queries for k, v in path.phase_s.items()}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=100_000)
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    bench = Bench.build(load_config(), args.events, args.warmup + args.queries, "cpu")
    r = bench.retriever
    runs = {"as configured": timed(bench, r, args.warmup, args.queries)}
    no_hops = copy.copy(r)
    no_hops.weights = r.weights.clone()
    no_hops.weights[:, REL_ID["episode"]] = 0
    runs["episode weights 0"] = timed(bench, no_hops, args.warmup, args.queries)
    empty = IncrementalCSR("cpu").snapshot(0)
    graph = dataclasses.replace(bench.snap.graph, event_episode=empty, episode_event=empty)
    bench.snap = dataclasses.replace(bench.snap, graph=graph)
    runs["episode views removed"] = timed(bench, r, args.warmup, args.queries)
    out = {"events": args.events, "queries": args.queries, "warmup": args.warmup, "runs": runs, **machine()}
    print(json.dumps(out, indent=2))
    if args.json:
        args.json.write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
