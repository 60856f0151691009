"""Anchor re-ranking (query/rerank.py): the features against a plain-Python reading of the
graph, the order the weights give, ablated relations, and the shipped weights against the
file that fitted them."""
from __future__ import annotations

import dataclasses
import json
import math
from collections import defaultdict
from pathlib import Path

import pytest
import torch

from magma_torch import MagmaMemory
from magma_torch.config.resolve import memory_config, settings
from magma_torch.config.schema import RELATIONS, SIGNALS, RerankWeights
from magma_torch.query.beam import entity_specificity
from magma_torch.query.rerank import (FEATURES, _compiled_support, _support, feature_matrix, rerank, removed_relations,
                                      with_weights)
from magma_torch.store.graph import REL_ID, MultiGraph
from magma_torch.testing import with_package
from magma_torch.text.embedder import Embedder
from magma_torch.tokens import count_tokens

FITTED = Path(__file__).parents[1] / "experiments/results/rerank/locomo_dev.json"

TURNS = ["I adopted a beagle puppy named Max.", "Max chewed my shoes today.",
         "We walk Max in the park every morning.", "My violin lesson starts at noon.",
         "I play the violin in a small orchestra.", "Did you finish the painting of the lake?",
         "Yes, the lake painting is in the gallery now.", "I bought a clarinet for the band.",
         "The clarinet sounds lovely next to the violin.", "Max loves the park by the lake.",
         "The orchestra plays in Boston next month.", "Boston is where my sister lives."]
QUESTIONS = ["Which instruments does Melanie play?", "What is the dog called?", "Where does the orchestra play?"]


@pytest.fixture(scope="module")
def mem():
    emb = Embedder(device="cpu")
    m = MagmaMemory({"slow_path": {"background": False}, "retrieval": {"anchor_k": 5, "rerank": {"pool": 9,
                     "support_from": 4}}}, "heuristic", device="cpu", embedder=emb)
    m.add_many([{"text": t, "timestamp": f"2023-05-{1 + i // 4:02d} 10:{i:02d}", "speaker": "AB"[i % 2],
                 "session_id": f"s{i // 4}", "stream": "c", "source_id": f"D{i}"} for i, t in enumerate(TURNS)])
    m.consolidate()
    yield m
    m.close()


def pool(mem):
    ret, snap = mem.retriever, mem.store.snapshot()
    sim = ret.similarity(snap, ret.embed_questions(QUESTIONS, snap.embeddings.device)[1])
    return ret, snap, sim, ret.fused(snap, sim, [None] * len(QUESTIONS), QUESTIONS)


def reference_features(snap, sim, fused, rrf_k: int, m: int) -> list[list[list[float]]]:
    """The features read one candidate at a time from the graph's edge lists."""
    n = snap.num_events
    adj = defaultdict(set)
    seg, nbr, rel = snap.graph.event_adj.gather(torch.arange(n))
    for u, v, r in zip(seg.tolist(), nbr.tolist(), rel.tolist(), strict=True):
        adj[u].add((v, r))
    seg, ent, _ = snap.graph.event_entity.gather(torch.arange(n))
    spec = entity_specificity(snap.graph, ent, n).tolist()
    entities = defaultdict(dict)
    for u, e, s in zip(seg.tolist(), ent.tolist(), spec, strict=True):
        entities[u][e] = s
    episode = snap.episode_of.tolist()
    out = []
    for b in range(fused.ids.shape[0]):
        ids = [i for i in fused.ids[b].tolist() if i >= 0]
        top, rows = ids[:m], []
        for j, v in enumerate(ids):
            ranks = fused.ranks[b, j].tolist()
            others = [u for u in top if u != v]
            support = {r: sum((v, REL_ID[r]) in adj[u] for u in others) / m for r in ("temporal", "semantic", "causal")}
            support["episode"] = sum(episode[u] == episode[v] for u in others) / m
            support["entity"] = sum(max([entities[u][e] for e in entities[v] if e in entities[u]], default=0.0)
                                    for u in others) / m
            rows.append([rrf_k / (rrf_k + r) if r else 0.0 for r in ranks] + [float(r > 0) for r in ranks]
                        + [float(fused.scores[b, j] / fused.scores[b, 0]), float(sim.pairs(torch.tensor([b]),
                                                                                       torch.tensor([v]))[0]),
                           math.log1p(j), math.log1p(count_tokens(snap.rows[v].text))]
                        + [support[r] for r in RELATIONS])
        out.append(rows)
    return out


def test_feature_names_are_the_weight_fields():
    assert FEATURES == tuple(f.name for f in dataclasses.fields(RerankWeights))
    assert len(FEATURES) == 2 * len(SIGNALS) + 4 + len(RELATIONS)


KERNELS = ["torch", pytest.param("numba", marks=with_package("numba", extra="fast"))]


