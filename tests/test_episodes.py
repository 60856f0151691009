"""Episodes (paper Sec. 3.2): segmentation on the fast path, persistence, integrity, the beam's
episode hops, the episode-grouped context, and the config errors for episode settings."""
from __future__ import annotations

import pytest
import torch

from magma_torch import MagmaMemory
from magma_torch.config import load_group
from magma_torch.config.schema import EpisodeSignalConfig
from magma_torch.query.anchors import episode_ranking
from magma_torch.query.similarity import Similarity
from magma_torch.query.linearize import episode_header
from magma_torch.store import integrity
from magma_torch.store.csr import IncrementalCSR
from magma_torch.text.embedder import Embedder
from magma_torch.tokens import count_tokens


@pytest.fixture(scope="module")
def emb():
    return Embedder(device="cpu")


def make_mem(emb, retrieval=None, **episodes) -> MagmaMemory:
    partial = {"slow_path": {"background": False}, "fast_path": {"episodes": episodes}, "retrieval": retrieval or {}}
    return MagmaMemory(partial, "none", device="cpu", embedder=emb)     # merged onto the defaults


TURNS = [("I adopted a beagle puppy named Max.", "2023-05-08 13:56", "A", "s1"),
         ("Max chewed my shoes today.", "2023-05-08 13:58", "B", "s1"),
         ("We walk Max in the park every morning.", "2023-05-08 14:01", "A", "s1"),
         ("My violin lesson starts at noon.", "2023-05-08 23:30", "A", "s1"),      # 9.5 h later: a new episode
         ("I bought a clarinet for the band.", "2023-06-02 10:00", "B", "s2"),
         ("The clarinet sounds lovely.", "2023-06-02 10:05", "A", "s2")]


def add_turns(mem, turns=TURNS, stream="conv", first=0):
    return mem.add_many([{"text": t, "timestamp": ts, "speaker": sp, "session_id": s, "stream": stream,
                          "source_id": f"{stream}:{i}"} for i, (t, ts, sp, s) in enumerate(turns, first)])


def members(mem):
    return mem.store.events.episode.data.tolist()


def test_sessions_and_time_gaps_open_episodes_chained_per_stream(emb):
    with make_mem(emb, max_gap_hours=6.0) as mem:
        add_turns(mem, TURNS[:3])
        add_turns(mem, TURNS[3:], first=3)   # the open episode grows across add_many calls
        add_turns(mem, TURNS[:2], stream="other")
        assert members(mem) == [0, 0, 0, 1, 2, 2, 3, 3]
        ep = mem.store.episodes
        assert ep.first.data.tolist() == [0, 3, 4, 6] and ep.last.data.tolist() == [2, 3, 5, 7]
        assert ep.size.data.tolist() == [3, 1, 2, 2] and ep.streams == ["conv", "conv", "conv", "other"]
        s, d, _ = mem.store.graph.edges("episode_chain")
        assert list(zip(s.tolist(), d.tolist(), strict=True)) == [(0, 1), (1, 2)]   # no link across streams
        emb_rows = mem.store.events.embeddings.data
        assert torch.allclose(ep.sums.data[0], emb_rows[:3].sum(0), atol=1e-6)
        assert mem.stats()["episodes"] == 4
        mem.check()


def test_topic_shift_cuts_an_episode_once_it_holds_min_events(emb):
    with make_mem(emb, topic_shift=0.99, min_events=2, max_gap_hours=100.0) as mem:
        add_turns(mem, [(t, ts, sp, "s1") for t, ts, sp, _ in TURNS])
        # every turn is far (cos < 0.99) from the episode before it, but an episode is cut only from 2 events on
        assert members(mem) == [0, 0, 1, 1, 2, 2]
        mem.check()


def test_episodes_survive_save_and_load_and_integrity_catches_a_broken_one(emb, tmp_path):
    with make_mem(emb) as mem:
        add_turns(mem)
        mem.save(tmp_path / "m")
        before = (members(mem), mem.store.episodes.sums.data.clone(), mem.store.graph.counts())
    back = MagmaMemory.load(tmp_path / "m", embedder=emb)
    try:
        assert members(back) == before[0] and torch.equal(back.store.episodes.sums.data, before[1])
        assert back.store.graph.counts() == before[2]
        back.check()
        back.store.events.episode.data[1] = 1
        found = integrity.problems(back.store)
        assert any("episode" in p for p in found)
    finally:
        back.close()


