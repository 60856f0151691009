"""What the CPU can do in half precision: recorded with every benchmark, and what
``scan_dtype: auto`` decides by."""
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
    """``scan_dtype: auto``: the half-precision copy the batch-1 scan reads on this device.

    float16 on CUDA and wherever torch's CPU kernels are vectorised (AVX2, AVX-512, NEON...):
    they convert fp16 with F16C/AVX-512 at memory speed. Without vectorised kernels
    (``torch.backends.cpu.get_cpu_capability() == "DEFAULT"``) each fp16 value is converted
    in scalar code, and bfloat16 (a shift to fp32) is the faster copy. Batch-1 p50 per query on a
    2-core AMD EPYC (AVX512-BF16 and F16C, no native fp16), 10^5 events, one thread,
    ``experiments/batch1_latency.py --threads 1``, float16 / bfloat16 copy / fp32 rows, no copy:
    AVX-512 kernels 11.7 / 14.5 / 16.3 ms, AVX2 10.8 / 14.5 / 16.7, DEFAULT 37.0 / 15.9 / 17.0.
    """
    if device.type != "cpu" or torch.backends.cpu.get_cpu_capability() != "DEFAULT":
        return torch.float16
    return torch.bfloat16
