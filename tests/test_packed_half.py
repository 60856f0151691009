"""store/packed_half.py: the float16 copy packed for FBGEMM stays within its error bound, grows in
small then large blocks with every snapshot unchanged, and gives the exact top-k through the scan."""
import math

import pytest
import torch

from magma_torch import hardware
from magma_torch.query.similarity import Similarity, SimilarityConfig
from magma_torch.store import packed_half
from magma_torch.store.integrity import problems
from magma_torch.store.store import MemoryStore
from magma_torch.store.tables import EventRow, scan_copy_name
from magma_torch.testing import with_fbgemm
from test_similarity import near_ties   # clustered unit vectors: cosines closer than float16 resolves

pytestmark = with_fbgemm()
SCAN = SimilarityConfig(matrix_min_batch=10**9)


@pytest.fixture
def small_blocks(monkeypatch):
    """Blocks of 4 and 16 rows, so a few dozen events cross both sizes."""
    monkeypatch.setattr(packed_half, "SMALL_ROWS", 4)
    monkeypatch.setattr(packed_half, "LARGE_ROWS", 16)


def unit_rows(n, d, seed=0):
    g = torch.Generator().manual_seed(seed)
    emb = torch.randn(n, d, generator=g)
    emb[:, :3] *= 1e-4      # values below float16's normal range (2^-14), rounded to its subnormals
    return torch.nn.functional.normalize(emb, dim=1)


def test_the_product_stays_within_the_bound_and_the_bound_is_tighter_than_the_float16_scans(small_blocks):
    emb = unit_rows(70, 384)                 # 4 large blocks' worth would be 64: 1 large, 1 small, 2 unpacked
    rows = packed_half.PackedHalfRows(emb.shape[1])
    rows.cover(emb)
    view = rows.data
    assert (len(view.blocks), view.packed_rows, view.num_rows) == (5, 68, 70)
    q = torch.randn(6, 384, generator=torch.Generator().manual_seed(1)) * torch.tensor([[1.0], [0.1], [3], [1], [1], [1]])
    exact = q.double() @ emb.double().T
    error = (view.product(q, emb).double() - exact).abs()
    bound = view.error_bound(q).double()[:, None]
    assert bool((error <= bound).all())
    assert float(error[:, 68:].max()) < 1e-5          # the unpacked rows are scored from float32 exactly
    half_scan = 2 * torch.finfo(torch.float16).eps * torch.linalg.vector_norm(q, dim=1)
    assert bool((view.error_bound(q) < 0.3 * half_scan).all())
    assert math.isclose(float(view.error_bound(torch.ones(1, 384) / math.sqrt(384))), 5.4e-4, rel_tol=0.05)


def test_blocks_fill_small_then_large_and_a_snapshot_never_changes(small_blocks):
    emb = unit_rows(90, 8)
    rows = packed_half.PackedHalfRows(emb.shape[1])
    views = []
    for n in (3, 4, 13, 16, 17, 35, 90):      # one event at a time would do the same, in more steps
        rows.cover(emb[:n])
        views.append((n, rows.data, rows.data.unpacked().clone()))
    assert [(v.packed_rows, len(v.blocks)) for _, v, _ in views] == [(0, 0), (4, 1), (12, 3), (16, 1), (16, 1),
                                                                     (32, 2), (88, 7)]
    for n, view, values in views:             # later covers left every earlier view as it was
        assert view.num_rows == n and torch.equal(view.unpacked(), values)
        assert torch.equal(values, emb[:view.packed_rows].half().float())
    bulk = packed_half.PackedHalfRows(emb.shape[1])
    bulk.cover(emb)                           # one bulk add packs its large blocks directly
    assert len(bulk.data.blocks) == 7 and torch.equal(bulk.data.unpacked(), views[-1][2])


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_the_scan_over_packed_rows_gives_the_exact_top_k_and_pairs(small_blocks, monkeypatch, compiled, dtype):
    monkeypatch.setattr(packed_half, "SMALL_ROWS", 256)
    monkeypatch.setattr(packed_half, "LARGE_ROWS", 1024)
    emb, q = near_ties()
    rows = packed_half.PackedHalfRows(emb.shape[1])
    rows.cover(emb)
    assert rows.data.packed_rows == 2816      # 2 large, 3 small, 184 unpacked
    sim = Similarity(emb, rows.data, q, SCAN, dtype, compiled=compiled)
    matrix = Similarity(emb, None, q, SCAN, dtype)
    assert (sim.mode, matrix.mode) == ("scan", "matrix")
    approx = sim.approx.topk(500).indices
    assert not torch.equal(approx, matrix.matrix.topk(500).indices)      # the packed values alone rank wrongly
    if dtype == torch.float64:   # in float32 the two ways' sums, in other orders, can swap cosines a rounding apart
        assert sim.top_k(500).tolist() == matrix.top_k(500).tolist()
    g = torch.Generator().manual_seed(2)
    qi, nodes = torch.randint(0, 4, (4000,), generator=g), torch.randint(0, 3000, (4000,), generator=g)
    torch.testing.assert_close(sim.pairs(qi, nodes), matrix.pairs(qi, nodes), rtol=0, atol=1e-6)
    floor = float(matrix.pairs(qi, nodes).median())
    got, want = sim.pairs(qi, nodes, floor=floor), matrix.pairs(qi, nodes)
    above = want >= floor
    torch.testing.assert_close(got[above], want[above], rtol=0, atol=1e-6)
    assert bool((got[~above] < floor).all())


