"""Anchors (RRF, time and context signals) and linearisation."""
import math
from datetime import datetime, timezone

import numpy as np
import pytest
import torch

from magma_torch.query.anchors import (ContextConfig, chain_neighbours, context_candidates, context_scores,
                                       inside_windows, keep_inside, rrf_fuse, speaker_ranking, speakers_named,
                                       time_ranking)
from magma_torch.query.linearize import linearize
from magma_torch.query.retriever import epoch_window
from magma_torch.query.segment import first_in_group, lexsort, rank_in_group, top_ids, top_in_group
from magma_torch.query.similarity import Similarity, SimilarityConfig
from magma_torch.store.tables import EventRow, EventTable
from magma_torch.testing import with_package
from magma_torch.text.temporal import question_time_window
from magma_torch.tokens import count_tokens


KERNELS = ["torch", pytest.param("numba", marks=with_package("numba", extra="fast"))]


@pytest.mark.parametrize("kernel", KERNELS)
def test_rrf_matches_formula_and_breaks_ties_by_id(kernel):
    a = torch.tensor([[3, 1, 2], [0, -1, -1]])
    b = torch.tensor([[1, 4, -1], [2, 0, -1]])
    out = rrf_fuse([a, b], [1.0, 2.0], k=60, top=4, num_nodes=5, kernel=kernel)
    expect = {3: 1 / 61, 1: 1 / 62 + 2 / 61, 2: 1 / 63, 4: 2 / 62}
    ranked = sorted(expect, key=lambda v: (-expect[v], v))
    assert out.ids[0].tolist() == ranked
    assert out.scores[0].tolist() == pytest.approx([expect[v] for v in ranked])
    assert out.ranks[0, ranked.index(1)].tolist() == [2, 1]
    # second query: node 0 ranked by both lists, node 2 only by b (2/61 > 1/61 + 2/62? no)
    s0, s2 = 1 / 61 + 2 / 62, 2 / 61
    assert out.ids[1, :2].tolist() == ([0, 2] if s0 > s2 else [2, 0])
    assert out.ids[1, 2:].tolist() == [-1, -1]


@with_package("numba", extra="fast")
@pytest.mark.parametrize("batch", [1, 9])
def test_compiled_rrf_fuse_equals_the_tensor_programs(batch):
    """Many lists with pads, an empty one and one weighted 0, and events shared across lists at
    ranks that tie their fused scores: the same ids, ranks and (to the bit) scores."""
    g = torch.Generator().manual_seed(batch)
    lists = [torch.stack([torch.randperm(300, generator=g)[:k] for _ in range(batch)]) for k in (120, 80, 40, 60, 30)]
    lists[1][:, 70:] = -1
    lists[2] = lists[0][:, :40].clone()                  # the same events at the same ranks as list 0
    lists.insert(2, torch.zeros((batch, 0), dtype=torch.long))
    weights = [1.0, 0.7, 0.5, 1.0, 1.0, 0.0]             # lists 0 and 4: an event ranked r by one ties one ranked r by the other
    tensor = rrf_fuse(lists, weights, k=60, top=150, num_nodes=300)
    compiled = rrf_fuse(lists, weights, k=60, top=150, num_nodes=300, kernel="numba")
    for name in ("ids", "scores", "ranks"):
        assert torch.equal(getattr(tensor, name), getattr(compiled, name)), name
    assert (tensor.scores[:, :-1] == tensor.scores[:, 1:]).any() and not tensor.ranks[..., 5].any()
    # a cut through a run of tied events keeps the lower ids, whichever kernel selects
    tie = ((tensor.scores[:, :-1] == tensor.scores[:, 1:]) & (tensor.ids[:, 1:] >= 0)).nonzero()[0, 1].item()
    cut = [rrf_fuse(lists, weights, k=60, top=tie + 1, num_nodes=300, kernel=kn) for kn in ("torch", "numba")]
    assert torch.equal(cut[0].ids, cut[1].ids) and torch.equal(cut[0].ids, tensor.ids[:, :tie + 1])