@pytest.mark.parametrize("kernel", KERNELS)
def test_features_match_a_plain_python_reading_of_the_graph(mem, kernel):
    ret, snap, sim, fused = pool(mem)
    cfg = ret.cfg
    got = feature_matrix(snap.graph, snap.episode_of, snap.text_tokens, sim, fused, cfg.rrf_k, cfg.rerank.support_from,
                         cfg.rerank.length_cap, kernel=kernel)
    want = reference_features(snap, sim, fused, cfg.rrf_k, cfg.rerank.support_from)
    assert fused.ids.shape[1] == 9
    for b, rows in enumerate(want):
        assert torch.allclose(got[b, :len(rows)], torch.tensor(rows, dtype=torch.float64), atol=1e-5)
        assert not got[b, len(rows):].any()                     # padding
    support = got[..., -len(RELATIONS):]
    # the fixture's graph has what the support features read: semantic, temporal, episode and entity links
    for r in ("temporal", "semantic", "episode", "entity"):
        assert support[..., RELATIONS.index(r)].sum() > 0, r


def test_weights_set_the_order_and_zero_weights_keep_rrf(mem):
    ret, snap, sim, fused = pool(mem)
    cfg = ret.cfg
    feats = ret.rerank_features(snap, sim, fused)
    zero = dataclasses.replace(with_weights(cfg.rerank, {f: 0.0 for f in FEATURES}), token_cost=0.0)
    same = rerank(fused, feats, zero, cfg.rrf_k, cfg.anchor_k)
    assert torch.equal(same.ids, fused.ids[:, :cfg.anchor_k])
    by_cosine = rerank(fused, feats, with_weights(zero, {"cosine": 1.0}), cfg.rrf_k, cfg.anchor_k)
    for b in range(len(QUESTIONS)):
        cos = sim.pairs(torch.full((9,), b), fused.ids[b])
        assert by_cosine.ids[b].tolist() == fused.ids[b][torch.argsort(cos, descending=True, stable=True)][:5].tolist()
    # scores fall off as RRF's do, and every signal's rank moves with its anchor
    assert torch.allclose(by_cosine.scores[0], 1.0 / (cfg.rrf_k + torch.arange(1, 6, dtype=torch.float64)))
    j = (fused.ids[0] == by_cosine.ids[0, 0]).nonzero().item()
    assert torch.equal(by_cosine.ranks[0, 0], fused.ranks[0, j])


def test_token_cost_moves_long_turns_down_by_their_length(mem):
    """The order follows the fitted score less token_cost * log(1 + text tokens): with every weight
    0 but the length's, a positive cost puts short turns first, and cost equal to the weight
    cancels it (the fused order again)."""
    ret, snap, sim, fused = pool(mem)
    cfg = ret.cfg
    feats = ret.rerank_features(snap, sim, fused)
    zero = with_weights(cfg.rerank, {f: 0.0 for f in FEATURES})
    length = feats[..., FEATURES.index("length")]
    for b in range(len(QUESTIONS)):
        ids = fused.ids[b]
        assert len(set(length[b].tolist())) > 2                   # the fixture's turns differ in length
        cheap = rerank(fused, feats, dataclasses.replace(zero, token_cost=1.0), cfg.rrf_k, 9).ids[b]
        assert cheap.tolist() == ids[torch.argsort(length[b], stable=True)].tolist()
        long_first = rerank(fused, feats, with_weights(dataclasses.replace(zero, token_cost=0.0), {"length": 1.0}),
                            cfg.rrf_k, 9).ids[b]
        assert long_first.tolist() == ids[torch.argsort(length[b], descending=True, stable=True)].tolist()
    cancelled = rerank(fused, feats, with_weights(dataclasses.replace(zero, token_cost=0.5), {"length": 0.5}),
                       cfg.rrf_k, cfg.anchor_k)
    assert torch.equal(cancelled.ids, fused.ids[:, :cfg.anchor_k])


def test_length_feature_stops_growing_at_the_cap(mem):
    ret, snap, sim, fused = pool(mem)
    cfg = ret.cfg
    tokens = snap.text_tokens[fused.ids[0].clamp(min=0)]
    cap = int(tokens.min())                                   # every candidate is at least this long
    assert int(tokens.max()) > cap
    got = feature_matrix(snap.graph, snap.episode_of, snap.text_tokens, sim, fused, cfg.rrf_k, cfg.rerank.support_from,
                         cap)[0, :, FEATURES.index("length")]
    assert torch.equal(got, torch.full_like(got, math.log1p(cap)))


@pytest.mark.parametrize("kernel", KERNELS)
def test_a_relation_removed_from_every_intent_gives_no_support(mem, kernel):
    ret, snap, sim, fused = pool(mem)
    w = ret.weights.clone()
    w[:, REL_ID["entity"]] = 0
    w[:1, REL_ID["episode"]] = 0                            # removed for one intent only: still there
    assert removed_relations(w) == frozenset({"entity"})
    got = feature_matrix(snap.graph, snap.episode_of, snap.text_tokens, sim, fused, ret.cfg.rrf_k,
                         ret.cfg.rerank.support_from, ret.cfg.rerank.length_cap, removed_relations(w), kernel)
    assert not got[..., FEATURES.index("support_entity")].any()
    assert got[..., FEATURES.index("support_episode")].any()


