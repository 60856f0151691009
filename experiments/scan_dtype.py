"""Batch-1 latency of the query path by scan dtype: which half-precision copy pays on this CPU.

    python experiments/scan_dtype.py --events 100000 --queries 200 --json out.json

Builds magma-bench's synthetic memory (conf/bench/default.yaml) once and times `QueryPath`
one question at a time with the batch-1 scan reading a float16 copy, a bfloat16 copy, or
no copy (float32: the [1, N] matrix of the fp32 rows). The ways take turns question by
question, so that load from other jobs falls on all of them alike. Results are identical
by construction (tests/test_similarity.py); only time differs. The machine record names the
CPU's half-precision flags (experiments/machine.py).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import time
from pathlib import Path

import torch
from machine import machine  # experiments/machine.py

from magma_torch.bench.measure import Bench, QueryPath, load_config

WAYS = ("float16", "bfloat16", "float32")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=100_000)
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    bench = Bench.build(load_config(), args.events, args.warmup + args.queries, "cpu")
    emb = bench.snap.embeddings
    paths = {}
    for way in WAYS:
        scan = None if way == "float32" else emb.to(getattr(torch, way))
        paths[way] = QueryPath(dataclasses.replace(bench.snap, scan_embeddings=scan), bench.retriever, bench.device)
    ms = {way: [] for way in WAYS}
    for i in range(args.warmup + args.queries):
        q, w = bench.questions[i:i + 1], bench.windows[i:i + 1]
        if i == args.warmup:
            for path in paths.values():
                path.phase_s = dict.fromkeys(path.phase_s, 0.0)
        for way, path in paths.items():
            t = time.perf_counter()
            path(q, w)
            if i >= args.warmup:
                ms[way].append((time.perf_counter() - t) * 1000)
    runs = {way: {"ms_p50": statistics.median(ms[way]), "ms_min": min(ms[way]),
                  "similarity_mode": bench.retriever.similarity(paths[way].snap, bench.questions[:1]).mode,
                  "phase_ms_per_query": {k: v * 1000 / args.queries for k, v in paths[way].phase_s.items()}}
            for way in WAYS}
    out = {"events": args.events, "queries": args.queries, "warmup": args.warmup, "runs": runs, **machine()}
    print(json.dumps(out, indent=2))
    if args.json:
        args.json.write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
