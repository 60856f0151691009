"""Fast path (add/add_many), bad input, idempotency, and the background slow-path worker."""
from __future__ import annotations

import logging
import threading
from datetime import datetime, timezone

import pytest
import torch

from magma_torch import MagmaMemory
from magma_torch.config import load_group
from magma_torch.ingest import bulk
from magma_torch.ingest.consolidator import CausalLink, EntityMention, Proposal
from magma_torch.ingest.fast_path import IngestError
from magma_torch.store.graph import RELATIONS
from magma_torch.testing import is_acyclic
from magma_torch.text.embedder import Embedder

WAIT = 60  # seconds; only a guard against hanging, never asserted on


@pytest.fixture(scope="module")
def emb():
    return Embedder(device="cpu")


def make_mem(emb, consolidation="none", background=True, **fast) -> MagmaMemory:
    cfg = load_group("memory", "magma")
    cfg.slow_path.background = background
    for k, v in fast.items():
        cfg.fast_path[k] = v
    return MagmaMemory(cfg, consolidation, device="cpu", embedder=emb)


@pytest.fixture
def mem(emb):
    m = make_mem(emb)
    yield m
    m.close()


def rec(text, ts, **kw):
    return {"text": text, "timestamp": ts, **kw}


def edges(mem, rel):
    s, d, _ = mem.store.graph.edges(rel)
    return list(zip(s.tolist(), d.tolist(), strict=True))


def state(mem) -> dict:
    """Everything an add could change, as plain Python values."""
    st = mem.store
    with st.lock:
        ev = st.events
        return {
            "stats": mem.stats(),
            "rows": [vars(r).copy() for r in ev.rows],
            "cols": [len(ev.embeddings), len(ev.timestamps), len(ev.date_spans), len(ev.prev), len(ev.next)],
            "emb": ev.embeddings.data.tolist(),
            "ts": ev.timestamps.data.tolist(),
            "spans": torch.nan_to_num(ev.date_spans.data, nan=-1.0).tolist(),
            "prev": ev.prev.data.tolist(),
            "next": ev.next.data.tolist(),
            "by_source": dict(ev.by_source),
            "last_of_stream": dict(ev.last_of_stream),
            "index": (len(st.vector_index), len(st.keyword_index)),
            "edges": {rel: [t.tolist() for t in st.graph.edges(rel)] for rel in RELATIONS},
            "entities": list(st.entities.names),
            "status": dict(mem.worker.status),
        }


# ---------------------------------------------------------------- basic adds


def test_add_returns_ids_and_stores_fields(mem):
    """add/add_many return consecutive ids; fields and both indexes are filled."""
    assert mem.add("Hello there", "2023-05-08 10:00", speaker="Anna", source_id="D1:1",
                   session_id="s1", metadata={"k": 1}) == 0
    assert mem.add_many([rec("Second turn", "2023-05-08 10:01", speaker="Ben"),
                         rec("Third turn", "2023-05-08 10:02")]) == [1, 2]
    row = mem.store.events.rows[0]
    assert (row.text, row.speaker, row.source_id, row.session_id, row.metadata, row.stream) == (
        "Hello there", "Anna", "D1:1", "s1", {"k": 1}, "default")
    assert row.timestamp == datetime(2023, 5, 8, 10, tzinfo=timezone.utc).timestamp()
    assert mem.stats()["events"] == 3
    assert len(mem.store.vector_index) == len(mem.store.keyword_index) == 3
    assert mem.add_many([]) == []


def test_temporal_chain_per_stream(mem):
    """Two interleaved streams each get their own chain, continued across calls."""
    recs = [rec(f"turn {i} of {s}", f"2023-05-08 10:{i:02d}", stream=s) for i, s in enumerate("abab")]
    assert mem.add_many(recs) == [0, 1, 2, 3]
    mem.add_many([rec("late a", "2023-05-08 11:00", stream="a"), rec("first c", "2023-05-08 09:00", stream="c")])
    assert sorted(edges(mem, "temporal")) == [(0, 2), (1, 3), (2, 4)]
    assert mem.store.events.prev.data.tolist() == [-1, -1, 0, 1, 2, -1]
    assert mem.store.events.next.data.tolist() == [2, 3, 4, -1, -1, -1]
    assert mem.store.events.preceding(4, 6) == [0, 2]