def test_retrieval_anchors_are_the_reranked_pool(mem):
    ret, snap, sim, fused = pool(mem)
    want = rerank(fused, ret.rerank_features(snap, sim, fused), ret.cfg.rerank, ret.cfg.rrf_k, ret.cfg.anchor_k)
    got = ret.anchors(snap, sim, [None] * len(QUESTIONS), QUESTIONS)
    assert torch.equal(got.ids, want.ids)
    # the fused RRF score stays with each anchor (magma-explain shows it); the beam starts from the new rank
    for b in range(len(QUESTIONS)):
        fused_of = dict(zip(fused.ids[b].tolist(), fused.scores[b].tolist(), strict=True))
        assert got.rrf[b].tolist() == [fused_of[i] for i in got.ids[b].tolist()]
    r = mem.retrieve(QUESTIONS[0])
    assert [a.rrf for a in r.anchors] == pytest.approx(got.rrf[0].tolist())
    off = dataclasses.replace(ret.cfg, rerank=dataclasses.replace(ret.cfg.rerank, pool=0))
    plain = type(ret)(ret.embedder, ret.intent, off).anchors(snap, sim, [None] * len(QUESTIONS), QUESTIONS)
    assert torch.equal(plain.ids, fused.ids[:, :ret.cfg.anchor_k])


@pytest.mark.parametrize("memory, report", [("magma", FITTED),
                                            ("magma_mpnet", FITTED.with_name("locomo_dev_all-mpnet-base-v2.json"))])
def test_shipped_weights_are_the_fitted_ones(memory, report):
    """magma's weights are the schema's defaults, magma_mpnet's its YAML's: each the fit its report holds."""
    fitted = json.loads(report.read_text())
    assert fitted["features"] == list(FEATURES)
    weights = settings(memory_config(memory)).retrieval.rerank.weights
    assert dataclasses.asdict(weights) == pytest.approx(fitted["weights"], abs=0)
    assert memory != "magma" or weights == RerankWeights()


@pytest.mark.parametrize("memory, removed, pool", [("magma", set(), 300), ("magma_no_entity", {"entity"}, 300),
                                                   ("magma_no_episode", {"episode"}, 300),
                                                   ("magma_no_temporal", {"temporal"}, 300),
                                                   ("magma_no_causal", {"causal"}, 300),
                                                   ("magma_no_traversal", set(RELATIONS), 300),
                                                   ("magma_no_beam", set(), 300),
                                                   ("hybrid_rag", set(), 0), ("magma_paper", {"episode"}, 0)])
def test_ablations_remove_their_graph_from_the_support_and_baselines_keep_rrf(memory, removed, pool):
    from magma_torch.config.resolve import memory_config, settings
    from magma_torch.query.beam import relation_weights
    from magma_torch.query.intent import INTENTS

    rc = settings(memory_config(memory)).retrieval
    assert removed_relations(relation_weights(rc.intent_rows(INTENTS), INTENTS)) == removed
    assert rc.rerank.pool == pool


@with_package("numba", extra="fast")
@pytest.mark.parametrize("removed", [frozenset(), frozenset({"semantic", "episode"}), frozenset({"entity", "temporal"})])
@pytest.mark.parametrize("batch", [1, 7])
def test_compiled_support_equals_the_tensor_programs(removed, batch):
    """On a random multigraph (repeated edges, a hub entity, edges in both CSR parts, edges to events
    past the snapshot) with padded candidate rows, the compiled support counts what the tensor one
    does for every candidate, the entity column up to its sum's last bits."""
    g = torch.Generator().manual_seed(batch)
    n, n_ent, graph = 400, 30, MultiGraph()
    for half in range(2):       # the second half lands in the CSR delta
        for rel, hi in (("temporal", n + 20), ("semantic", n), ("causal", n), ("entity", n_ent)):
            src, dst = torch.randint(0, n, (600,), generator=g), torch.randint(0, hi, (600,), generator=g)
            dst[:40] = dst[40:80] if rel != "entity" else 0           # repeated edges; entity 0 a hub
            graph.add_edges(rel, src, dst)
        graph.snapshot(n, n_ent, 0)
    episode_of = torch.randint(0, 25, (n,), generator=g)
    ids = torch.stack([torch.randperm(n, generator=g)[:60] for _ in range(batch)])
    ids[0, 50:] = -1
    ids[-1, 3] = -1                                                   # a pad among the top candidates
    snap = graph.snapshot(n, n_ent, 0)
    tensor = _support(snap, episode_of, ids, 10, removed)
    compiled = _compiled_support(snap, episode_of, ids, 10, removed)
    assert tensor[..., [RELATIONS.index(r) for r in ("semantic", "entity", "episode")]].count_nonzero() > 3 * batch
    valid = ids >= 0                                                  # feature_matrix zeroes the pads
    torch.testing.assert_close(compiled[valid], tensor[valid], rtol=1e-12, atol=0)