def test_a_store_keeps_the_packed_copy_checks_it_and_records_its_name(small_blocks):
    store = MemoryStore(8, scan_dtype=packed_half.NAME)
    emb = unit_rows(40, 8)

    def add(a, b):
        store.append_events([EventRow(f"turn {i}", float(i), "s") for i in range(a, b)], emb[a:b],
                            [["turn"]] * (b - a))

    add(0, 30)
    before = store.snapshot().scan_embeddings
    add(30, 40)
    snap = store.snapshot()
    assert scan_copy_name(snap.scan_embeddings) == "float16_packed" and snap.scan_embeddings.num_rows == 40
    assert (before.packed_rows, before.num_rows) == (28, 30)
    assert not [p for p in problems(store) if "scan_embeddings" in p]
    store.events.scan_embeddings.small[0] = packed_half.pack(emb[:4].flip(0))
    assert "events.scan_embeddings' packed blocks are not the float16 copy of events.embeddings" in problems(store)


def copy_problems(store):
    return [p for p in problems(store) if "embeddings" in p or "rows for" in p]


@pytest.fixture
def engine():
    """Sets torch's quantized engine for the process, as another library may, and puts it back."""
    before = torch.backends.quantized.engine
    yield lambda name: setattr(torch.backends.quantized, "engine", name)
    torch.backends.quantized.engine = before


def test_an_engine_that_cannot_pack_leaves_rows_unpacked_and_the_store_whole(small_blocks, engine):
    """Before, an add that filled a block while qnnpack was selected failed halfway (its embeddings stored, the
    rest of its events not, every later event's row then off by that many), and available() stayed False for
    the whole process once it was first asked under such an engine."""
    store = MemoryStore(8, scan_dtype=packed_half.NAME)
    emb, q = unit_rows(60, 8), unit_rows(3, 8, seed=1)

    def add(a, b):
        store.append_events([EventRow(f"turn {i}", float(i), "s") for i in range(a, b)], emb[a:b],
                            [["turn"]] * (b - a))

    add(0, 10)
    engine("qnnpack")
    assert not packed_half.available()
    with pytest.warns(RuntimeWarning, match="did not pack events 8-39"):
        add(10, 40)
    copy = store.snapshot().scan_embeddings
    assert (copy.packed_rows, copy.num_rows, len(store.events)) == (8, 40, 40) and not copy_problems(store)
    sim = Similarity(emb[:40], copy, q, SCAN, torch.float64)
    assert sim.top_k(12).tolist() == [sorted(range(40), key=lambda v: (-float(emb[v].double() @ r.double()), v))[:12]
                                      for r in q]
    engine("x86")
    assert packed_half.available()
    add(40, 60)                          # packed again as the table fills blocks
    copy = store.snapshot().scan_embeddings
    assert (copy.packed_rows, copy.num_rows) == (60, 60) and not copy_problems(store)


def test_where_fbgemm_is_missing_the_packed_copy_gives_way_to_autos_and_a_saved_memory_opens(monkeypatch, caplog,
                                                                                               tmp_path):
    """The packed copy is a speed setting: a memory saved with it on an x86 CPU loads on a torch
    without FBGEMM (an ARM one) or onto CUDA, taking auto's copy with a warning that names it."""
    from magma_torch import MagmaMemory

    mem = MagmaMemory(config={"scan_dtype": packed_half.NAME, "slow_path": {"background": False}}, consolidation="none")
    mem.add_many([{"text": f"event {i} about the garden", "timestamp": 1_700_000_000 + i, "stream": "s"}
                  for i in range(5)])
    assert mem.store.events.scan_packed
    want = mem.retrieve("what about the garden?").context_ids
    mem.save(tmp_path / "m")
    mem.close()
    monkeypatch.setattr(packed_half, "available", lambda: False)
    # a probe timed while FBGEMM was there, with the packed rows fastest, as on the x86 CPUs measured
    monkeypatch.setattr(hardware, "scan_probe", lambda: {"float32_columns_ms": 3.5, "float16_rows_ms": 3.0,
                                                         "float16_packed_ms": 1.5})
    store = MemoryStore(8, scan_dtype=packed_half.NAME)
    assert not store.events.scan_packed
    assert "MemoryStore.scan_dtype: float16_packed needs FBGEMM on the CPU (x86 builds of torch), not cpu" in caplog.text
    loaded = MagmaMemory.load(tmp_path / "m")
    assert not loaded.store.events.scan_packed and loaded.retrieve("what about the garden?").context_ids == want
    loaded.close()
