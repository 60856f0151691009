"""Store: growable tensors, incremental CSR views, the PyG multigraph, vector and keyword indexes."""
from __future__ import annotations

import random
import threading
from collections import Counter
from itertools import pairwise

import numpy as np
import pytest
import torch

from magma_torch.store.csr import IncrementalCSR
from magma_torch.store.graph import EDGE_TYPES, RELATIONS, REVERSE_ENTITY, REVERSE_EPISODE, MultiGraph
from magma_torch.store.growable import GrowableTensor
from magma_torch.store.keyword_index import KeywordIndex
from magma_torch.store.vector_index import VectorIndex
from magma_torch.testing import with_package


# ---------------------------------------------------------------- GrowableTensor


def test_growable_capacity_doubles_and_reallocations_are_logarithmic():
    """Single-row appends reallocate O(log n) times; capacity is a power-of-two multiple."""
    g = GrowableTensor((3,), torch.float32, capacity=1)
    buffers, n = {g._buf.data_ptr()}, 5000
    caps = []
    for i in range(n):
        g.extend(torch.full((1, 3), float(i)))
        buffers.add(g._buf.data_ptr())
        caps.append(g.capacity)
    assert len(g) == n
    assert g.capacity == 8192
    assert len(buffers) <= 14  # 1 + ceil(log2(5000))
    # each growth at least doubles the capacity
    grown = [c for prev, c in pairwise(caps) if c != prev]
    assert all(b >= 2 * a for a, b in zip([1] + grown, grown))
    assert torch.equal(g.data[:, 0], torch.arange(n, dtype=torch.float32))


def test_growable_earlier_views_unchanged_after_appends():
    """A view taken earlier keeps its rows and length across later appends and reallocations."""
    g = GrowableTensor((), torch.long, capacity=4)
    g.extend(torch.arange(3))
    view = g.data
    expected = view.clone()
    for k in range(10):  # crosses several reallocations
        g.extend(torch.arange(100 + 10 * k, 105 + 10 * k))
    assert view.shape == (3,)
    assert torch.equal(view, expected)
    assert torch.equal(g.data[:3], expected)
    assert len(g) == 53


def test_growable_extend_casts():
    g = GrowableTensor((2,), torch.float64, capacity=2)
    g.extend(torch.ones(3, 2, dtype=torch.float32))
    assert g.data.dtype == torch.float64 and len(g) == 3
    g.extend(torch.zeros(1, 2))
    assert torch.equal(g.data, torch.tensor([[1.0, 1.0]] * 3 + [[0.0, 0.0]], dtype=torch.float64))


# ---------------------------------------------------------------- IncrementalCSR


def _brute(edges, rows):
    """Multiset of (position, neighbour, relation) for the out-edges of rows."""
    out = Counter()
    for pos, r in enumerate(rows):
        for (a, b, rel) in edges:
            if a == r:
                out[(pos, b, rel)] += 1
    return out


def _gathered(snap, rows):
    seg, col, rel = snap.gather(torch.tensor(rows, dtype=torch.long))
    return Counter(zip(seg.tolist(), col.tolist(), rel.tolist(), strict=True))


def test_incremental_csr_matches_brute_force_through_deltas_and_merges():
    """Interleaved adds and snapshots (delta and merge paths) gather exactly the added edges."""
    rng = random.Random(0)
    csr = IncrementalCSR(merge_fraction=0.5, min_merge=8)
    edges, num_rows = [], 1
    kept = []  # (snapshot, edges at that time, rows) to recheck immutability later
    saw_delta = saw_merge = False
    for step in range(60):
        num_rows += rng.randint(0, 2)
        k = rng.randint(0, 6)
        new = [(rng.randrange(num_rows), rng.randrange(num_rows), rng.randrange(4)) for _ in range(k)]
        if new:
            r, c, rel = (torch.tensor(x, dtype=torch.long) for x in zip(*new, strict=True))
            csr.add(r, c, rel)
        edges += new
        main_before = csr._main_edges
        snap = csr.snapshot(num_rows)
        saw_delta |= snap.delta_row.numel() > 0
        saw_merge |= csr._main_edges > main_before > 0
        rows = list(range(num_rows + 2))  # includes rows the CSR does not cover yet
        rows += [rng.randrange(num_rows) for _ in range(5)]  # repeated rows
        assert _gathered(snap, rows) == _brute(edges, rows), f"step {step}"
        deg = snap.degree(torch.tensor(rows))
        assert deg.tolist() == [sum(1 for e in edges if e[0] == r) for r in rows]
        kept.append((snap, list(edges), rows))
    assert saw_delta and saw_merge
    assert len(csr) == len(edges)
    for snap, old_edges, rows in kept:  # later adds never changed an earlier snapshot
        assert _gathered(snap, rows) == _brute(old_edges, rows)


