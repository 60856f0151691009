"""Where a batch of the query path spends its time: torch.profiler over one batch.

    python experiments/profile_query_path.py --events 100000 --batch 256 --threads 1
"""
from __future__ import annotations

import argparse

import torch

from magma_torch.bench.measure import Bench, QueryPath, load_config, traffic_per_query


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=100_000)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    bench = Bench.build(load_config(), args.events, 2 * args.batch, args.device)
    path = QueryPath(bench.snap, bench.retriever, bench.device)
    b = args.batch
    path(bench.questions[:b], bench.windows[:b])                 # warm-up
    path.phase_s = dict.fromkeys(path.phase_s, 0.0)
    with torch.profiler.profile() as prof:
        path(bench.questions[b:2 * b], bench.windows[b:2 * b])
    print({k: round(v * 1000 / b, 2) for k, v in path.phase_s.items()}, "ms per question")
    print(traffic_per_query(bench, b))
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=12))


if __name__ == "__main__":
    main()