def test_time_ranking_keeps_only_events_in_the_window():
    day = 86400.0
    ts = torch.tensor([0.0, 10 * day, 20 * day, 30 * day], dtype=torch.float64)
    spans = torch.full((4, 2), math.nan, dtype=torch.float64)
    spans[3] = torch.tensor([9 * day, 11 * day])          # event 3 mentions a date inside the window
    emb = torch.eye(4)
    q = torch.tensor([[0.1, 0.2, 0.9, 0.3], [1.0, 0.0, 0.0, 0.0]])
    out = time_ranking([(9 * day, 12 * day), None], ts, spans, Similarity(emb, None, q), top=3)
    assert out[0].tolist() == [3, 1, -1]                   # both in window, most similar first
    assert out[1].tolist() == [-1, -1, -1]                 # no window, no time ranking


def test_speaker_ranking_keeps_what_the_named_speakers_said_in_dense_order():
    names = ["Caroline", "Melanie Jones"]
    assert speakers_named("What did caroline paint?", names) == [0]
    assert speakers_named("Did Melanie and Caroline meet?", names) == [0, 1]
    assert speakers_named("What did Carol say?", names) == [] and speakers_named("Melanies' dogs?", names) == []
    assert speakers_named("What did Bob say?", ["", " ", "Bob"]) == [2]     # a blank speaker names no one
    dense = torch.tensor([[5, 2, 0, 4, 1], [3, 1, -1, -1, -1], [0, 1, 2, 3, 4]])
    speaker_of = torch.tensor([0, 1, 0, -1, 1, 0])
    out = speaker_ranking(dense, [[0], [1], []], speaker_of, top=3)
    assert out.tolist() == [[5, 2, 0], [1, -1, -1], [-1, -1, -1]]


def test_time_filter_removes_events_outside_the_window_and_moves_the_rest_up():
    day = 86400.0
    ts = torch.tensor([0.0, 10 * day, 20 * day, 30 * day], dtype=torch.float64)
    spans = torch.full((4, 2), math.nan, dtype=torch.float64)
    spans[3] = torch.tensor([9 * day, 11 * day])
    ranked = torch.tensor([[2, 3, 0, 1], [2, 3, -1, -1]])
    inside = inside_windows(ranked, [(9 * day, 12 * day), None], ts, spans)
    assert inside.tolist() == [[False, True, False, True], [True, True, False, False]]
    assert keep_inside(ranked, inside).tolist() == [[3, 1, -1, -1], [2, 3, -1, -1]]


def test_the_last_second_of_the_asked_day_is_inside_its_window():
    window = epoch_window(question_time_window("What did she do yesterday?", datetime(2023, 5, 9)))
    at = [datetime(2023, 5, 8, 23, 59, 59, 500000), datetime(2023, 5, 9)]
    ts = torch.tensor([t.replace(tzinfo=timezone.utc).timestamp() for t in at], dtype=torch.float64)
    spans = torch.full((2, 2), math.nan, dtype=torch.float64)
    assert inside_windows(torch.tensor([[0, 1]]), [window], ts, spans).tolist() == [[True, False]]


@pytest.mark.parametrize("hops", [1, 2, 3])
def test_context_view_is_the_normalised_window_sum(hops):
    # events 0-3 form one stream, event 4 another; the store keeps predecessor cosines up to 4 back
    table = EventTable(8, chain_span=4)
    emb = torch.nn.functional.normalize(torch.randn(5, 8, generator=torch.Generator().manual_seed(0)), dim=1)
    table.append([EventRow(f"e{i}", float(i), "a" if i < 4 else "b") for i in range(5)], emb)
    prev, nxt = table.prev.data, table.next.data
    assert prev.tolist() == [-1, 0, 1, 2, -1] and nxt.tolist() == [1, 2, 3, -1, -1]
    q = torch.nn.functional.normalize(torch.randn(1, 8), dim=1)
    ctx = ContextConfig(hops=hops, weight=0.5, decay=0.8)
    cand = torch.tensor([[2, 4, -1, 0]])
    w = [0.5 * 0.8 ** (s - 1) for s in range(1, hops + 1)]
    view2 = emb[2] + sum(w[s - 1] * emb[2 + d * s] for s in range(1, hops + 1) for d in (-1, 1) if 0 <= 2 + d * s <= 3)
    view0 = emb[0] + sum(w[s - 1] * emb[s] for s in range(1, hops + 1))
    want = [float(torch.nn.functional.normalize(view2, dim=0) @ q[0]), float(emb[4] @ q[0]), -math.inf,
            float(torch.nn.functional.normalize(view0, dim=0) @ q[0])]   # 4: a stream of one event, itself only
    # hops <= 2 read the stored predecessor cosines, hops 3 gathers rows; without them every hops gathers
    for dots in (table.chain_dots.data, None):
        got = context_scores(cand, prev, nxt, 5, ctx, dense=Similarity(emb, None, q), chain_dots=dots)
        assert got[0].tolist() == pytest.approx(want, abs=1e-6)
    kw = torch.tensor([[0.0, 1.0, 0.0, 2.0, 0.0]])
    ks = context_scores(cand, prev, nxt, 5, ContextConfig(hops=1, weight=0.5), keyword=kw)
    assert ks[0, 0] == pytest.approx(0.5 * (1.0 + 2.0)) and ks[0, 1] == -math.inf   # no term in 4's window