TOPICS = [
    "I adopted a puppy from the animal shelter last week.",
    "We went kayaking on the mountain lake at sunrise.",
    "The new puppy from the shelter chewed my shoes.",
    "Paddling a kayak on the calm lake was relaxing.",
    "Our shelter puppy loves long walks in the park.",
    "I bought a second kayak for trips on the lake.",
    "My bakery closed and I lost my job there.",
    "The puppy we got at the shelter is learning to sit.",
    "Kayaking across the lake again this weekend.",
    "I'm applying for a job at another bakery.",
]


def _expected_semantic(embs: torch.Tensor, k: int, theta: float) -> set[tuple[int, int]]:
    """Brute force: each event links to its k most similar earlier events above theta."""
    sims = embs @ embs.T
    out = set()
    for i in range(1, len(embs)):
        vals, idx = torch.topk(sims[i, :i], min(k, i))
        out |= {(i, int(j)) for v, j in zip(vals.tolist(), idx.tolist(), strict=True) if v > theta}
    return out


def test_semantic_edges_above_theta_to_earlier_events_only(emb):
    """Semantic edges go new -> earlier, score > theta, exactly the top-k earlier neighbours."""
    k, theta = 2, 0.3
    batched = make_mem(emb, semantic_k=k, theta_sim=theta)
    single = make_mem(emb, semantic_k=k, theta_sim=theta)
    try:
        recs = [rec(t, f"2023-05-08 10:{i:02d}") for i, t in enumerate(TOPICS)]
        batched.add_many(recs)
        for r in recs:
            single.add_many([r])
        embs = batched.store.events.embeddings.data
        s, d, w = batched.store.graph.edges("semantic")
        assert len(s) > 0
        assert (d < s).all()
        assert (w > theta).all()
        assert torch.allclose(w, (embs[s] * embs[d]).sum(1), atol=1e-4)
        expected = _expected_semantic(embs, k, theta)
        assert set(edges(batched, "semantic")) == expected
        assert set(edges(single, "semantic")) == expected  # batching does not change the graph
        assert len(edges(batched, "semantic")) == len(expected)  # no duplicates
    finally:
        batched.close()
        single.close()


def test_high_theta_gives_no_semantic_edges(emb):
    """Nothing is linked when no pair clears theta_sim."""
    m = make_mem(emb, theta_sim=0.99)
    try:
        m.add_many([rec(t, f"2023-05-08 10:{i:02d}") for i, t in enumerate(TOPICS)])
        assert edges(m, "semantic") == []
        assert len(edges(m, "temporal")) == len(TOPICS) - 1
    finally:
        m.close()


def test_resolved_dates_stored(mem):
    """Relative dates are resolved against the event timestamp and stored."""
    i = mem.add("I went hiking yesterday.", "2023-05-08 13:56")
    row = mem.store.events.rows[i]
    assert [(d["expression"], d["start"], d["end"]) for d in row.dates] == [
        ("yesterday", "2023-05-07", "2023-05-07")]
    start = datetime(2023, 5, 7, tzinfo=timezone.utc).timestamp()
    assert mem.store.events.date_spans.data[i].tolist() == [start, start + 86399.0]
    j = mem.add("Nothing dated here.", "2023-05-08 14:00")
    assert torch.isnan(mem.store.events.date_spans.data[j]).all()


def test_image_caption_kept_in_text_and_searchable(mem):
    """An image turn's caption stays part of the stored, embedded and indexed text."""
    text = "Look what I built! [shares an image: a photo of a wooden canoe hull on a frame]"
    mem.add_many([rec("Hi!", "2023-05-08 10:00"), rec(text, "2023-05-08 10:01", source_id="D1:2")])
    assert mem.store.events.rows[1].text == text
    top = mem.store.keyword_index.top_k(mem.store.keyword_index.scores(["canoe hull"]), 1)
    assert top[0, 0] == 1
    q = mem.embedder.encode(["a wooden canoe"])
    _, ids = mem.store.vector_index.search(q.to(mem.store.device), 1)
    assert ids[0, 0].item() == 1