def test_incremental_csr_snapshot_cached_until_change():
    """An unchanged CSR returns the same snapshot; a change gives a new one and leaves the old as it was."""
    csr = IncrementalCSR(min_merge=2)
    csr.add(torch.tensor([0, 1, 2]), torch.tensor([1, 2, 0]), torch.tensor([0, 0, 1]))
    s1 = csr.snapshot(3)
    assert csr.snapshot(3) is s1
    csr.add(torch.tensor([0]), torch.tensor([2]), torch.tensor([2]))
    s2 = csr.snapshot(3)
    assert s2 is not s1
    assert _gathered(s2, [0]) == Counter({(0, 1, 0): 1, (0, 2, 2): 1})
    assert _gathered(s1, [0]) == Counter({(0, 1, 0): 1})


def test_incremental_csr_keeps_edges_of_rows_past_num_rows():
    """A snapshot asked for fewer rows than the edges use still returns every edge."""
    csr = IncrementalCSR(min_merge=1)
    csr.add(torch.tensor([0, 5]), torch.tensor([1, 2]), torch.tensor([0, 1]))
    assert _gathered(csr.snapshot(2), [0, 5]) == Counter({(0, 1, 0): 1, (1, 2, 1): 1})
    csr.add(torch.tensor([1]), torch.tensor([0]), torch.tensor([3]))
    assert _gathered(csr.snapshot(6), [0, 1, 5]) == Counter({(0, 1, 0): 1, (1, 0, 3): 1, (2, 2, 1): 1})


# ---------------------------------------------------------------- MultiGraph


def _graph():
    g = MultiGraph()
    g.add_edges("temporal", torch.tensor([0, 1, 2]), torch.tensor([1, 2, 3]))
    g.add_edges("semantic", torch.tensor([3, 2]), torch.tensor([0, 0]), torch.tensor([0.9, 0.5]))
    g.add_edges("causal", torch.tensor([0, 1]), torch.tensor([1, 3]), torch.tensor([0.8, 0.6]))
    g.add_edges("entity", torch.tensor([0, 1, 3, 3]), torch.tensor([0, 0, 1, 0]))
    g.add_edges("episode", torch.tensor([0, 1, 2, 3]), torch.tensor([0, 0, 1, 1]))
    g.add_edges("episode_chain", torch.tensor([0]), torch.tensor([1]))
    g.add_edges("supersedes", torch.tensor([3]), torch.tensor([0]), torch.tensor([0.9]))
    return g


def test_hetero_data_exposes_every_relation_and_the_reverse_hops():
    """to_hetero_data: the seven relations + reverse mentions and memberships, consistent shapes and values."""
    g = _graph()
    data = g.to_hetero_data(4, 2, 2)
    assert set(data.edge_types) == set(EDGE_TYPES.values()) | {REVERSE_ENTITY, REVERSE_EPISODE}
    assert data["event"].num_nodes == 4 and data["entity"].num_nodes == 2 and data["episode"].num_nodes == 2
    sizes = {"temporal": 3, "semantic": 2, "causal": 2, "entity": 4, "episode": 4, "episode_chain": 1, "supersedes": 1}
    for rel, et in EDGE_TYPES.items():
        assert data[et].edge_index.shape == (2, sizes[rel])
        assert data[et].edge_index.dtype == torch.long
        assert data[et].edge_weight.shape == (sizes[rel],)
    assert data[EDGE_TYPES["semantic"]].edge_weight.tolist() == pytest.approx([0.9, 0.5])
    fwd = data[EDGE_TYPES["entity"]].edge_index
    assert torch.equal(data[REVERSE_ENTITY].edge_index, fwd.flip(0))
    assert torch.equal(data[REVERSE_EPISODE].edge_index, data[EDGE_TYPES["episode"]].edge_index.flip(0))
    assert data[EDGE_TYPES["causal"]].edge_index.tolist() == [[0, 1], [1, 3]]
    data.validate(raise_on_error=True)
    assert g.counts() == sizes