def test_chain_neighbours_stop_at_snapshot_end_and_candidates_are_unique():
    prev = torch.tensor([-1, 0, 1, 2])
    nxt = torch.tensor([1, 2, 3, -1])
    hops = chain_neighbours(torch.tensor([[2]]), prev, nxt, n=3, ctx=ContextConfig(hops=2))
    assert [int(t) for t, _ in hops] == [1, 0, -1, -1]     # 3 is past the snapshot (n=3)
    cand = context_candidates([torch.tensor([[1, 2]]), torch.tensor([[2, 1]])], prev, nxt, 3, ContextConfig(hops=1))
    real = [c for c in cand[0].tolist() if c >= 0]
    assert sorted(real) == [0, 1, 2] and len(real) == 3
    assert top_ids(torch.tensor([[5, 7, -1]]), torch.tensor([[1.0, 1.0, -math.inf]]), 3).tolist() == [[5, 7, -1]]


def _rows():
    base = datetime(2023, 5, 8, tzinfo=timezone.utc).timestamp()
    texts = ["I lost my job.", "So I started baking bread.", "Now I sell bread at the market.", "Unrelated chat."]
    rows = [EventRow(t, base + 3600 * i, "s", speaker="Ann", source_id=f"D1:{i + 1}") for i, t in enumerate(texts)]
    rows[1].dates.append({"expression": "yesterday", "start": "2023-05-07", "end": "2023-05-07",
                          "granularity": "day", "label": "2023-05-07"})
    return rows


def test_linearize_orders_by_intent_and_shows_dates():
    rows = _rows()
    ranked = [2, 0, 1, 3]
    causal = [(0, 1), (1, 2)]
    when, _, _ = linearize(ranked, "WHEN", rows, causal, None)
    assert [line.split(") ")[0][-4:] for line in when.splitlines()] == ["D1:1", "D1:2", "D1:3", "D1:4"]
    assert "yesterday = 2023-05-07" in when and "[2023-05-08 01:00]" in when
    why, _, _ = linearize([2, 1, 0], "WHY", rows, [(1, 0), (2, 1)], None)    # causes first even if later in time
    assert [line[line.index("(") + 1:line.index(")")] for line in why.splitlines()] == ["D1:3", "D1:2", "D1:1"]
    other, _, _ = linearize(ranked, "ENTITY", rows, causal, None)
    assert other.splitlines()[0].startswith("[2023-05-08 02:00] (D1:3)")


def test_linearize_budget_collapses_low_salience_runs():
    rows = _rows()
    full, _, blocks = linearize([0, 3, 1, 2], "WHEN", rows, [], None)
    budget = blocks[0].tokens + blocks[1].tokens + 8
    ctx, kept, _ = linearize([0, 3, 1, 2], "WHEN", rows, [], budget)
    assert count_tokens(ctx) <= budget
    assert [b.event for b in kept] == [0, 3]
    assert "…2 intermediate events…" in ctx and "(D1:1)" in ctx and "(D1:4)" in ctx


def test_empty_memory_retrieves_nothing():
    from magma_torch import MagmaMemory
    with MagmaMemory() as mem:
        r = mem.retrieve("What did Caroline do last weekend?")
    assert (r.nodes, r.anchors, r.paths, r.context_ids) == ([], [], [], [])


# skewed: one huge group takes the flat sort; one group (a single question) a plain sort
@pytest.mark.parametrize("sizes", [[0, 3, 7, 1, 12], [0, 3, 7, 1, 12, 5000], [37]], ids=["padded", "skewed", "one"])
def test_top_in_group_equals_the_flat_lexsort(sizes):
    g = torch.Generator().manual_seed(4)
    groups = torch.cat([torch.full((s,), i) for i, s in enumerate(sizes)])
    score = torch.randint(0, 4, (groups.numel(),), generator=g).double()   # many exact ties: the row order decides
    for k in (1, 4, 20):
        order = lexsort((groups, False), (score, True))
        want = order[rank_in_group(groups[order]) < k]
        assert top_in_group(groups, score, k, len(sizes)).tolist() == want.tolist()