# ---------------------------------------------------------------- bad input


GOOD = [rec("first good record", "2023-06-01 10:00", source_id="g1"),
        rec("second good record", "2023-06-01 10:01", source_id="g2")]


@pytest.mark.parametrize("bad,pattern", [
    (rec("", "2023-06-02"), r"text"),
    (rec("   \n", "2023-06-02"), r"text"),
    (rec(None, "2023-06-02"), r"text"),
    (rec(42, "2023-06-02"), r"text"),
    ({"text": "no timestamp"}, r"timestamp"),
    (rec("none timestamp", None), r"timestamp"),
    (rec("blank timestamp", ""), r"timestamp"),
    (rec("bad timestamp", "the day after never"), r"timestamp"),
    (rec("bad timestamp", float("nan")), r"timestamp"),
    (rec("bad timestamp", [2023, 5, 8]), r"timestamp"),
    (rec("before the store's last event", "2023-05-01 09:00"), r"backwards"),
    (rec("before record 1 of this batch", "2023-06-01 10:00:30"), r"backwards"),
    (rec("typo", "2023-06-02", speeker="x"), r"unknown field"),
    (rec("bad metadata", "2023-06-02", metadata=["a", "b"]), r"metadata"),
    ("just a string", r"mapping"),
])
def test_bad_record_raises_naming_it_and_leaves_memory_unchanged(mem, bad, pattern):
    """The last record of a batch is bad: a clear error naming it, and nothing of the batch written."""
    mem.add_many([rec("existing event", "2023-05-08 10:00", source_id="e0")])
    mem.consolidate()
    before = state(mem)
    with pytest.raises(IngestError, match=pattern) as err:
        mem.add_many(GOOD + [bad])
    assert "record 2" in str(err.value)
    assert state(mem) == before
    # the memory still works afterwards
    assert mem.add_many(GOOD) == [1, 2]


def test_bad_record_error_names_source_id(mem):
    """The error names the record's source_id when it has one (single add too)."""
    before = state(mem)
    with pytest.raises(IngestError, match=r"record 0.*D7:3.*text"):
        mem.add("", "2023-05-08", source_id="D7:3")
    with pytest.raises(IngestError, match=r"D7:4.*cannot parse timestamp"):
        mem.add("fine text", "13th of Neveruary", source_id="D7:4")
    assert state(mem) == before


def test_backwards_is_per_stream_and_equal_timestamps_are_fine(mem):
    """Another stream may be earlier; equal timestamps in one stream are accepted."""
    mem.add_many([rec("a1", "2023-05-08 10:00", stream="a"), rec("a2", "2023-05-08 10:00", stream="a"),
                  rec("b1", "2023-05-01 10:00", stream="b")])
    assert mem.stats()["events"] == 3
    with pytest.raises(IngestError, match=r"backwards in stream 'b' \(last event 2023-05-01T10:00:00\); "
                                          r"pass backfill=True"):
        mem.add("b0", "2023-04-30", stream="b")


def test_duplicate_source_id_is_idempotent(mem):
    """Re-adding a known source_id returns the existing id and writes nothing."""
    first = mem.add("I adopted a puppy.", "2023-05-08 10:00", source_id="D1:1")
    mem.consolidate()
    before = state(mem)
    assert mem.add("I adopted a puppy.", "2023-05-08 10:00", source_id="D1:1") == first
    assert state(mem) == before


@pytest.mark.parametrize("other, differ", [
    ({"text": "other text"}, "text"),
    ({"timestamp": "2020-01-01"}, "timestamp"),
    ({"stream": "conv-2", "speaker": "Bob"}, "speaker, stream"),
])
def test_a_known_source_id_with_other_content_is_refused(mem, other, differ):
    """Two turns sharing a source id (two conversations' "D1:1", say) would lose the second in
    silence: refused, naming the record and what differs, stored data as it was; in a batch too."""
    mem.add("I adopted a puppy.", "2023-05-08 10:00", source_id="D1:1")
    mem.consolidate()
    before = state(mem)
    turn = {"text": "I adopted a puppy.", "timestamp": "2023-05-08 10:00", "source_id": "D1:1"} | other
    with pytest.raises(IngestError, match=rf"source_id 'D1:1' is already stored with another {differ} "):
        mem.add_many([rec("new", "2023-05-09 10:00", source_id="D1:2"), turn])
    assert state(mem) == before
    with pytest.raises(IngestError, match=r"record 1.*source_id 'x' is already stored with another text"):
        mem.add_many([rec("a", "2023-05-09 10:00", source_id="x"), rec("b", "2023-05-09 10:00", source_id="x")])
    assert state(mem) == before


