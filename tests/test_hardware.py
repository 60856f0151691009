"""scan_dtype: auto picks the half-precision copy by what torch's CPU kernels can do; bad values fail clearly."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from magma_torch.hardware import HALF_FLAGS, auto_scan_dtype, cpu_flags, cpu_model
from magma_torch.store.store import MemoryStore


@pytest.mark.parametrize("capability, expected", [("AVX512", torch.float16), ("AVX2", torch.float16),
                                                  ("DEFAULT", torch.bfloat16)])
def test_auto_scan_dtype_follows_torchs_cpu_kernels(monkeypatch, capability, expected):
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: capability)
    assert auto_scan_dtype(torch.device("cpu")) == expected
    assert auto_scan_dtype(torch.device("cuda")) == torch.float16        # (no CUDA needed to decide)
    assert MemoryStore(8, scan_dtype="auto").events.scan_embeddings.data.dtype == expected


def test_store_keeps_an_explicit_scan_dtype_and_refuses_others():
    assert MemoryStore(8, scan_dtype="bfloat16").events.scan_embeddings.data.dtype == torch.bfloat16
    assert MemoryStore(8, scan_dtype="float16").events.scan_embeddings.data.dtype == torch.float16
    with pytest.raises(ValueError, match="scan_dtype must be one of auto, float16, bfloat16, got 'float64'"):
        MemoryStore(8, scan_dtype="float64")


def test_without_vectorised_kernels_a_store_scans_bfloat16():
    """In a process whose torch runs scalar kernels (ATEN_CPU_CAPABILITY=default), auto is bfloat16."""
    code = ("import torch; from magma_torch.store.store import MemoryStore; "
            "print(torch.backends.cpu.get_cpu_capability(), MemoryStore(8).events.scan_embeddings.data.dtype)")
    out = subprocess.run([sys.executable, "-c", code], env={**os.environ, "ATEN_CPU_CAPABILITY": "default"},
                         capture_output=True, text=True, check=True, timeout=300).stdout.split()
    assert out == ["DEFAULT", "torch.bfloat16"]


def test_machine_record_names_the_cpu_and_its_half_precision_flags():
    flags = cpu_flags()
    assert set(flags) <= set(HALF_FLAGS) and flags == sorted(flags, key=HALF_FLAGS.index)
    assert cpu_model()