def test_beam_reaches_events_through_their_episode(emb):
    # only episode hops weigh anything: every expansion is an episode hop
    rows = {i: {"temporal": 0.0, "semantic": 0.0, "causal": 0.0, "entity": 0.0, "episode": 4.0}
            for i in ("WHY", "WHEN", "ENTITY", "uniform")}
    with make_mem(emb, retrieval={"anchor_k": 1, "intent_weights": rows, "signal_weights": {
            "vector": 1.0, "keyword": 0.0, "time": 0.0, "vector_context": 0.0, "keyword_context": 0.0,
            "episode": 0.0, "speaker": 0.0}}) as mem:
        cfg = mem.retriever.cfg
        mem.retriever.cfg = type(cfg)(**{**cfg.__dict__, "beam": type(cfg.beam)(**{**cfg.beam.__dict__,
                                                                                     "drop_threshold": -1.0})})
        add_turns(mem)
        r = mem.retrieve("Who is Max the beagle?")
        assert r.anchors[0].id in (0, 1, 2) and r.paths
        assert {p.relation for p in r.paths} == {"episode:2023-05-08 13:56"}
        assert {p.dst for p in r.paths} == {0, 1, 2} - {r.anchors[0].id}


def test_context_groups_events_under_one_dated_header_per_episode(emb):
    with make_mem(emb) as mem:
        add_turns(mem)
        r = mem.retrieve("What instruments do they play?", budget_tokens=10_000)
        lines = r.context.splitlines()
        headers = [ln for ln in lines if ln.startswith("## ")]
        assert sorted(headers) == sorted({episode_header(mem.store.events.rows[f].timestamp)
                                          for f in mem.store.episodes.first.data.tolist()})
        assert len(headers) == len(set(headers)) == 3
        # an event's own time is shown only where it differs from its episode's start
        assert "\n(conv:0) A: I adopted" in r.context and "\n[2023-05-08 13:58] (conv:1) B: Max chewed" in r.context
        assert "[2023-05-08 13:56]" not in r.context
        assert "today =" not in r.context          # "today" resolves to the day the block already shows
        assert sum(n.tokens for n in r.nodes) == count_tokens(r.context) == r.context_tokens


@pytest.mark.parametrize("key, value, named", [
    ("fast_path.episodes.max_gap", 3.0, "memory.fast_path.episodes.max_gap: Key 'max_gap' not in 'EpisodeConfig'"),
    ("retrieval.intent_weights.WHY.episodes", 1.0,
     "memory.retrieval.intent_weights.WHY.episodes: Key 'episodes' not in 'RelationWeights'"),
    ("retrieval.entity.min_cosine", 0.5, "memory.retrieval.entity.min_cosine: Key 'min_cosine' not in 'EntitySignalConfig'"),
    ("retrieval.signal_weights.entities", 1.0,
     "memory.retrieval.signal_weights.entities: Key 'entities' not in 'SignalWeights'"),
])
def test_unknown_episode_setting_or_relation_fails_in_one_line(emb, key, value, named):
    cfg = load_group("memory", "magma")
    from omegaconf import OmegaConf, open_dict
    with open_dict(cfg):
        OmegaConf.update(cfg, key, value, force_add=True)
    with pytest.raises(ValueError) as err:
        MagmaMemory(cfg, "none", device="cpu", embedder=emb)
    assert named in str(err.value) and "\n" not in str(err.value)


def test_episode_ranking_of_a_batch_is_each_questions_own_while_edges_wait_in_the_delta():
    # A snapshot taken during ingestion holds the newest episode -> event edges in the index's
    # delta, which gather lists after the main part's: the rows must not interleave.
    torch.manual_seed(0)
    events = torch.nn.functional.normalize(torch.randn(12, 8), dim=1)
    csr = IncrementalCSR(min_merge=4096)
    relation = torch.zeros(6, dtype=torch.long)
    csr.add(torch.tensor([0, 0, 0, 1, 1, 1]), torch.tensor([0, 1, 2, 6, 7, 8]), relation)
    csr.snapshot(2)
    csr.add(torch.tensor([0, 0, 0, 1, 1, 1]), torch.tensor([3, 4, 5, 9, 10, 11]), relation)
    view = csr.snapshot(2)
    assert view.delta_row.numel() == 6
    episodes = torch.nn.functional.normalize(torch.stack([events[:6].sum(0), events[6:].sum(0)]), dim=1)
    cfg = EpisodeSignalConfig(top=1)
    for top in (6, 3):
        batch = episode_ranking(episodes, view, Similarity(events, None, episodes), 12, cfg, top)
        alone = [episode_ranking(episodes, view, Similarity(events, None, episodes[b:b + 1]), 12, cfg, top)[0]
                 for b in range(2)]
        assert batch.tolist() == [a.tolist() for a in alone]
        assert set(batch[0].tolist()) <= set(range(6)) and set(batch[1].tolist()) <= set(range(6, 12))
