"""How fast a small batch's similarity product over N events can be on this CPU, per storage format.

    .venv/bin/python experiments/scan_kernels.py --json experiments/results/bench/scan_kernels_xeon.json

The product of a small batch reads every event's embedding once, so it is bound by memory
bandwidth if a kernel streams the bytes at full speed. Times Q·Eᵀ for batches of ``--batches``
questions, with E as fp32 rows, fp32 columns ([d, N], Similarity's ``columns`` way), bf16 and
fp16 rows (its ``scan``), and int8 rows with a per-row scale through torch's weight-only int8
kernel (``aten._weight_int8pack_mm``, bf16 activations), with how many of the fp32 top 100 each
finds for the first question. Random unit rows, MiniLM's 384 dims.
"""
from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from pathlib import Path

import torch
from machine import machine  # experiments/machine.py


def p50_ms(fn, repeats: int) -> float:
    for _ in range(5):
        fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return sorted(times)[len(times) // 2] * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--events", type=int, default=100_000)
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 2, 4, 8])
    ap.add_argument("--repeats", type=int, default=30)
    ap.add_argument("--json", type=Path, required=True)
    args = ap.parse_args()
    torch.manual_seed(0)
    emb = torch.nn.functional.normalize(torch.randn(args.events, args.dim), dim=1)
    queries = torch.nn.functional.normalize(torch.randn(max(args.batches), args.dim), dim=1)
    exact_top = set((emb @ queries[0]).topk(100).indices.tolist())
    scale = emb.abs().amax(1) / 127
    packed = torch.round(emb / scale[:, None]).to(torch.int8)
    stored = {f"{dt}": (emb.to(dt), dt) for dt in (torch.float32, torch.bfloat16, torch.float16)}
    columns = emb.T.contiguous()
    runs = []
    for threads in args.threads:
        torch.set_num_threads(threads)
        for b in args.batches:
            q = queries[:b]
            kernels = {name: (lambda e=e, x=q.to(dt): x @ e.T, dt.itemsize * args.dim) for name, (e, dt) in stored.items()}
            kernels["torch.float32 columns [d, N]"] = (lambda x=q: x @ columns, 4 * args.dim)
            kernels["int8 rows, bf16 question"] = (
                lambda x=q: torch.ops.aten._weight_int8pack_mm(x.bfloat16(), packed, scale.bfloat16()), args.dim + 2)
            for name, (fn, bytes_per_event) in kernels.items():
                ms = p50_ms(fn, args.repeats)
                top = set(fn()[0].float().topk(100).indices.tolist())
                runs.append({"kernel": name, "threads": threads, "batch": b, "p50_ms": round(ms, 2),
                             "bytes_per_event": bytes_per_event,
                             "gb_per_s": round(bytes_per_event * args.events / ms / 1e6, 1),
                             "top100_of_fp32": len(top & exact_top)})
                print(json.dumps(runs[-1]))
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({"command": shlex.join(["python", *sys.argv]),
                                     "events": args.events, "dim": args.dim, "runs": runs,
                                     "machine": machine()}, indent=1) + "\n")


if __name__ == "__main__":
    main()
