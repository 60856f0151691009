"""What the CPU can do in half precision, recorded with every benchmark, and the copy of the
embeddings that ``scan_dtype: auto`` gives the store for small query batches."""
from __future__ import annotations

import platform
from functools import cache
from pathlib import Path

import torch

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


def auto_scan_dtype(device: torch.device) -> torch.dtype:
    """``scan_dtype: auto``: the copy of the embeddings small query batches read on this device.

    On CPU, float32 columns [d, N] (``Similarity``'s ``columns`` way): exact, so the anchors and
    the beam read every pair from one product, and the product streams the d rows instead of
    taking N dot products. Batch-1 p50 on the 2-core Intel Xeon VM (AVX-512, fp16 and bf16),
    10^5 events, ``experiments/batch1_latency.py`` (BENCHMARKS.md), float32 columns / float16 /
    bfloat16 scan / fp32 rows, no copy: 25.3 / 32.3 / 35.6 / 29.1 ms, and with scalar kernels
    (``ATEN_CPU_CAPABILITY=default``; the product goes to the BLAS library either way) 24.8 / 62.8 /
    34.6 / 29.1 ms. Earlier, on a 2-core AMD EPYC with one thread and before the columns way,
    float16 / bfloat16 / fp32 rows: 11.7 / 14.5 / 16.3 ms under AVX-512 kernels, 37.0 / 15.9 / 17.0
    with scalar ones, where torch converts fp16 value by value; the columns way is not measured there.
    On CUDA, float16: a half-precision scan reads half the bytes, and cuBLAS reads rows or
    columns alike.
    """
    return torch.float16 if device.type != "cpu" else torch.float32
