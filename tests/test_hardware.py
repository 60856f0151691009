"""scan_dtype: auto gives a CPU store the copy whose product it measures fastest (float32 columns,
float16 rows, or float16 rows packed for FBGEMM), CUDA the float16 rows; bad values fail clearly."""
from __future__ import annotations

import math
import os
import re
import subprocess
import sys

import pytest
import torch

from magma_torch import hardware
from magma_torch.hardware import HALF_FLAGS, auto_scan_dtype, cpu_flags, cpu_model
from magma_torch.config.schema import ConfigError
from magma_torch.store import packed_half
from magma_torch.store.store import MemoryStore
from magma_torch.store.tables import EventRow
from magma_torch.store.vector_index import VectorIndex
from magma_torch.testing import with_fbgemm


@pytest.mark.parametrize(("half_ms", "want"), [(1.0, torch.float16), (1.7, torch.float16), (2.3, torch.float16),
                                               (2.7, torch.float32), (3.5, torch.float32), (7.0, torch.float32)])
def test_auto_on_cpu_takes_float16_rows_only_well_below_the_columns_time(monkeypatch, half_ms, want):
    # 1.7 / 3.5: the AVX-512 EPYC's highest float16-rows ratio (0.49); 2.3 / 3.5 (0.66): about where the
    # float16 rows won by 0.4 ms on the AVX2-only EPYC; 2.7 / 3.5 (0.77): past the share (0.75)
    monkeypatch.setattr(hardware, "scan_probe", lambda: {"float32_columns_ms": 3.5, "float16_rows_ms": half_ms})
    assert auto_scan_dtype(torch.device("cpu")) == want
    store = MemoryStore(8, scan_dtype="auto")
    if want == torch.float32:
        assert store.events.scan_columns and store.events.scan_embeddings.data.shape == (8, 0)
    else:
        assert not store.events.scan_columns and store.events.scan_embeddings.data.dtype == torch.float16


@with_fbgemm()
@pytest.mark.parametrize(("half_ms", "packed_ms", "want"), [(3.0, 1.5, packed_half.NAME), (1.0, 1.5, torch.float16),
                                                            (3.0, 2.8, torch.float32)])
def test_auto_on_cpu_takes_the_faster_prefilter_where_fbgemm_packs_float16(monkeypatch, half_ms, packed_ms, want):
    monkeypatch.setattr(hardware, "scan_probe", lambda: {"float32_columns_ms": 3.5, "float16_rows_ms": half_ms,
                                                         "float16_packed_ms": packed_ms})
    assert auto_scan_dtype(torch.device("cpu")) == want
    events = MemoryStore(8, scan_dtype="auto").events
    assert (events.scan_packed, events.scan_columns) == (want == packed_half.NAME, want == torch.float32)


def test_auto_is_float16_on_cuda_and_the_probe_times_each_product():
    assert auto_scan_dtype(torch.device("cuda")) == torch.float16        # (no CUDA needed to decide)
    probe = hardware.scan_probe()
    assert set(probe) == {"float32_columns_ms", "float16_rows_ms"} | (
        {"float16_packed_ms"} if packed_half.available() else set()) and min(probe.values()) > 0
    ways = {torch.float16: probe["float16_rows_ms"], packed_half.NAME: probe.get("float16_packed_ms", math.inf)}
    fastest = min(ways, key=ways.get)
    assert auto_scan_dtype(torch.device("cpu")) == (
        fastest if ways[fastest] <= hardware.SCAN_SHARE * probe["float32_columns_ms"] else torch.float32)


def test_store_keeps_an_explicit_scan_dtype_and_refuses_others():
    assert MemoryStore(8, scan_dtype="bfloat16").events.scan_embeddings.data.dtype == torch.bfloat16
    assert MemoryStore(8, scan_dtype="float16").events.scan_embeddings.data.dtype == torch.float16
    with pytest.raises(ConfigError, match="^MemoryStore.scan_dtype: must be one of auto, float32, float16, bfloat16, "
                                          "float16_packed, got 'float64'$"):
        MemoryStore(8, scan_dtype="float64")


@pytest.mark.parametrize("kwargs, message", [
    ({"vector_backend": "faise"}, "MemoryStore.vector_backend: must be one of auto, faiss, torch, got 'faise'"),
    ({"chain_span": -1}, "MemoryStore.chain_span: must be >= 0, got -1"),
    ({"bm25_b": 1.5}, "MemoryStore.bm25.b: must be between 0 and 1, got 1.5"),
    ({"bm25_k1": -0.1}, "MemoryStore.bm25.k1: must be >= 0, got -0.1")])
def test_a_store_built_directly_checks_its_settings_by_the_schema(kwargs, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        MemoryStore(8, **kwargs)
    expected = "^VectorIndex.vector_backend: must be one of auto, faiss, torch, got 'faise'$"
    with pytest.raises(ConfigError, match=expected):
        VectorIndex(8, backend="faise")   # it fell back to torch in silence


@pytest.mark.parametrize("scan_dtype", ["float32", "float16"])
def test_the_copy_follows_the_embeddings_across_growth_and_old_snapshots_stay(scan_dtype):
    """Appends past the copy's capacity (it doubles) keep it equal to the embeddings, as columns
    [d, N] for float32 and rows for half precision; a snapshot taken earlier does not change."""
    store = MemoryStore(4, scan_dtype=scan_dtype)
    g = torch.Generator().manual_seed(0)
    emb = torch.nn.functional.normalize(torch.randn(3000, 4, generator=g), dim=1)
    ev = store.events

    def append(a, b):
        ev.append([EventRow(f"turn {i}", float(i), "s") for i in range(a, b)], emb[a:b])

    append(0, 700)
    view = store.snapshot().scan_embeddings
    before = view.clone()
    append(700, 3000)
    copy = store.snapshot().scan_embeddings
    assert torch.equal(copy.T if ev.scan_columns else copy, emb.to(getattr(torch, scan_dtype)))
    assert torch.equal(view, before)


def test_without_vectorised_kernels_auto_never_takes_torchs_float16_rows():
    """In a process whose torch runs scalar kernels (ATEN_CPU_CAPABILITY=default) float16 is
    converted value by value, while the float32 product goes to the BLAS library and FBGEMM's to
    its own kernels, which keep their vector instructions: the probe picks the float32 columns, or
    the packed float16 rows where FBGEMM is."""
    code = ("import torch; from magma_torch.store.store import MemoryStore; "
            "from magma_torch.store.tables import scan_copy_name; "
            "print(torch.backends.cpu.get_cpu_capability(), scan_copy_name(MemoryStore(8).snapshot().scan_embeddings))")
    out = subprocess.run([sys.executable, "-c", code], env={**os.environ, "ATEN_CPU_CAPABILITY": "default"},
                         capture_output=True, text=True, check=True, timeout=300).stdout.split()
    assert out[0] == "DEFAULT" and out[1] in ("torch.float32", packed_half.NAME)


def test_machine_record_names_the_cpu_and_its_half_precision_flags():
    flags = cpu_flags()
    assert set(flags) <= set(HALF_FLAGS) and flags == sorted(flags, key=HALF_FLAGS.index)
    assert cpu_model()
