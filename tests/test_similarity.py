"""query/similarity.py: the matrix, the float32 columns and the half-precision scan give the same
exact cosines and top-k."""
import os
import subprocess
import sys

import pytest
import torch

from magma_torch.query.similarity import SAMPLE_STRIDE, Similarity, SimilarityConfig
from magma_torch.testing import with_package

MATRIX, SCAN = SimilarityConfig(matrix_min_batch=1), SimilarityConfig(matrix_min_batch=10**9)


def near_ties(n=3000, d=32, seed=0):
    """Unit vectors in tight clusters: many cosines closer together than fp16 or bf16 can resolve."""
    g = torch.Generator().manual_seed(seed)
    centres = torch.randn(20, d, generator=g)
    emb = centres[torch.randint(0, 20, (n,), generator=g)] + 1e-3 * torch.randn(n, d, generator=g)
    emb[7] = emb[3]                                            # an exact tie: the lower id ranks first
    q = torch.nn.functional.normalize(torch.cat([centres[:3], emb[3:4]]) + 1e-3, dim=1)
    return torch.nn.functional.normalize(emb, dim=1), q


def exact_top(emb, q, k):
    scores = (q.double() @ emb.double().T).tolist()
    return [sorted(range(len(row)), key=lambda v: (-row[v], v))[:k] for row in scores]


