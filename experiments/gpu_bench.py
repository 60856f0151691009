"""One short GPU run of everything issue 5 asks a GPU to show (a few minutes on an H200).

Builds the 10^6-event synthetic memory once on the device, then measures anchors + beam
search at batch 1..4096 (queries/s, p50 at batch 1), the reference agreement at the
largest batch, the device copy bandwidth, and an estimate of the bytes the query path
touches per question, to say how close it runs to the memory-bandwidth limit.

    python experiments/gpu_bench.py --device cuda --json $OUT/gpu_bench.json

Needs torch and torch-geometric only, plus omegaconf (the bench config) and safetensors
(the intent head). A node without them gets them from experiments/gpu_deps, made here
with (all pure Python but safetensors, whose wheel is abi3, so any CPython >= 3.8):

    pip install --no-deps --target experiments/gpu_deps omegaconf antlr4-python3-runtime==4.9.3 PyYAML safetensors

and carried along (run(carry=["experiments/gpu_deps"])); it is under 10 MB.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))                          # the repository's magma_torch, installed or not
sys.path.append(str(ROOT / "experiments" / "gpu_deps"))  # only for what the node lacks

import torch  # noqa: E402

from magma_torch.bench.cli import write_json  # noqa: E402
from magma_torch.bench.measure import Bench, load_config, traffic_per_query  # noqa: E402


def copy_bandwidth(device: torch.device, mbytes: int = 1024, repeats: int = 10) -> float:
    """Device-to-device copy bandwidth in bytes/s (read + write counted)."""
    src = torch.empty(mbytes << 20, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    dst.copy_(src)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    t = time.perf_counter()
    for _ in range(repeats):
        dst.copy_(src)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return 2 * src.numel() * repeats / (time.perf_counter() - t)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--queries", type=int, default=16384,
                    help="questions built; batch b times min(this, max(256, 4 b)) of them")
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 4, 16, 64, 256, 1024, 4096])
    ap.add_argument("--reference-queries", type=int, default=100, help="checked against the reference (largest batch)")
    ap.add_argument("--json", default="gpu_bench.json")
    args = ap.parse_args()
    cfg = load_config(ROOT / "conf" / "bench" / "default.yaml")
    cfg.run.reference_queries = args.reference_queries
    dev = torch.device(args.device)
    bench = Bench.build(cfg, args.events, args.queries, args.device)
    runs = []
    for batch in args.batches:
        runs.append(bench.measure(batch, reference=batch == args.batches[-1], embed_question=False,
                                  queries=min(args.queries, max(256, 4 * batch))))
        print(json.dumps({k: runs[-1][k] for k in ("batch", "retrieval_qps", "retrieval_ms_p50",
                                                  "agreement_with_reference")}), flush=True)
    traffic = traffic_per_query(bench, args.batches[-1])
    bandwidth = copy_bandwidth(dev)
    best = runs[-1]
    out = {"device": best["machine"], "events": args.events, "copy_bytes_per_s": bandwidth, **traffic,
           "bandwidth_fraction_at_largest_batch": traffic["bytes_per_query"] * best["retrieval_qps"] / bandwidth,
           "runs": runs}
    write_json(args.json, out)
    print(json.dumps({k: v for k, v in out.items() if k != "runs"}, indent=2))


if __name__ == "__main__":
    main()
