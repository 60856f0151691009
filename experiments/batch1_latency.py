"""Batch-1 latency of the query path by phase: by scan dtype, with and without the episode views, by kernel.

    python experiments/batch1_latency.py --events 100000 --queries 200 --json out.json
    python experiments/batch1_latency.py --events 100000 --queries 60 --batch 8   # batches of 8, ms per question

Builds magma-bench's synthetic memory (conf/bench/default.yaml), warms up, then times
`QueryPath` one question at a time, every way in turn on each question: as configured; with the
store's copy of the embeddings a float32 [d, N] one (the ``columns`` way), a float16 or a
bfloat16 one (the ``scan``), float16 packed for FBGEMM (the scan too, store/packed_half.py; where
torch has FBGEMM), or no copy (the [1, N] matrix of the fp32 rows), the same results
by construction (tests/test_similarity.py), which shows what ``scan_dtype: auto`` should pick on
this CPU (magma_torch/hardware.py; run again with ATEN_CPU_CAPABILITY=avx2 or default for
torch's other kernels); with every episode weight 0; and with the episode views removed from
the snapshot (what the episode hops cost even when unused); and with ``retrieval.kernel`` torch,
the tensor programs instead of their numba twins (query/kernel.py: the beam search, the
re-ranker's support and the fusion, compiled on CPU where numba is installed). The machine record names the CPU's
half-precision flags. Each way also counts the questions whose beam search returned the node set of
the first way: every copy and kernel should match on all of them, the episode ways need not.
"""
from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import statistics
import time
from pathlib import Path

import torch
from machine import machine  # experiments/machine.py

from magma_torch.bench.measure import Bench, QueryPath, load_config
from magma_torch.store import packed_half
from magma_torch.store.tables import scan_copy_name
from magma_torch.store.csr import IncrementalCSR
from magma_torch.store.graph import REL_ID


def timed(bench: Bench, paths: dict[str, QueryPath], warmup: int, queries: int, batch: int = 1) -> dict:
    """p50 milliseconds per question and mean phase times per question of each way, and for how
    many questions its beam search returned the node set of the first way; the ways take turns
    batch by batch (``batch`` questions each), so that load from other jobs falls on all of them alike."""
    ms = {name: [] for name in paths}
    same = dict.fromkeys(paths, 0)
    for i in range(warmup + queries):
        q, w = bench.questions[i * batch:(i + 1) * batch], bench.windows[i * batch:(i + 1) * batch]
        nodes = {}
        for name, path in paths.items():
            if i == warmup:
                path.phase_s = dict.fromkeys(path.phase_s, 0.0)
            t = time.perf_counter()
            _, _, result, _ = path(q, w)
            if i >= warmup:
                ms[name].append((time.perf_counter() - t) * 1000 / batch)
            nodes[name] = [set(result.node[result.query == b].tolist()) for b in range(q.shape[0])]
        if i >= warmup:
            first = next(iter(nodes.values()))
            for name in paths:
                same[name] += sum(a == b for a, b in zip(nodes[name], first, strict=True))
    return {name: {"ms_p50": statistics.median(ms[name]),
                   "phase_ms_per_query": {k: v * 1000 / (queries * batch) for k, v in path.phase_s.items()},
                   "same_node_sets_as_configured": same[name]}
            for name, path in paths.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=100_000)
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    ap.add_argument("--batch", type=int, default=1, help="questions per timed call (--queries counts the calls)")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    bench = Bench.build(load_config(), args.events, (args.warmup + args.queries) * args.batch, "cpu")
    r, snap = bench.retriever, bench.snap
    paths = {"as configured": QueryPath(snap, r, bench.device)}
    copies = {"float32 columns": snap.embeddings.T.contiguous(), "scan float16": snap.embeddings.half(),
              "scan bfloat16": snap.embeddings.bfloat16(), "float32 matrix, no copy": None}
    if packed_half.available():
        packed = packed_half.PackedHalfRows(snap.embeddings.shape[1])
        packed.cover(snap.embeddings)
        copies["scan float16, packed for FBGEMM"] = packed.data
    for name, kept in copies.items():
        paths[name] = QueryPath(dataclasses.replace(snap, scan_embeddings=kept), r, bench.device)
    no_hops = copy.copy(r)
    no_hops.weights = r.weights.clone()
    no_hops.weights[:, REL_ID["episode"]] = 0
    paths["episode weights 0"] = QueryPath(snap, no_hops, bench.device)
    empty = IncrementalCSR("cpu").snapshot(0)
    graph = dataclasses.replace(snap.graph, event_episode=empty, episode_event=empty)
    paths["episode views removed"] = QueryPath(dataclasses.replace(snap, graph=graph), r, bench.device)
    tensor_programs = copy.copy(r)
    tensor_programs.kernel = "torch"
    paths["kernel torch"] = QueryPath(snap, tensor_programs, bench.device)
    runs = timed(bench, paths, args.warmup, args.queries, args.batch)
    out = {"scan_dtype": scan_copy_name(snap.scan_embeddings), "beam_kernel": r.search_kernel(bench.device),
           "similarity_mode": r.similarity_mode(snap, args.batch), "batch": args.batch,
           "events": args.events, "queries": args.queries,
           "warmup": args.warmup, "runs": runs, **machine()}
    print(json.dumps(out, indent=2))
    if args.json:
        args.json.write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