def test_duplicate_source_id_within_one_batch(mem):
    """Within a batch, a repeated source_id maps to the id of its first occurrence."""
    mem.add("existing", "2023-05-08 09:00", source_id="old")
    ids = mem.add_many([rec("a", "2023-05-08 10:00", source_id="x"),
                        rec("b", "2023-05-08 10:01", source_id="y"),
                        rec("a", "2023-05-08 10:00", source_id="x"),
                        rec("existing", "2023-05-08 09:00", source_id="old"),
                        rec("c", "2023-05-08 10:04"),
                        rec("b", "2023-05-08 10:01", source_id="y")])
    assert ids == [1, 2, 1, 0, 3, 2]
    assert mem.stats()["events"] == 4
    assert [r.source_id for r in mem.store.events.rows] == ["old", "x", "y", None]
    assert mem.store.events.by_source == {"old": 0, "x": 1, "y": 2}
    mem.consolidate()
    assert sorted(mem.worker.status) == [0, 1, 2, 3]


def test_very_long_text_stored_whole_with_warning(mem, caplog):
    """Text past the embedder's limit is embedded truncated, stored whole, and logged by record."""
    long_text = " ".join(f"word{i}" for i in range(600))
    assert mem.embedder.count_tokens([long_text])[0] > 256
    with caplog.at_level(logging.WARNING, logger="magma_torch.ingest.fast_path"):
        ids = mem.add_many([rec("short", "2023-05-08 10:00", source_id="s"),
                            rec("short too", "2023-05-08 10:00"),
                            rec(long_text, "2023-05-08 10:01", source_id="long-1")])
    assert mem.store.events.rows[ids[2]].text == long_text
    warnings = [r.getMessage() for r in caplog.records if r.name == "magma_torch.ingest.fast_path"]
    assert len(warnings) == 1
    assert "record 2" in warnings[0] and "long-1" in warnings[0] and "truncated" in warnings[0]
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="magma_torch.ingest.fast_path"):
        mem.add_many([rec("short", "2023-05-08 10:00", source_id="s"), rec(long_text, "2023-05-08 10:03")])
    warnings = [r.getMessage() for r in caplog.records if r.name == "magma_torch.ingest.fast_path"]
    assert len(warnings) == 1 and "record 1" in warnings[0]


# ---------------------------------------------------------------- slow path


class BlockingConsolidator:
    """propose() signals it has started, then waits until released."""

    def __init__(self):
        self.entered, self.release = threading.Event(), threading.Event()

    def propose(self, batch, context):
        self.entered.set()
        assert self.release.wait(WAIT)
        return [Proposal(v.id, [], []) for v in batch]

    def backfill(self):
        return []


def test_add_never_waits_for_the_slow_path(mem):
    """While the worker is blocked inside propose, add/add_many/retrieve still return."""
    stub = BlockingConsolidator()
    mem.worker.consolidator = stub
    try:
        first = mem.add("I adopted a puppy.", "2023-05-08 10:00")
        assert stub.entered.wait(WAIT)  # the worker is now inside propose
        second = mem.add("He chewed my shoes.", "2023-05-08 10:01")
        more = mem.add_many([rec("We walk daily.", "2023-05-08 10:02"), rec("He is cute.", "2023-05-08 10:03")])
        r = mem.retrieve("what did the puppy chew?")
        assert not stub.release.is_set()  # everything above returned while the worker was blocked
        assert [first, second, *more] == [0, 1, 2, 3]
        assert mem.stats()["events"] == 4 and mem.stats()["queue"] == 4
        assert mem.worker.status[first][0] == "pending" and mem.worker.status[3][0] == "pending"
        assert r.nodes
    finally:
        stub.release.set()
    mem.consolidate()
    assert {s for s, _ in mem.worker.status.values()} == {"consolidated"}
    assert mem.stats()["queue"] == 0


