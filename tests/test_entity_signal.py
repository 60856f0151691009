"""The entity signal: "which instruments does Melanie play" reaches violin and clarinet through
their entity nodes (query/anchors.py entity_ranking, RetrievalConfig.entity)."""
from __future__ import annotations

import dataclasses

import pytest
import torch

from magma_torch import MagmaMemory
from magma_torch.config.schema import EntitySignalConfig
from magma_torch.query.anchors import asked_phrase, entity_ranking
from magma_torch.query.similarity import Similarity
from magma_torch.store.graph import MultiGraph
from magma_torch.text.embedder import Embedder


@pytest.mark.parametrize("question, phrase", [
    ("Which instruments does Melanie play?", "instruments"),
    ("What kind of interests do Joanna and Nate share?", "interests"),
    ("what video games has Nate played", "video games"),
    ("  What LGBTQ+ events has Caroline attended?", "LGBTQ+ events"),
    ("What is Caroline's relationship status?", None),      # no phrase before the auxiliary
    ("What does Melanie do to destress?", None),            # "does Melanie" is no X: it opens with one
    ("What did John have to do?", None),
    ("When did Melanie paint a sunrise?", None),
    ("Melanie plays which instruments?", None),             # the pattern reads a question's start only
])
def test_asked_phrase_is_what_a_what_or_which_question_asks_for(question, phrase):
    assert asked_phrase(question, EntitySignalConfig().asked_pattern()) == phrase


def test_no_wh_words_or_auxiliaries_means_no_pattern():
    assert EntitySignalConfig(wh_words=[]).asked_pattern() is None
    assert asked_phrase("Which instruments does Melanie play?", None) is None
    custom = EntitySignalConfig(wh_words=["welche"], auxiliaries=["spielt"], kind_words=[]).asked_pattern()
    assert asked_phrase("Welche Instrumente spielt Melanie?", custom) == "Instrumente"


def _unit(*rows):
    return torch.nn.functional.normalize(torch.tensor(rows, dtype=torch.float32), dim=1)


def test_entity_ranking_follows_the_nearest_entities_to_their_events():
    # entities: violin, clarinet, bread, dog; the asked phrase ("instruments") is near the first two only
    entities = _unit([1, 0, 0, 0], [0.8, 0.6, 0, 0], [0, 0, 1, 0], [0.3, 0, 0, 1])
    phrase = _unit([1, 0.2, 0, 0], [1, 0.2, 0, 0], [0, 0, 0, 1])
    events = _unit([1, 0, 0, 1], [0, 1, 1, 0], [0, 0, 1, 0], [1, 1, 0, 0], [0, 0, 0, 1], [1, 0, 0, 0])
    g = MultiGraph()
    # event -> entity mentions: 0 violin, 1 clarinet, 2 bread, 3 violin + clarinet, 4 dog; 5 mentions nothing
    g.add_edges("entity", torch.tensor([0, 1, 2, 3, 3, 4]), torch.tensor([0, 1, 2, 0, 1, 3]))
    view = g.snapshot(6, 4).entity_event
    q = _unit([1, 0, 0, 0], [0, 1, 0, 0], [1, 0, 0, 0])
    sim = Similarity(events, None, q)
    speaker_of = torch.tensor([0, 1, 0, 0, 1, 0])
    cfg = EntitySignalConfig(top=3, min_cos=0.5, weight=1.0)
    asks = torch.tensor([True, True, False])
    out = entity_ranking(entities, view, phrase, asks, sim, 6, cfg, top=4, named=[[0], [], []], speaker_of=speaker_of)
    cos = lambda b, e: float(q[b] @ events[e])
    best = {0: float(phrase[0] @ entities[0]), 1: float(phrase[0] @ entities[1])}
    # question 0 names speaker 0: events 0 and 3 (1 was said by speaker 1); 3 counts once, at its best entity
    want0 = sorted([0, 3], key=lambda e: -(cos(0, e) + best[0]))
    assert out[0].tolist() == want0 + [-1, -1]
    # question 1 names nobody: every event of violin and clarinet; bread and dog are below min_cos
    score1 = {0: cos(1, 0) + best[0], 1: cos(1, 1) + best[1], 3: cos(1, 3) + best[0]}
    assert out[1].tolist() == sorted(score1, key=lambda e: -score1[e]) + [-1]
    assert out[2].tolist() == [-1] * 4                      # it asks for nothing
    everyone = entity_ranking(entities, view, phrase, asks, sim, 6, cfg, top=4)
    assert set(everyone[0].tolist()) == {0, 1, 3, -1}       # without speakers, speaker 1's event too
    none = entity_ranking(entities, view, phrase, asks, sim, 6, dataclasses.replace(cfg, min_cos=0.99), top=4)
    assert (none == -1).all()


@pytest.fixture(scope="module")
def emb():
    return Embedder(device="cpu")


def _chat():
    """Melanie names her violin and her clarinet in two sessions, among turns about other things."""
    said = [("Caroline", "How do you relax after work?"),
            ("Melanie", "I carve out some me-time each day: running, reading, or playing my violin."),
            ("Caroline", "I went to a support group meeting yesterday."),
            ("Melanie", "The kids and I went camping at the lake last weekend."),
            ("Caroline", "I am looking into adoption agencies."),
            ("Melanie", "We painted a sunrise together on Sunday."),
            ("Caroline", "My friends threw me a birthday party."),
            ("Melanie", "I started playing the clarinet when I was young, it's how I express myself."),
            ("Caroline", "I love the pottery class downtown.")]
    return [{"text": t, "timestamp": f"2023-0{5 + i // 4}-0{1 + i % 4} 10:00", "speaker": sp, "stream": "c",
             "session_id": f"s{i // 4}", "source_id": f"c:{i}"} for i, (sp, t) in enumerate(said)]


def test_which_instruments_reaches_both_sessions_through_entity_nodes(emb):
    cfg = {"slow_path": {"background": False}, "retrieval": {"question_adapter": None}}
    with MagmaMemory(cfg, "heuristic", device="cpu", embedder=emb) as mem:
        mem.add_many(_chat())
        mem.consolidate()
        r = mem.retrieve("Which instruments does Melanie play?")
        by_entity = {a.id for a in r.anchors if "entity" in a.ranks}
        assert by_entity == {1, 7}                          # the violin and the clarinet turns, nothing else
        assert {1, 7} <= set(r.context_ids)
        off = {"slow_path": {"background": False},
               "retrieval": {"question_adapter": None, "signal_weights": {"entity": 0.0}}}
        with MagmaMemory(off, "heuristic", device="cpu", embedder=emb) as plain:
            plain.add_many(_chat())
            plain.consolidate()
            assert not any("entity" in a.ranks for a in plain.retrieve("Which instruments does Melanie play?").anchors)