@pytest.mark.parametrize("k", [1, 50, 700])
@pytest.mark.parametrize("half", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("compiled", [False, True])   # the scan's exact re-reads: tensor ops or numba loops
def test_scan_and_matrix_give_the_exact_top_k(k, half, compiled):
    emb, q = near_ties()
    scan = Similarity(emb, emb.to(half), q, SCAN, torch.float64, compiled=compiled)
    matrix = Similarity(emb, emb.to(half), q, MATRIX, torch.float64)
    assert (scan.mode, matrix.mode) == ("scan", "matrix")
    # half precision cannot tell these apart: the scan alone would get the order wrong
    approx = (q.to(half) @ emb.to(half).T).float()
    assert approx.topk(k).indices.tolist() != exact_top(emb, q, k) or k == 1
    want = exact_top(emb, q, k)
    assert scan.top_k(k).tolist() == want
    assert matrix.top_k(k).tolist() == want
    for i in range(q.shape[0]):                                # the columns way takes one question
        columns = Similarity(emb, emb.T.contiguous(), q[i:i + 1], SCAN, torch.float64)
        assert columns.mode == "columns" and columns.top_k(k).tolist() == want[i:i + 1]


@pytest.mark.parametrize("half", [None, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("compiled", [False, True])
def test_top_k_reads_the_values_above_a_sampled_bound(half, compiled):
    """On CPU the matrix way keeps the cosines at or above a bound taken from every SAMPLE_STRIDE-th
    one, and the scan finds its k-th approximate cosine among the approximate ones above such a
    bound; where that leaves fewer than k in a row, torch.topk decides, and the top k is exact
    every way."""
    emb, q = near_ties(n=5000)

    def way(emb):
        sim = Similarity(emb, None if half is None else emb.to(half), q, MATRIX if half is None else SCAN,
                         torch.float64, compiled=compiled)
        return sim, sim.matrix if half is None else sim.approx

    sim, values = way(emb)
    assert sim._above_sampled_bound(values, 50)[0] is not None and sim.top_k(50).tolist() == exact_top(emb, q, 50)
    # the sampled events are question 0 itself and no other is near it: the bound passes them
    # alone, fewer than k
    emb[(emb @ q[0]) > 0.9] *= -1
    sampled = emb[::SAMPLE_STRIDE]
    g = torch.Generator().manual_seed(1)   # apart by far more than a double's rounding, so the order is one
    emb[::SAMPLE_STRIDE] = torch.nn.functional.normalize(q[0] + 1e-4 * torch.randn(sampled.shape, generator=g), dim=1)
    sim, values = way(emb)
    assert sim._above_sampled_bound(values, 100)[0] is None and sim.top_k(100).tolist() == exact_top(emb, q, 100)


@pytest.mark.parametrize("compiled", [False, True])
def test_pairs_agree_and_short_lists_are_padded(compiled):
    emb, q = near_ties(n=40)
    qi, nodes = torch.tensor([0, 3, 3, 1]), torch.tensor([5, 3, 7, 39])
    want = (q[qi].double() * emb[nodes].double()).sum(-1)
    for cfg, copy in ((MATRIX, emb.half()), (SCAN, emb.half()), (SCAN, emb.T.contiguous())):
        sim = Similarity(emb, copy, q, cfg, torch.float64, compiled=compiled)
        assert torch.allclose(sim.pairs(qi, nodes), want, atol=1e-12)
        one = Similarity(emb, copy, q[3:4], cfg, torch.float64, compiled=compiled)
        assert torch.allclose(one.pairs(torch.zeros(2, dtype=torch.long), nodes[1:3]), want[1:3], atol=1e-12)
        top = sim.top_k(45)
        assert top[:, 40:].eq(-1).all() and top[3, :2].tolist() == [3, 7]   # tie at cos 1: lower id first


def test_matrix_for_large_batches_or_without_a_half_precision_copy():
    emb, q = near_ties(n=100)
    assert Similarity(emb, emb.half(), q, SimilarityConfig(matrix_min_batch=4)).mode == "matrix"
    assert Similarity(emb, emb.half(), q, SimilarityConfig(matrix_min_batch=5)).mode == "scan"
    assert Similarity(emb, emb.T.contiguous(), q[:1], SimilarityConfig(matrix_min_batch=5)).mode == "columns"
    assert Similarity(emb, emb.T.contiguous(), q, SimilarityConfig(matrix_min_batch=5)).mode == "matrix"
    assert Similarity(emb, None, q, SCAN).mode == "matrix"


@pytest.mark.parametrize("compiled", [False, True])
def test_pairs_with_a_floor_are_exact_above_it(compiled):
    emb, q = near_ties(n=400)
    g = torch.Generator().manual_seed(1)
    qi, nodes = torch.randint(0, 4, (3000,), generator=g), torch.randint(0, 400, (3000,), generator=g)
    exact = Similarity(emb, None, q, MATRIX, torch.float64).pairs(qi, nodes)
    floor = float(exact.median())                              # half the pairs either side
    got = Similarity(emb, emb.half(), q, SCAN, torch.float64, compiled=compiled).pairs(qi, nodes, floor=floor)
    above = exact >= floor
    assert torch.allclose(got[above], exact[above], rtol=0, atol=1e-12)   # exact where a decision reads it
    assert bool((got[~above] < floor).all())                   # approximate below, but still below


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("way", ["matrix", "scan"])
def test_identical_events_tie_to_the_lower_id_wherever_they_fall(way, compiled):
    """Before, in the tensor programs: the matrix way of a small memory cut a tie across the k-th place where
    torch.topk did, and one question's exact re-reads (a matrix-vector product) gave a chunk's last rows
    values an ulp apart, so identical events ranked out of id order."""
    g = torch.Generator().manual_seed(0)
    d, n = 384, 300
    twin = torch.nn.functional.normalize(torch.randn(n, d, generator=g), dim=1)[99]
    q = torch.nn.functional.normalize(torch.randn(1, d, generator=g), dim=1)
    emb = torch.nn.functional.normalize(-q.repeat(n, 1) + 0.01 * torch.randn(n, d, generator=g), dim=1)
    emb[99:120] = emb[50] = twin                               # only the twins are near the question
    sim = Similarity(emb, emb.half() if way == "scan" else None, q, SCAN if way == "scan" else MATRIX,
                     torch.float32, compiled=compiled)
    twins = torch.tensor([50, *range(99, 120)])
    assert len(set(sim.pairs(torch.zeros(22, dtype=torch.long), twins).tolist())) == 1
    assert sim.top_k(22).tolist() == [twins.tolist()]
    assert sim.top_k(5).tolist() == [[50, 99, 100, 101, 102]]   # the tie across the 5th place: lower ids


@pytest.mark.parametrize("score", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("copy", ["packed", "float16 rows"])
def test_half_precision_scores_keep_the_scan_exact(score, copy):
    """retrieval.score_dtype float16 or bfloat16 rounds the approximate cosines before they meet a floor
    or the k-th one; before, the band ignored that: with bfloat16 scores and the packed copy, pairs at a
    floor came back below it, top_k missed members of the exact top k and padded with -1."""
    from magma_torch.store import packed_half

    if copy == "packed" and not packed_half.available():
        pytest.skip("this torch has no FBGEMM float16 GEMM")
    g = torch.Generator().manual_seed(0)
    n, d = 20000, 384                    # two packed blocks and 3,616 unpacked rows
    centres = torch.randn(8, d, generator=g)
    emb = torch.nn.functional.normalize(centres[torch.randint(0, 8, (n,), generator=g)]
                                        + 0.6 * torch.randn(n, d, generator=g), dim=1)
    q = torch.nn.functional.normalize(centres[:4] + 0.3 * torch.randn(4, d, generator=g), dim=1)
    if copy == "packed":
        rows = packed_half.PackedHalfRows(d)
        rows.cover(emb)
        scan_copy = rows.data
    else:
        scan_copy = emb.half()
    sim = Similarity(emb, scan_copy, q, SCAN, score)
    qi, nodes = torch.arange(4).repeat_interleave(n), torch.arange(n).repeat(4)
    exact = sim.pairs(qi, nodes)                               # the same object's exact reads, in the score dtype
    floor = float(exact.float().quantile(0.9))
    got = sim.pairs(qi, nodes, floor=floor)
    assert not bool(((exact >= floor) & (got < floor)).any())
    want = [sorted(range(n), key=lambda v: (-float(r[v]), v))[:200] for r in exact.view(4, n)]
    assert sim.top_k(200).tolist() == want


THREADED = """
import threading, numba, torch
torch.set_num_threads(1)
from magma_torch import MagmaMemory
from magma_torch.config.schema import SimilarityConfig
from magma_torch.query.similarity import Similarity
mem = MagmaMemory(config={"slow_path": {"background": False}}, consolidation="none")
mem.add_many([{"text": f"turn {i} about the garden", "timestamp": 1_700_000_000 + 60 * i, "stream": "s"}
              for i in range(40)])
mem.retrieve("what about the garden?")       # every compiled step, in a question's order
after_retrieve = torch.get_num_threads()
emb = torch.nn.functional.normalize(torch.randn(20000, 32), dim=1)
seen = []
def work():
    for _ in range(20):
        q = torch.nn.functional.normalize(torch.randn(1, 32), dim=1)
        Similarity(emb, emb.half(), q, SimilarityConfig(matrix_min_batch=10**9), compiled=True).top_k(500)
    seen.append(numba.get_num_threads())
threads = [threading.Thread(target=work) for _ in range(2)]
[t.start() for t in threads]
[t.join() for t in threads]
print(numba.threading_layer(), after_retrieve, torch.get_num_threads(), max(seen))
"""


@with_package("numba", extra="fast")
@pytest.mark.parametrize("layer", ["default", "workqueue"])
def test_the_compiled_loops_keep_torchs_threads_and_two_readers_share_them(layer):
    """In a fresh process (numba's pool starts once): a user's torch.set_num_threads(1) survives a
    retrieval's parallel loops, which run on one thread too; two threads reading at once under
    numba's workqueue layer, which is not thread-safe, take turns instead of aborting."""
    env = {**os.environ, **({"NUMBA_THREADING_LAYER": "workqueue"} if layer == "workqueue" else {})}
    run = subprocess.run([sys.executable, "-c", THREADED], env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    got = run.stdout.split()
    assert got[1:] == ["1", "1", "1"] and (layer == "default" or got[0] == "workqueue")   # default: omp, tbb or workqueue