CONVERSATION = [
    ("Anna", "My bakery closed down last month and I lost my job."),
    ("Ben", "Oh no, that sounds hard."),
    ("Anna", "Yeah. That's why I'm looking for a job at another bakery."),
    ("Ben", "I adopted a puppy from the shelter and he needs daily walks."),
    ("Anna", "How lovely!"),
    ("Ben", "That's why I get up early now, the puppy needs daily walks before work."),
]


@pytest.mark.parametrize("background", [True, False])
def test_heuristic_consolidation_entities_and_causal(emb, background):
    """Speakers are no entity nodes, "bakery" links the turns naming it, "that's why" gives a
    causal edge, the causal graph is a DAG."""
    m = make_mem(emb, consolidation="heuristic", background=background)
    try:
        ids = m.add_many([rec(t, f"2023-05-08 10:{i:02d}", speaker=s) for i, (s, t) in enumerate(CONVERSATION)])
        m.consolidate()
        st = m.store
        assert not {"anna", "ben"} & set(st.entities.names)
        bakery = st.entity_id("bakery")
        mentions = edges(m, "entity")
        assert all((i, bakery) in mentions for i in (0, 2))
        assert (1, bakery) not in mentions
        causal = edges(m, "causal")
        assert (0, 2) in causal
        assert all(a < b for a, b in causal)
        assert is_acyclic(causal)
        assert set(m.worker.status) == set(ids)
        assert all(s in ("consolidated", "failed") for s, _ in m.worker.status.values())
        assert m.stats()["queue"] == 0
        assert m.stats()["entities"] == len(st.entities) and m.stats()["edges"]["causal"] == len(causal)
    finally:
        m.close()


class RaisingConsolidator:
    """Raises on any batch holding a 'boom' event; proposes nothing otherwise."""

    def __init__(self):
        self.calls = 0

    def propose(self, batch, context):
        self.calls += 1
        if any("boom" in v.text for v in batch):
            raise RuntimeError("model exploded")
        return [Proposal(v.id, [EntityMention(v.speaker.lower(), "speaker", v.speaker)], []) for v in batch]

    def backfill(self):
        return []


@pytest.mark.parametrize("background", [True, False])
def test_consolidator_error_fails_batch_and_worker_keeps_running(emb, background):
    """A raising consolidator marks its batch failed with the reason; later batches still run."""
    m = make_mem(emb, background=background)
    stub = m.worker.consolidator = RaisingConsolidator()
    try:
        bad = m.add_many([rec("all fine", "2023-05-08 10:00", speaker="A"),
                          rec("boom goes the batch", "2023-05-08 10:01", speaker="A")])
        m.consolidate()
        for i in bad:
            status, reason = m.worker.status[i]
            assert status == "failed" and "RuntimeError" in reason and "model exploded" in reason
        assert m.stats()["entities"] == 0 and m.stats()["edges"]["entity"] == 0
        good = m.add("later event", "2023-05-08 10:02", speaker="Bo")
        m.consolidate()
        assert m.worker.status[good] == ("consolidated", "")
        assert stub.calls == 2
        assert m.store.entities.names == ["bo"] and edges(m, "entity") == [(good, 0)]
        if background:
            assert m.worker._thread.is_alive()
    finally:
        m.close()


class ScriptedConsolidator:
    """Proposes fixed causal links and mentions for the event whose text names them."""

    def __init__(self, script):
        self.script = script

    def propose(self, batch, context):
        return [Proposal(v.id, *self.script.get(v.text, ([], []))) for v in batch]


