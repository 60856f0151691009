"""The batched beam search returns exactly the reference implementation's node sets."""
import dataclasses

import pytest
import torch

from magma_torch.config.resolve import ConfigError
from magma_torch.query import kernel
from magma_torch.query.beam import BeamConfig, beam_search, relation_weights
from magma_torch.query.reference import adjacency_lists, reference_beam_search
from magma_torch.query.similarity import Similarity, SimilarityConfig
from magma_torch.store.graph import REL_ID, RELATIONS, MultiGraph
from magma_torch.testing import with_cuda, with_package

INTENTS = ("WHY", "WHEN", "ENTITY")


def num_episodes(n):
    return max(n // 8, 1)


def random_graph(seed, n, m_entities, edges_per_rel, hub=False, isolated=0):
    """Random edges of every relation; each live event is in one of num_episodes(n) episodes."""
    g = torch.Generator().manual_seed(seed)
    graph = MultiGraph()
    pairs = {}
    live = n - isolated  # the last `isolated` events get no edges at all
    m_ep = num_episodes(n)
    for rel in RELATIONS:
        if live == 0:
            pairs[rel] = []
            continue
        hi = {"entity": m_entities, "episode": m_ep, "episode_chain": m_ep}.get(rel, live)
        src = torch.randint(0, m_ep if rel == "episode_chain" else live, (edges_per_rel,), generator=g)
        dst = torch.randint(0, hi, (edges_per_rel,), generator=g)
        if rel == "episode":
            src = torch.arange(live)
            dst = torch.randint(0, m_ep, (live,), generator=g)
        if hub and rel == "semantic":
            src[: edges_per_rel // 2] = 0  # one node of very high degree
        if rel not in ("entity", "episode"):
            keep = src != dst
            src, dst = src[keep], dst[keep]
        half = src.numel() // 2
        graph.add_edges(rel, src[:half], dst[:half])
        graph.snapshot(n, m_entities, m_ep)  # later edges then land in the CSR delta: both parts are walked
        graph.add_edges(rel, src[half:], dst[half:])
        pairs[rel] = list(zip(src.tolist(), dst.tolist(), strict=True))
    emb = torch.nn.functional.normalize(torch.randn(n, 16, generator=g), dim=1)
    return graph, pairs, emb


WEIGHTS = {"WHY": {"temporal": 1.0, "semantic": 1.5, "causal": 4.0, "entity": 2.5, "episode": 0.5},
           "WHEN": {"temporal": 4.0, "semantic": 1.0, "causal": 1.5, "entity": 2.0, "episode": 1.5},
           "ENTITY": {"temporal": 1.0, "semantic": 2.0, "causal": 1.0, "entity": 5.0, "episode": 1.0}}


def run_both(graph, pairs, emb, n, m, cfg, seed, batch=12, k=4, weights=WEIGHTS, result=None, scan=False,
             kernel="torch"):
    g = torch.Generator().manual_seed(seed + 1)
    queries = torch.nn.functional.normalize(torch.randn(batch, 16, generator=g), dim=1)
    intents = torch.randint(0, 3, (batch,), generator=g)
    anchors = torch.stack([torch.randperm(n, generator=g)[:k] for _ in range(batch)])
    anchors[0, 2:] = -1  # padded anchor rows are allowed
    anchor_scores = torch.rand(batch, k, generator=g, dtype=torch.float64) * 5
    # scan: cosines from gathered rows; else from the batch's [B, N] matrix (query/similarity.py)
    sim = Similarity(emb, emb.half(), queries, SimilarityConfig(matrix_min_batch=batch + 1 if scan else 1),
                     dtype=torch.float64)
    res = beam_search(graph.snapshot(n, m, num_episodes(n)), sim, intents, anchors, anchor_scores, relation_weights(weights, INTENTS),
                      cfg, kernel)
    adj, ent = adjacency_lists(pairs)
    emb_l, out = emb.tolist(), []
    for b in range(batch):
        got = {int(v): float(s) for v, s in zip(res.node[res.query == b], res.score[res.query == b], strict=True)}
        a = [(int(x), float(s)) for x, s in zip(anchors[b], anchor_scores[b], strict=True) if x >= 0]
        ref = reference_beam_search(adj, ent, emb_l, queries[b].tolist(), weights[INTENTS[intents[b]]], a, cfg)
        out.append((got, ref))
    if result is not None:
        result.append(res)
    return out


with_numba = with_package("numba", extra="fast")
# (retrieval.kernel, scan): cosines from the [B, N] matrix, searched by the tensor program or the
# compiled one; or from the half-precision scan, which only the tensor program reads
WAYS = [("torch", False), pytest.param(("numba", False), marks=with_numba), ("torch", True)]


@pytest.mark.parametrize("shape", [
    dict(n=50, m=5, e=120), dict(n=300, m=20, e=900), dict(n=40, m=3, e=400),   # dense: many cycles
    dict(n=200, m=10, e=300, hub=True), dict(n=120, m=8, e=200, isolated=30), dict(n=30, m=1, e=10),
])
@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("way", WAYS)
@pytest.mark.parametrize("batch", [12, 1])      # 1: one question's rescoring (store.tables.row_dots)
def test_batched_equals_reference(shape, seed, way, batch):
    kernel, scan = way
    cfg = BeamConfig(lambda1=1.0, lambda2=0.5, gamma=0.6, max_depth=4, beam_width=5, max_nodes=40,
                     drop_threshold=-0.2)
    graph, pairs, emb = random_graph(seed, shape["n"], shape["m"], shape["e"], shape.get("hub", False),
                                     shape.get("isolated", 0))
    for got, ref in run_both(graph, pairs, emb, shape["n"], shape["m"], cfg, seed, batch=batch, scan=scan,
                             kernel=kernel):
        assert set(got) == set(ref)
        for v in ref:
            assert got[v] == pytest.approx(ref[v], rel=1e-9)


def test_budget_drop_and_isolated_anchor():
    cfg = BeamConfig(max_depth=5, beam_width=3, max_nodes=7, drop_threshold=0.1)
    graph, pairs, emb = random_graph(5, 100, 6, 400)
    for got, ref in run_both(graph, pairs, emb, 100, 6, cfg, 5):
        assert set(got) == set(ref)
        assert len(got) <= 7
    # An anchor with no edges expands to nothing.
    graph, pairs, emb = random_graph(6, 20, 2, 30, isolated=20)
    for got, ref in run_both(graph, pairs, emb, 20, 2, cfg, 6, k=2):
        assert set(got) == set(ref) and len(got) <= 2


@with_cuda
def test_cuda_search_equals_cpu_search():
    cfg = BeamConfig(max_depth=4, beam_width=6, max_nodes=50, drop_threshold=-0.5)
    graph, _, emb = random_graph(11, 400, 20, 2000)
    g = torch.Generator().manual_seed(12)
    q = torch.nn.functional.normalize(torch.randn(32, 16, generator=g), dim=1)
    intents = torch.randint(0, 3, (32,), generator=g)
    anchors = torch.stack([torch.randperm(400, generator=g)[:5] for _ in range(32)])
    scores = torch.rand(32, 5, generator=g, dtype=torch.float64)
    w = torch.rand(3, len(REL_ID), generator=g) * 4
    cpu = beam_search(graph.snapshot(400, 20, num_episodes(400)), Similarity(emb, None, q, dtype=torch.float64), intents, anchors, scores, w,
                      cfg)
    gpu_graph = MultiGraph("cuda")
    for rel in RELATIONS:
        s, d, wt = graph.edges(rel)
        gpu_graph.add_edges(rel, s.cuda(), d.cuda(), wt.cuda())
    gpu = beam_search(gpu_graph.snapshot(400, 20, num_episodes(400)), Similarity(emb.cuda(), None, q.cuda(), dtype=torch.float64),
                      intents.cuda(), anchors.cuda(),
                      scores.cuda(), w.cuda(), cfg)
    as_set = lambda r: set(zip(r.query.tolist(), r.node.tolist(), strict=True))  # noqa: E731
    assert as_set(cpu) == as_set(gpu)


@pytest.mark.parametrize("removed", list(REL_ID))
@pytest.mark.parametrize("kernel", ["torch", pytest.param("numba", marks=with_numba)])
def test_zero_weight_removes_relation(removed, kernel):
    """The ablations set a relation's weight to 0: the search must never step along it
    (exp(0) = 1 would still score it), and the reference must agree."""
    cfg = BeamConfig(lambda1=1.0, lambda2=0.5, gamma=0.6, max_depth=4, beam_width=5, max_nodes=40,
                     drop_threshold=-0.2)
    graph, pairs, emb = random_graph(0, 200, 10, 300, False, 0)
    uniform = {i: {r: 2.0 for r in REL_ID} for i in INTENTS}
    ablated = {i: {**row, removed: 0.0} for i, row in uniform.items()}
    res = []
    for got, ref in run_both(graph, pairs, emb, 200, 10, cfg, 0, weights=ablated, result=res, kernel=kernel):
        assert set(got) == set(ref)
    assert REL_ID[removed] not in res[0].relation.tolist()
    # with the weight restored (above the others: an entity hop counts by the entity's specificity)
    # the same search does step along that relation
    res = []
    run_both(graph, pairs, emb, 200, 10, cfg, 0, weights={i: {**row, removed: 6.0} for i, row in uniform.items()},
             result=res, kernel=kernel)
    assert REL_ID[removed] in res[0].relation.tolist()


def test_scores_are_float64_over_float32_cosines():
    """Anchors 0 and 1 each reach one event (2 and 3) by the same relation, at the same cosine.
    Their start scores differ by 3e-5, under float32's spacing at 1000 (6e-5): in float32 the two
    transitions tie and the lower id (2) would take the beam's one place; the float64 reference,
    and the search as the retriever runs it (cosines in float32), keep 3, whose parent is higher."""
    graph = MultiGraph()
    graph.add_edges("semantic", torch.tensor([0, 1]), torch.tensor([2, 3]))
    emb = torch.nn.functional.normalize(torch.tensor([[1.0, 0.0], [1.0, 0.1], [1.0, 0.5], [1.0, 0.5]]), dim=1)
    q = torch.tensor([[1.0, 0.0]])
    cfg = BeamConfig(max_depth=1, beam_width=1, max_nodes=3, drop_threshold=-1.0)
    scores = torch.tensor([[1000.0, 1000.00003]], dtype=torch.float64)
    weights = {i: {r: 2.0 for r in REL_ID} for i in INTENTS}
    res = beam_search(graph.snapshot(4, 0, 0), Similarity(emb, None, q), torch.tensor([0]), torch.tensor([[0, 1]]),
                      scores, relation_weights(weights, INTENTS), cfg)
    pairs = {rel: [] for rel in RELATIONS} | {"semantic": [(0, 2), (1, 3)]}
    adj, hubs = adjacency_lists(pairs)
    ref = reference_beam_search(adj, hubs, emb.tolist(), q[0].tolist(), weights["WHY"], [(0, 1000.0), (1, 1000.00003)],
                                cfg)
    assert set(res.node.tolist()) == set(ref) == {0, 1, 3}


@with_numba
@pytest.mark.parametrize("shape", [dict(n=300, m=20, e=900), dict(n=40, m=3, e=400), dict(n=200, m=10, e=300, hub=True),
                                   dict(n=120, m=8, e=200, isolated=30)])
@pytest.mark.parametrize("batch", [12, 1])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("ties", [False, True])
@pytest.mark.parametrize("scan", [False, True])
def test_compiled_search_returns_the_tensor_programs_rows(shape, batch, dtype, ties, scan):
    """Row for row the same result (order, parents, relations, the entity or episode each hop went
    through, depths), scores equal up to exp's last bits, with some relations removed and some not,
    and both CSR parts (main and delta) walked. ``ties``: three distinct embeddings and equal anchor
    scores, so that transitions tie and the tie rules decide (best parent, then lower node id).
    ``scan``: the half-precision scan, where both read a pair's cosine from the rows only near or
    above the drop threshold; their sums run in different orders, so scores agree to float32's
    last bits."""
    cfg = BeamConfig(lambda1=1.0, lambda2=0.5, gamma=0.6, max_depth=4, beam_width=5, max_nodes=40, drop_threshold=-0.2)
    graph, _, emb = random_graph(3, shape["n"], shape["m"], shape["e"], shape.get("hub", False),
                                 shape.get("isolated", 0))
    n, g = shape["n"], torch.Generator().manual_seed(4)
    q = torch.nn.functional.normalize(torch.randn(batch, 16, generator=g), dim=1)
    anchors = torch.stack([torch.randperm(n, generator=g)[:6] for _ in range(batch)])
    anchors[0, 3:] = -1
    scores = torch.rand(batch, 6, generator=g, dtype=torch.float64) * 5
    if ties:
        emb, scores = emb[torch.randint(0, 3, (n,), generator=g)], torch.ones_like(scores)
    intents = torch.randint(0, 3, (batch,), generator=g)
    w = relation_weights({**WEIGHTS, "WHEN": {**WEIGHTS["WHEN"], "entity": 0.0}}, INTENTS)
    snap = graph.snapshot(n, shape["m"], num_episodes(n))
    sim = Similarity(emb, emb.half() if scan else None, q, SimilarityConfig(matrix_min_batch=batch + 1), dtype=dtype)
    assert sim.mode == ("scan" if scan else "matrix")
    tensor = beam_search(snap, sim, intents, anchors, scores, w, cfg, "torch")
    compiled = beam_search(snap, sim, intents, anchors, scores, w, cfg, "numba")
    assert tensor.node.numel() > 40 * batch // 2      # the searches went deep
    if scan and not ties:   # some pairs were dropped on their approximate cosine alone, some read exactly
        approx = sim.approx.float()
        assert bool((approx < cfg.drop_threshold - sim.error[:, None]).any()) and bool((approx >= 0).any())
    for f in dataclasses.fields(tensor):
        a, b = getattr(tensor, f.name), getattr(compiled, f.name)
        if f.name == "score":
            torch.testing.assert_close(b, a, rtol=1e-6 if scan and dtype == torch.float32 else 1e-12, atol=0)
        else:
            assert torch.equal(a, b), f.name


def test_kernel_setting(monkeypatch):
    assert kernel.resolve_kernel("torch") == "torch"
    with pytest.raises(ConfigError, match="retrieval.kernel must be one of auto, torch, numba, got 'cuda'"):
        kernel.resolve_kernel("cuda")
    monkeypatch.setattr(kernel, "_numba_installed", lambda: False)
    assert kernel.resolve_kernel("auto") == "torch"
    with pytest.raises(ImportError, match=r"retrieval.kernel=numba needs numba: pip install 'magma-torch\[fast\]'"):
        kernel.resolve_kernel("numba")
    # the compiled search runs on CPU for float32 and float64 cosines; CUDA and half precision take the tensor program
    assert [kernel.search_kernel("numba", d, "cpu") for d in (torch.float32, torch.float64)] == ["numba"] * 2
    assert [kernel.search_kernel("numba", d, "cpu") for d in (torch.float16, torch.bfloat16)] == ["torch"] * 2
    assert kernel.search_kernel("numba", torch.float32, "cuda") == kernel.search_kernel("torch", torch.float32, "cpu") \
        == "torch"


@with_package("numba", extra="fast")
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_precision_scores_retrieve_on_cpu_where_the_compiled_kernels_are_installed(dtype):
    """numba has no half type: the beam search takes the tensor program, which gives what kernel=torch gives."""
    from magma_torch import MagmaMemory
    from magma_torch.eval.datasets import load_demo
    from magma_torch.eval.runner import records

    question = "What did Caroline do at the support group?"
    got = {}
    for way in ("auto", "torch"):
        with MagmaMemory(config={"retrieval": {"score_dtype": dtype, "kernel": way}}, consolidation="none",
                         device="cpu") as mem:
            mem.add_many(records(load_demo()[0]))
            got[way] = [n.id for n in mem.retrieve(question).nodes]
    assert got["auto"] and got["auto"] == got["torch"]