def test_graph_snapshot_holds_both_directions_and_entity_views():
    """Event adjacency is walkable both ways; entity views map events <-> entities."""
    g = _graph()
    snap = g.snapshot(4, 2, 2)
    seg, col, rel = snap.event_adj.gather(torch.tensor([3]))
    got = Counter(zip(col.tolist(), [RELATIONS[r] for r in rel.tolist()], strict=True))
    assert got == Counter({(2, "temporal"): 1, (0, "semantic"): 1, (1, "causal"): 1})
    _, ent, _ = snap.event_entity.gather(torch.tensor([3]))
    assert sorted(ent.tolist()) == [0, 1]
    _, ev, _ = snap.entity_event.gather(torch.tensor([0]))
    assert sorted(ev.tolist()) == [0, 1, 3]
    assert g.has_mention(3, 1) and not g.has_mention(2, 0)
    # a later write does not change the snapshot
    g.add_edges("semantic", torch.tensor([3]), torch.tensor([1]))
    _, col2, _ = snap.event_adj.gather(torch.tensor([3]))
    assert sorted(col2.tolist()) == sorted(col.tolist())


def test_causal_path_exists_follows_edge_direction():
    """Reachability along cause -> effect only."""
    g = MultiGraph()
    g.add_edges("causal", torch.tensor([0, 1, 4]), torch.tensor([1, 2, 2]))
    assert g.causal_path_exists(0, 2)
    assert not g.causal_path_exists(2, 0)
    assert not g.causal_path_exists(4, 0)
    assert not g.causal_path_exists(0, 4)
    assert g.has_causal(0, 1) and not g.has_causal(1, 0)


# ---------------------------------------------------------------- VectorIndex


def _unit(n, d, seed):
    x = torch.randn(n, d, generator=torch.Generator().manual_seed(seed))
    return torch.nn.functional.normalize(x, dim=1)


def _grow(backend, chunks):
    idx = VectorIndex(chunks[0].shape[1], "cpu", backend)
    allv = torch.zeros(0, chunks[0].shape[1])
    for c in chunks:
        allv = torch.cat([allv, c])
        idx.add(c, allv)
    return idx


@with_package("faiss", extra="faiss")
def test_vector_faiss_and_torch_backends_agree():
    """Same ids and scores from faiss IndexFlatIP and the torch matmul+topk fallback."""
    vecs = _unit(300, 32, 0)
    chunks = [vecs[:1], vecs[1:50], vecs[50:51], vecs[51:]]
    f, t = _grow("faiss", chunks), _grow("torch", chunks)
    assert f.backend == "faiss" and t.backend == "torch"
    assert len(f) == len(t) == 300
    q = _unit(20, 32, 1)
    fs, fi = f.search(q, 10)
    ts, ti = t.search(q, 10)
    assert torch.equal(fi, ti)
    assert torch.allclose(fs, ts, atol=1e-5)
    exact = torch.topk(q @ vecs.T, 10, dim=1)
    assert torch.equal(ti, exact.indices)


@pytest.mark.parametrize("backend", ["torch", pytest.param("faiss", marks=with_package("faiss", extra="faiss"))])
def test_vector_incremental_adds_upto_and_padding(backend):
    """Incremental adds are searchable; upto restricts ids; missing slots are -1 / -inf."""
    vecs = _unit(40, 16, 2)
    idx = VectorIndex(16, "cpu", backend)
    s, i = idx.search(vecs[:2], 3)
    assert (i == -1).all() and torch.isinf(s).all()
    idx.add(vecs[:10], vecs[:10])
    _, i = idx.search(vecs[:10], 1)
    assert i[:, 0].tolist() == list(range(10))  # each vector finds itself
    idx.add(vecs[10:], vecs)
    s, i = idx.search(vecs[30:35], 1)
    assert i[:, 0].tolist() == list(range(30, 35))
    s, i = idx.search(vecs[30:35], 5, upto=12)
    assert (i < 12).all() and (i >= 0).all()
    exact = torch.topk(vecs[30:35] @ vecs[:12].T, 5, dim=1)
    assert torch.equal(i, exact.indices)
    assert torch.allclose(s, exact.values, atol=1e-5)
    s, i = idx.search(vecs[:1], 6, upto=4)
    assert i[0, 4:].tolist() == [-1, -1] and torch.isinf(s[0, 4:]).all()
    assert sorted(i[0, :4].tolist()) == [0, 1, 2, 3]