def test_invalid_links_are_rejected_valid_ones_added(emb):
    """Unknown nodes, self-loops, bad confidences, backward links and duplicates are rejected;
    valid links are written. (The stub has no backfill(): it is optional.)"""
    m = make_mem(emb, background=False)
    e = lambda n: EntityMention(n, "name", n.title())  # noqa: E731
    m.worker.consolidator = ScriptedConsolidator({
        "two": ([e("zoe")], [CausalLink(0, 1, 0.9, "so"), CausalLink(1, 2, 0.8, "so")]),
        "one": ([], [CausalLink(5, 1, 0.9, "so")]),  # cause not written yet: unknown
        "three": ([e("zoe"), e("max")], [
            CausalLink(99, 3, 0.9, "so"),      # unknown cause
            CausalLink("0", 3, 0.9, "so"),     # not an id
            CausalLink(0, 3, float("nan"), "so"),  # bad confidence
            CausalLink(3, 3, 0.9, "so"),       # self-loop
            CausalLink(2, 0, 0.9, "so"),       # backwards in time
            CausalLink(0, 1, 0.9, "so"),       # duplicate
            CausalLink(1, 3, 0.7, "so"),       # valid
        ]),
    })
    m.worker.max_causal_per_event = 10
    ghost = ScriptedConsolidator.propose

    def propose(self, batch, context):  # plus a proposal for an event that does not exist
        return ghost(self, batch, context) + [Proposal(77, [e("ghost")], [])]
    m.worker.consolidator.propose = propose.__get__(m.worker.consolidator)
    try:
        m.add_many([rec(t, f"2023-05-08 10:0{i}") for i, t in enumerate(["zero", "one", "two"])])
        m.consolidate()
        m.add("three", "2023-05-08 10:03")
        m.consolidate()
        assert sorted(edges(m, "causal")) == [(0, 1), (1, 2), (1, 3)]
        assert is_acyclic(edges(m, "causal"))
        assert m.store.graph.edges("causal")[2].tolist() == pytest.approx([0.9, 0.8, 0.7])
        status, reason = m.worker.status[3]
        assert status == "consolidated"
        for problem in ("99->3: unknown node", "'0'->3: unknown node", "not in (0, 1]", "3->3: self-loop"):
            assert problem in reason
        assert "2->0: cause is later than effect" in reason and "0->1: duplicate" in reason
        assert "1->3" not in reason
        assert m.worker.status[1] == ("consolidated", "rejected causal link 5->1: unknown node")
        assert m.worker.status[2] == ("consolidated", "")
        assert sorted(m.store.entities.names) == ["max", "zoe"]
        zoe, mx = m.store.entity_id("zoe"), m.store.entity_id("max")
        assert sorted(edges(m, "entity")) == sorted([(2, zoe), (3, mx), (3, zoe)])
    finally:
        m.close()


def test_at_one_timestamp_a_link_goes_in_stream_order(emb):
    """Whatever the consolidator: LoCoMo gives a whole session one timestamp, and a link from a
    turn to an earlier turn of it is refused."""
    m = make_mem(emb, background=False)
    m.worker.consolidator = ScriptedConsolidator({"one": ([], [CausalLink(1, 0, 0.9, "so"),
                                                             CausalLink(0, 1, 0.8, "so")])})
    try:
        m.add_many([rec(t, "2023-05-08 10:00") for t in ["zero", "one"]])
        m.consolidate()
        assert edges(m, "causal") == [(0, 1)]
        assert m.worker.status[1] == ("consolidated", "rejected causal link 1->0: cause is later than effect")
    finally:
        m.close()


def test_a_link_that_would_close_a_cycle_is_refused(emb):
    """A causal edge written past every check (here straight into the graph) that goes back in time
    is still no ground for a cycle: the link that would close one is refused."""
    m = make_mem(emb, background=False)
    m.worker.consolidator = ScriptedConsolidator({"zero": ([], [CausalLink(1, 0, 0.9, "so")])})
    try:
        m.add_many([rec("zero", "2023-05-08 10:05"), rec("one", "2023-05-08 10:05")])
        m.store.graph.add_edges("causal", torch.tensor([0]), torch.tensor([1]))
        m.store.events.timestamps.data[1] -= 600      # the edge now goes back in time
        m.store.events.rows[1].timestamp -= 600
        m.consolidate()
        assert edges(m, "causal") == [(0, 1)]
        assert m.worker.status[0] == ("consolidated", "rejected causal link 1->0: would create a cycle")
    finally:
        m.close()


