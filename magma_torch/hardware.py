"""What the CPU can do in half precision, recorded with every benchmark, and the copy of the
embeddings that ``scan_dtype: auto`` gives the store for small query batches."""
from __future__ import annotations

import math
import platform
import time
from functools import cache
from pathlib import Path

import torch

from magma_torch.store import packed_half

# The flags behind a CPU's half-precision speed: conversion only (f16c), native bf16 dot
# products (avx512_bf16, amx_bf16) or native fp16 arithmetic (avx512_fp16, amx_fp16).
HALF_FLAGS = ("avx2", "avx512f", "f16c", "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16", "amx_fp16")


@cache
def _cpuinfo() -> dict[str, str]:
    path = Path("/proc/cpuinfo")
    out = {}
    for line in path.read_text().splitlines() if path.exists() else ():
        key, _, value = line.partition(":")
        out.setdefault(key.strip(), value.strip())
    return out


def cpu_model() -> str:
    return _cpuinfo().get("model name") or platform.processor() or platform.machine()


def cpu_flags() -> list[str]:
    """Which of ``HALF_FLAGS`` the CPU has (Linux; elsewhere, what torch reports)."""
    flags = set(_cpuinfo().get("flags", "").split())
    if not flags:   # no /proc/cpuinfo: torch's own checks cover part of the list
        checks = {"avx2": torch.cpu._is_avx2_supported, "avx512f": torch.cpu._is_avx512_supported,
                  "avx512_bf16": torch.cpu._is_avx512_bf16_supported, "amx_fp16": torch.cpu._is_amx_fp16_supported}
        flags = {name for name, check in checks.items() if check()}
    return [f for f in HALF_FLAGS if f in flags]


# scan_dtype: auto on CPU times one question's product with PROBE_EVENTS random events each way:
# the float32 columns [d, N], the float16 rows [N, d] and, where torch has FBGEMM, the float16 rows
# packed for it (store/packed_half.py; packing them takes ~0.3 s, once per process), each larger than
# a VM's last-level cache (100, 50 and 50 MB), so each streams from memory as a 10^5-event store does.
PROBE_EVENTS, PROBE_DIM, PROBE_RUNS = 1 << 16, 384, 7
# A pre-filtering copy (float16 rows, packed or not) is taken when its product costs at most this
# share of the columns' one: its exact re-reads (the dense top-k's band, the pairs read from the fp32
# rows) take longer than the columns, which read every pair from their one product. At 10^5 events,
# batch 1, every way in turn on each question (experiments/batch1_latency.py; history/): on the
# AVX-512 AMD EPYC VM the re-reads cost 0.7 ms more and the float16 rows' probe ratio was 0.31-0.49
# (batch1_latency_100k_epyc_2026-12-04_2116.json); on an AVX2-only one they cost 2.3-2.9 ms more as
# tensor operations, and the columns won at probe ratios of 0.66-1.01 (_epyc_avx2_2026-12-07_0421..0423),
# but 1.4 ms more as compiled loops (query/similarity_numba.py), so that the packed rows won by 1.3 ms
# at an in-situ ratio of 0.54 and the float16 rows by 0.4 ms at 0.68 (_epyc_avx2_2026-12-07_1152); the
# probe read 0.45-0.64 for the packed rows there, 0.59-1.13 for the float16 rows. On the Intel Xeon VM
# the float16 rows' product takes longer than the columns', the packed rows' 0.74-0.76 of it, and the
# packed rows and the columns give the same question time (8.4 and 8.6 ms; _xeon_2026-12-07_2045).
SCAN_SHARE = 0.75


@cache
def scan_probe() -> dict[str, float]:
    """The best of ``PROBE_RUNS`` times (ms) of one question's product with ``PROBE_EVENTS`` events,
    from float32 columns, from float16 rows and (where FBGEMM is) from packed float16 rows, with
    torch's current threads. The ways take turns run by run, so a passing load on a shared machine
    falls on all of them alike."""
    columns = torch.full((PROBE_DIM, PROBE_EVENTS), 0.05)     # the values do not change the time
    rows = torch.full((PROBE_EVENTS, PROBE_DIM), 0.05, dtype=torch.float16)
    q = torch.full((1, PROBE_DIM), 0.05)
    q16 = q.half()
    products = {"float32_columns_ms": lambda: q @ columns, "float16_rows_ms": lambda: q16 @ rows.T}
    if packed_half.available():
        blocks = packed_half.PackedHalfRows(PROBE_DIM)
        blocks.cover(rows.float())
        view = blocks.data
        products["float16_packed_ms"] = lambda: view.product(q, rows)
    best = dict.fromkeys(products, math.inf)
    for run in range(PROBE_RUNS + 1):   # run 0 warms up: first-call allocation and kernel selection
        for name, product in products.items():
            t = time.perf_counter()
            product()
            if run:
                best[name] = min(best[name], (time.perf_counter() - t) * 1000)
    return best


def auto_scan_dtype(device: torch.device) -> torch.dtype | str:
    """``scan_dtype: auto``: the copy of the embeddings small query batches read on this device
    (a torch dtype, or ``packed_half.NAME``).

    On CUDA, float16: a half-precision scan reads half the bytes, and cuBLAS reads rows or columns
    alike. On CPU it depends on the CPU and on torch's kernels for it, so it is measured, once per
    process (``scan_probe``): the faster of the float16 rows and the packed ones where its product
    takes at most ``SCAN_SHARE`` of the float32 columns' one, else the float32 columns
    (``Similarity``'s ``columns`` way: exact, one product that streams the d rows instead of taking N
    dot products). Measured at 10^5 events, batch 1 (``experiments/batch1_latency.py``;
    BENCHMARKS.md): on the 2-core AMD EPYC VM (AVX-512, AVX512-BF16, no native fp16) the float16 scan
    takes 1.8 ms against 5.2 for the columns and the whole question 5.5 ms against 8.2; on an
    AVX2-only one (F16C, no AVX-512) 5.0-5.7 ms against 7.0-7.9 and the question 12.9-14.7 ms against
    12.7-13.8 with tensor re-reads, where FBGEMM's packed float16 takes 2.5-3.4 ms and the question,
    with the compiled loops, 8.1 ms against 9.9 for the columns; on the 2-core Intel Xeon VM (AVX-512
    fp16 and bf16, AMX) the float16 scan took 7.2 ms against 6.9 for the columns and the question
    23.3 against 12.5 ms; with torch's scalar kernels (``ATEN_CPU_CAPABILITY=default``) float16 is
    converted value by value and takes several times the columns' time.
    """
    if device.type != "cpu":
        return torch.float16
    probe = scan_probe()
    ways = {torch.float16: probe["float16_rows_ms"]}
    # The probe is timed once per process; asking again keeps a store that gives the packed copy up
    # (no FBGEMM, or a test that takes it away) from being handed it back.
    if "float16_packed_ms" in probe and packed_half.available():
        ways[packed_half.NAME] = probe["float16_packed_ms"]
    fastest = min(ways, key=ways.get)
    return fastest if ways[fastest] <= SCAN_SHARE * probe["float32_columns_ms"] else torch.float32