@pytest.mark.parametrize("levels", [4, 10**6], ids=["many-ties", "few-ties"])
def test_segment_argbest_is_the_first_row_of_the_lexicographic_order(levels):
    """Highest score, then lowest tie key, then lowest row; with and without tied best scores
    (the fast path for untied segments must pick what the full rule picks)."""
    from magma_torch.query.beam import _segment_argbest
    g = torch.Generator().manual_seed(7)
    segment = torch.cat([torch.arange(40), torch.randint(0, 40, (400,), generator=g)])   # every segment has a row
    score = torch.randint(0, levels, (segment.numel(),), generator=g).double()
    tie = torch.randint(0, 3, (segment.numel(),), generator=g)
    order = lexsort((segment, False), (score, True), (tie, False))   # stable: lowest row last
    want = order[first_in_group(segment[order])]
    assert _segment_argbest(segment, 40, score, tie).tolist() == want.tolist()


@with_package("numba", extra="fast")
@pytest.mark.parametrize("way", ["matrix", "scan"])
@pytest.mark.parametrize("hops", [1, 2])
def test_compiled_context_ranking_gives_the_tensor_programs_scores_and_order(way, hops):
    """Streams of a few dozen events with duplicated embeddings (tied views), a snapshot that ends
    before the last appends (next pointers past it), candidates from two questions with -1 pads:
    the compiled windows give context_scores' scores to the bit, and the ranking is top_ids'."""
    from magma_torch.query import anchors_numba
    from magma_torch.query.anchors import context_ranking

    g = torch.Generator().manual_seed(3)
    table = EventTable(16, chain_span=4)
    emb = torch.nn.functional.normalize(torch.randn(300, 16, generator=g), dim=1)
    emb[4::7] = emb[3::7]                 # streams s3 and s4 alike: the same windows, so tied scores
    table.append([EventRow(f"e{i}", float(i), f"s{i % 7}") for i in range(300)], emb)
    n = 280
    q = torch.nn.functional.normalize(torch.randn(2, 16, generator=g), dim=1)
    sim = Similarity(emb[:n], emb[:n].half() if way == "scan" else None, q,
                     SimilarityConfig(matrix_min_batch=10 if way == "scan" else 1), compiled=True)
    assert sim.mode == way
    hits = [torch.randint(0, n, (2, 60), generator=g), torch.cat([torch.arange(80, 120)[None].repeat(2, 1),
                                                                 torch.full((2, 5), -1)], 1)]
    ctx = ContextConfig(hops=hops, weight=0.7, decay=0.6)
    prev, nxt, dots = table.prev.data[:n], table.next.data[:n], table.chain_dots.data[:n]
    cand = context_candidates(hits, prev, nxt, n, ctx)
    want = context_scores(cand, prev, nxt, n, ctx, dense=sim, chain_dots=dots)
    weights = [0.7 * 0.6 ** (s - 1) for s in range(1, hops + 1)]
    cos, weight = np.zeros((2, 2 * hops + 1, *cand.shape), dtype=np.float32)
    sq = np.zeros(cand.shape, dtype=np.float32)
    anchors_numba._windows(cand.numpy(), prev.numpy(), nxt.numpy(), n, np.array(weights, dtype=np.float32),
                           dots.numpy(), sim.matrix.numpy() if way == "matrix" else np.zeros((1, 1), np.float32),
                           way == "scan", sim.queries.numpy(), sim.embeddings.numpy(), True, cos, weight, sq)
    norm = torch.from_numpy(sq).clamp(min=0).sqrt().clamp(min=1e-12)
    got = torch.where(cand >= 0, (torch.from_numpy(weight) * torch.from_numpy(cos)).sum(0) / norm, -math.inf)
    assert torch.equal(got, want)
    valid = want[torch.isfinite(want)]
    assert valid.numel() > valid.unique().numel()             # tied views: the order cuts them by id
    for top in (5, 40, 400):
        assert context_ranking(cand, prev, nxt, n, ctx, sim, dots, top).tolist() == \
            top_ids(cand, want, top).tolist()