def test_vector_backend_faiss_without_faiss_raises(monkeypatch):
    """backend=faiss without faiss is a clear ImportError; auto falls back to torch."""
    import magma_torch.store.vector_index as vi

    monkeypatch.setattr(vi, "_import_faiss", lambda: None)
    with pytest.raises(ImportError, match="faiss"):
        VectorIndex(8, "cpu", "faiss")
    assert VectorIndex(8, "cpu", "auto").backend == "torch"


class _FakeFlatIP:
    """A numpy stand-in for faiss.IndexFlatIP whose search can run a hook first."""

    def __init__(self, d):
        self.x, self.hook = np.zeros((0, d), np.float32), None

    @property
    def ntotal(self):
        return len(self.x)

    def add(self, v):
        self.x = np.concatenate([self.x, v])

    def search(self, q, k):
        if self.hook is not None:
            hook, self.hook = self.hook, None
            hook()
        s = q @ self.x.T
        ids = np.argsort(-s, axis=1)[:, :k]
        return np.take_along_axis(s, ids, 1), ids


def test_vector_search_is_not_interleaved_with_add():
    """A concurrent add cannot slip between the upto check and the index search."""
    vecs = _unit(6, 8, 3)
    idx = VectorIndex(8, "cpu", "torch")
    idx._index = fake = _FakeFlatIP(8)
    idx.add(vecs[:5], vecs[:5])
    adder = threading.Thread(target=lambda: idx.add(vecs[5:], vecs))

    def add_meanwhile():
        adder.start()
        adder.join(0.5)  # without the index lock the add lands inside the search

    fake.hook = add_meanwhile
    _, ids = idx.search(vecs[5:], 1, upto=5)
    adder.join()
    assert 0 <= ids[0, 0].item() < 5
    assert len(idx) == 6


# ---------------------------------------------------------------- KeywordIndex


DOCS = ["I adopted a puppy from the shelter", "The bakery closed last month",
        "We went kayaking on the lake", "", "My puppy loves the lake",
        "Bakery bread is the best bread"]


def test_keyword_scores_and_top_k():
    """A doc with the query term ranks first; unmatched docs score 0 and are not returned."""
    kw = KeywordIndex()
    kw.add(kw.tokenize(DOCS[:3]))
    kw.add(kw.tokenize(DOCS[3:]))  # grows incrementally, empty doc included
    assert len(kw) == len(DOCS)
    sc = kw.scores(["bakery", "kayaking trip", "zzzunknown"])
    assert sc.shape == (3, len(DOCS))
    top = KeywordIndex.top_k(sc, 3)
    assert set(top[0, :2].tolist()) == {1, 5} and top[0, 2] == -1
    assert top[1, 0] == 2 and (top[1, 1:] == -1).all()
    assert (sc[2] == 0).all() and (top[2] == -1).all()
    assert (sc[:, 3] == 0).all()


def test_keyword_upto_restricts_ids_and_sees_new_docs():
    """upto limits the searched ids; documents added later become searchable."""
    kw = KeywordIndex()
    kw.add(kw.tokenize(DOCS))
    sc = kw.scores(["puppy lake"], upto=3)
    assert sc.shape == (1, 3)
    top = KeywordIndex.top_k(sc, 5)
    assert set(top[0][top[0] >= 0].tolist()) == {0, 2}
    full = KeywordIndex.top_k(kw.scores(["puppy lake"]), 1)
    assert full[0, 0] == 4  # matches both terms
    kw.add(kw.tokenize(["a zebra at the zoo"]))
    assert KeywordIndex.top_k(kw.scores(["zebra"]), 1)[0, 0] == len(DOCS)