def test_a_causal_link_across_streams_is_refused(emb):
    """A causal link stays within a stream (EventView): the worker refuses a proposed one across
    streams, and a bulk import refuses one (naming the edge, writing nothing of the batch), though
    in row order it goes forward while in time it goes back."""
    m = make_mem(emb, background=False)
    m.worker.consolidator = ScriptedConsolidator({"two": ([], [CausalLink(0, 2, 0.9, "so")])})
    try:
        m.add_many([rec("zero", "2023-05-08 10:05", stream="a"), rec("one", "2023-05-08 10:00", stream="b"),
                    rec("two", "2023-05-08 10:06", stream="b")])
        m.consolidate()
        assert edges(m, "causal") == []
        assert m.worker.status[2] == ("consolidated",
                                      "rejected causal link 0->2: cause and effect are in different streams")
        with pytest.raises(IngestError, match=r"causal edge 1 \(0 -> 1\) joins two streams"):
            bulk.add_links(m.store, causal=(torch.tensor([1, 0]), torch.tensor([2, 1])))
        assert edges(m, "causal") == []
        bulk.add_links(m.store, causal=(torch.tensor([1]), torch.tensor([2])))
        assert edges(m, "causal") == [(1, 2)]
        m.check()
    finally:
        m.close()


def test_close_drains_the_queue(emb):
    """close() finishes queued work before the worker stops."""
    m = make_mem(emb, consolidation="heuristic")
    ids = m.add_many([rec(t, f"2023-05-08 10:{i:02d}", speaker=s) for i, (s, t) in enumerate(CONVERSATION)])
    m.close()
    assert all(m.worker.status[i][0] == "consolidated" for i in ids)
    assert m.worker.pending() == 0


# ---------------------------------------------------------------- retrieval is read-only


def test_retrieve_never_mutates_the_store(emb):
    """retrieve/retrieve_batch leave counts, rows, indexes, edges and statuses as they were."""
    m = make_mem(emb, consolidation="heuristic")
    try:
        m.add_many([rec(t, f"2023-05-08 10:{i:02d}", speaker=s, source_id=f"D1:{i}")
                    for i, (s, t) in enumerate(CONVERSATION)])
        m.consolidate()
        before = state(m)
        r = m.retrieve("Why is Anna looking for a job?", query_time="2023-05-09")
        rs = m.retrieve_batch(["When did the bakery close?", "Who adopted a puppy?", "zzz"],
                              ["2023-05-09", None, None], budget_tokens=50)
        assert r.nodes and len(rs) == 3
        assert state(m) == before
    finally:
        m.close()


class GatedEmbedder:
    """Delegates to a real embedder; the first encode() waits until released."""

    def __init__(self, inner):
        self.inner, self.dim = inner, inner.dim
        self.entered, self.release = threading.Event(), threading.Event()
        self.first = True

    @property
    def max_seq_length(self):
        return self.inner.max_seq_length

    def count_tokens(self, texts):
        return self.inner.count_tokens(texts)

    def encode(self, texts):
        if self.first:
            self.first = False
            self.entered.set()
            assert self.release.wait(WAIT)
        return self.inner.encode(texts)


def test_concurrent_adds_of_one_source_id_make_one_node(emb):
    """Two threads adding the same source_id at once get one node and the same id."""
    gated = GatedEmbedder(emb)
    m = MagmaMemory(consolidation="none", device="cpu", embedder=gated)
    out = {}
    try:
        t1 = threading.Thread(target=lambda: out.setdefault("a", m.add("same turn", "2023-05-08", source_id="D1:1")))
        t1.start()
        assert gated.entered.wait(WAIT)  # t1 validated its record and is embedding it
        t2 = threading.Thread(target=lambda: out.setdefault("b", m.add("same turn", "2023-05-08", source_id="D1:1")))
        t2.start()
        t2.join(0.5)  # give t2 the chance to race; not asserted on
        gated.release.set()
        t1.join(WAIT)
        t2.join(WAIT)
        assert out == {"a": 0, "b": 0}
        assert m.stats()["events"] == 1
    finally:
        gated.release.set()
        m.close()
