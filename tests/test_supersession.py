"""Knowledge updates: the heuristic's fact rules, valid time on events, the supersedes relation
through save/load, export/import, log replay and check(), and the query process preferring the
fact that holds now (tests/data/longmemeval_knowledge_updates.json for the figure)."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from magma_torch import MagmaMemory
from magma_torch.config import load_group
from magma_torch.config.schema import SupersessionConfig
from magma_torch.eval.knowledge_updates import measure, summary
from magma_torch.explain import explain
from magma_torch.explain.terminal import format_text
from magma_torch.ingest.supersession import UpdateTracker
from magma_torch.query.linearize import display_order
from magma_torch.query.supersession import prefer_current
from magma_torch.store.integrity import IntegrityError
from magma_torch.store.tables import EventRow
from magma_torch.testing import abandon
from magma_torch.text.embedder import Embedder

KU = Path(__file__).parent / "data" / "longmemeval_knowledge_updates.json"


def links(texts, speakers=None):
    """(later, earlier) index pairs the default rules give for one stream of turns."""
    t = UpdateTracker("default")
    out = []
    for i, text in enumerate(texts):
        speaker = "Ann" if speakers is None else speakers[i]
        out += [(l.later, l.earlier) for l in t.observe(i, "s", speaker, text)]
    return out


@pytest.mark.parametrize("earlier, later", [
    ("I live in Boston with my partner.", "We just moved to Denver!"),
    ("I work at Google as an engineer.", "I started a new job at Stripe this week."),
    ("My boyfriend Jake loves jazz.", "I'm dating Marco now."),
    ("I have two cats.", "I have three cats now."),
    ("I have two cats.", "We adopted a third cat."),
    ("My favorite food is sushi.", "Ramen is now my favourite food."),
    ("I work at Target as a shift manager.", "I no longer work at Target."),
    ("My girlfriend Emma is great.", "Emma and I broke up last month."),
    ("I live in St. Louis.", "I just moved to St. Paul."),             # not "st" twice: an abbreviation's period
])
def test_an_update_supersedes_the_earlier_fact(earlier, later):
    assert links([earlier, "How was your weekend?", later]) == [(2, 0)]


@pytest.mark.parametrize("earlier, later", [
    ("I live in Boston.", "I live in a suburb of Boston now."),           # the same value
    ("I live in Boston.", "My sister moved to Denver."),                   # someone else
    ("I live in Boston.", "If I moved to Denver, would I be happier?"),   # a question, a hedge
    ("I live in Boston.", "I'm thinking that if I moved to Denver it would be cheaper."),
    ("I have two cats.", "I have three dogs now."),                        # another key
    ("I have two cats.", "My two cats are asleep."),                       # the same count
    ("I work at Google.", "I left the party early."),                      # a negation names another value
    ("I work at Google.", "I have two cats now."),                         # another kind
])
def test_no_update_without_the_same_speaker_kind_and_a_changed_value(earlier, later):
    assert links([earlier, later]) == []


def test_a_change_without_a_cue_only_becomes_the_current_value():
    # "I live in Leeds." states another value with no change cue: no link, but it is now the
    # value a later update ends.
    assert links(["I live in Boston.", "I live in Leeds.", "I moved to York."]) == [(2, 1)]


def test_another_speaker_never_updates_my_fact():
    assert links(["I live in Boston.", "I just moved to Denver!"], speakers=["Ann", "Ben"]) == []


def test_tracker_state_round_trips():
    a = UpdateTracker("default")
    a.observe(0, "s", "Ann", "I live in Boston.")
    b = UpdateTracker("default")
    b.load_state_dict(a.state_dict())
    assert [(l.later, l.earlier) for l in b.observe(1, "s", "Ann", "I moved to Denver.")] == [(1, 0)]


# ---------------------------------------------------------------- the memory

TURNS = [("Ann", "I live in Boston with my two cats.", "2023-01-02 10:00"),
         ("Ben", "Boston is lovely in the fall.", "2023-01-02 10:01"),
         ("Ann", "I love baking sourdough bread on Sundays.", "2023-02-05 10:00"),
         ("Ann", "We just moved to Denver last month, the mountains are amazing!", "2023-03-02 10:00"),
         ("Ben", "Denver sounds great, enjoy the hiking.", "2023-03-02 10:01")]


@pytest.fixture(scope="module")
def emb():
    return Embedder(device="cpu")


def build(emb, store_dir=None, durable=False) -> tuple[MagmaMemory, list[int]]:
    cfg = load_group("memory", "magma")
    cfg.slow_path.background = False
    mem = MagmaMemory(cfg, device="cpu", embedder=emb, store_dir=store_dir, durable=durable)
    ids = mem.add_many([{"text": t, "timestamp": ts, "speaker": sp, "source_id": f"D{i}"}
                        for i, (sp, t, ts) in enumerate(TURNS)])
    return mem, ids


def supersedes(mem) -> list[tuple[int, int]]:
    s, d, _ = mem.store.graph.edges("supersedes")
    return sorted(zip(s.tolist(), d.tolist(), strict=True))


@pytest.mark.parametrize("window_end, order", [(None, [2, 1, 0]), (250.0, [1, 0]), (150.0, [0, 1])])
def test_a_time_window_follows_the_chain_of_updates_up_to_its_end(window_end, order):
    # Boston (t=100) -> Denver (200) -> Austin (300): until 250 the fact that holds is Denver.
    rows = [EventRow("I live in Boston.", 100.0, "s"), EventRow("I moved to Denver.", 200.0, "s"),
            EventRow("I moved to Austin.", 300.0, "s")]
    ranked, _ = prefer_current([(0, 0.9), (1, 0.5)], {0: [1], 1: [2]}, rows, SupersessionConfig(), False, window_end)
    assert [e for e, _ in ranked] == order


@pytest.mark.parametrize("intent", ["WHEN", "WHY", "ENTITY"])
def test_older_facts_are_shown_behind_the_current_one_newest_first_whatever_their_salience(intent):
    # Boston -> Denver -> Austin, each its own episode, Denver the most salient: before, Austin, Boston, Denver
    rows = [EventRow("I live in Boston.", 100.0, "s"), EventRow("I moved to Denver.", 200.0, "s"),
            EventRow("I moved to Austin.", 300.0, "s")]
    ranked, follows = prefer_current([(1, 3.0), (0, 2.0), (2, 1.0)], {0: [1], 1: [2]}, rows, SupersessionConfig(),
                                     False)
    events = [e for e, _ in ranked]
    assert display_order(events, intent, rows, [], episodes=events, follows=follows) == [2, 1, 0]


def test_valid_time_and_the_context_mark(emb):
    mem, ids = build(emb)
    try:
        mem.consolidate()
        assert supersedes(mem) == [(ids[3], ids[0])]
        old, new = mem.event(ids[0]), mem.event(ids[3])
        assert (old.valid_from, old.valid_to, old.superseded_by) == (old.timestamp, new.timestamp, ids[3])
        assert new.valid_to is None and [e.valid_to for e in mem.events()][0] == new.timestamp
        mem.check()
        now = mem.retrieve("Where does Ann live?", "2023-04-01")
        assert "(D0) Ann: I live in Boston with my two cats. [superseded 2023-03-02 by (D3)]" in now.context
        assert now.context.index("(D3)") < now.context.index("(D0)")
        order = [n.id for n in now.nodes]
        assert order.index(ids[3]) + 1 == order.index(ids[0])            # right behind the fact that holds now
        assert now.nodes[order.index(ids[0])].valid_to == new.timestamp
        assert sum(b.tokens for b in now.nodes if b.id in now.context_ids) <= 2000
        before = mem.retrieve("Where did Ann live before?", "2023-04-01")
        assert "[superseded 2023-03-02 by (D3)]" in before.context     # still seen, dated and marked
    finally:
        mem.close()


def test_forgetting_the_update_makes_the_earlier_fact_current_again(emb):
    mem, ids = build(emb)
    try:
        mem.consolidate()
        mem.forget(ids=[ids[1]])                   # an unrelated event: the link survives the renumbering
        assert mem.event(ids[0]).superseded_by == ids[3]
        mem.forget(ids=[ids[3]])
        assert supersedes(mem) == [] and mem.event(ids[0]).valid_to is None
        assert "superseded" not in mem.retrieve("Where does Ann live?", "2023-04-01").context
        mem.check()
    finally:
        mem.close()


def test_without_supersession_the_order_is_salience(emb):
    cfg = load_group("memory", "magma")
    cfg.slow_path.background = False
    cfg.retrieval.supersession.current_first = False
    cons = load_group("consolidation", "heuristic")
    cons.supersession = None
    with MagmaMemory(cfg, cons, device="cpu", embedder=emb) as mem:
        mem.add_many([{"text": t, "timestamp": ts, "speaker": sp} for sp, t, ts in TURNS])
        mem.consolidate()
        assert supersedes(mem) == [] and "superseded" not in mem.retrieve("Where does Ann live?").context


def test_supersession_survives_save_export_and_log_replay(emb, tmp_path):
    mem, ids = build(emb, store_dir=tmp_path / "store", durable=True)
    try:
        mem.consolidate()
        want = supersedes(mem)
        mem.save(tmp_path / "save")
        mem.export_jsonl(tmp_path / "mem.jsonl")
    finally:
        mem.close()
    for back in (MagmaMemory.load(tmp_path / "save", embedder=emb),
                 MagmaMemory.import_jsonl(tmp_path / "mem.jsonl", embedder=emb),
                 MagmaMemory(store_dir=tmp_path / "store", embedder=emb)):
        try:
            assert supersedes(back) == want and back.event(ids[0]).superseded_by == ids[3]
            back.check()
        finally:
            back.close()
    # Only the log holds the events: replay queues them again and consolidation links them again.
    mem, ids = build(emb, store_dir=tmp_path / "logged", durable=True)
    abandon(mem)                                # a crash: no checkpoint after the adds
    cfg = load_group("memory", "magma")
    cfg.slow_path.background = False
    back = MagmaMemory(cfg, store_dir=tmp_path / "logged", durable=True, embedder=emb)
    try:
        back.consolidate()
        assert supersedes(back) == want
    finally:
        back.close()


def test_check_names_a_supersession_that_points_forward(emb):
    mem, ids = build(emb)
    try:
        mem.consolidate()
        mem.store.graph.add_edges("supersedes", torch.tensor([ids[0]]), torch.tensor([ids[3]]))
        with pytest.raises(IntegrityError, match=f"supersession {ids[0]} -> {ids[3]}"):
            mem.check()
    finally:
        mem.close()


@pytest.mark.slow
def test_knowledge_update_questions_put_the_current_fact_first(emb):
    """36 LongMemEval-schema questions (experiments/supersession/make_fixture.py): in at least 90 %
    the later fact is in the context ahead of the earlier one, and no evidence is lost."""
    rows = measure(str(KU), embedder=emb)
    s = summary(rows)
    assert s["n"] == 36
    assert s["later_first"] >= 0.9, [r["question_id"] for r in rows if not r["later_first"]]
    assert s["recall_all@2000tok"] == 1.0


RESIDENCES = [("I live in Boston.", "2023-01-01"), ("I moved to Denver.", "2023-02-01"),
              ("I moved to Paris last month.", "2023-03-01"), ("I moved to London now.", "2023-06-01")]


def superseded_texts(mem) -> set[tuple[str, str]]:
    rows = mem.store.events.rows
    return {(rows[later].text, rows[earlier].text) for later, earlier in supersedes(mem)}


def in_order(emb, turns) -> set[tuple[str, str]]:
    """The supersessions of a fresh memory given ``turns`` (text, timestamp) of Ann in time order."""
    cfg = load_group("memory", "magma")
    cfg.slow_path.background = False
    with MagmaMemory(cfg, device="cpu", embedder=emb) as mem:
        mem.add_many([{"text": t, "timestamp": ts, "speaker": "Ann"} for t, ts in sorted(turns, key=lambda x: x[1])])
        mem.consolidate()
        return superseded_texts(mem)


@pytest.mark.parametrize("op", ["update", "forget", "backfill"])
def test_after_a_lifecycle_operation_the_supersessions_are_those_of_an_in_order_ingest(emb, tmp_path, op):
    """An update, forget or backfill changes which fact held when: the supersedes edges are then
    those a fresh memory given the remaining events in time order makes, before and after a later
    update, and after replaying the log."""
    cfg = load_group("memory", "magma")
    cfg.slow_path.background = False
    boston, denver, paris, london = RESIDENCES
    mem = MagmaMemory(cfg, device="cpu", embedder=emb, store_dir=tmp_path, durable=True)
    ids = [mem.add(t, ts, speaker="Ann") for t, ts in (boston, paris)]
    mem.consolidate()
    if op == "update":
        mem.update(ids[0], timestamp="2023-01-02")
        boston = (boston[0], "2023-01-02")
        turns = [boston, paris]
    elif op == "forget":
        mem.forget(ids=[ids[1]])
        turns = [boston]
    else:
        mem.add(*denver, speaker="Ann", backfill=True)
        turns = [boston, denver, paris]
    mem.consolidate()
    assert superseded_texts(mem) == in_order(emb, turns)
    mem.add(*london, speaker="Ann")
    mem.worker.drain()
    want = superseded_texts(mem)
    assert want == in_order(emb, turns + [london])
    abandon(mem)
    with MagmaMemory(cfg, store_dir=tmp_path, durable=True, embedder=emb, device="cpu") as back:
        back.consolidate()
        assert superseded_texts(back) == want
        back.check()


def test_after_a_forget_the_mark_names_the_superseding_event_by_its_id(emb):
    # Events without a source id are named E<id>. The mark took the row's number, which a forget renumbers:
    # after forgetting two earlier events it read "by (E2)", the marked event's own id, not the update's.
    cfg = load_group("memory", "magma")
    cfg.slow_path.background = False
    with MagmaMemory(cfg, device="cpu", embedder=emb) as mem:
        ids = mem.add_many([{"text": t, "timestamp": ts, "speaker": sp} for sp, t, ts in
                            [("Ann", "Good morning, lovely weather today.", "2023-01-01 09:00"),
                             ("Bob", "Hello there, nice to chat again.", "2023-01-01 09:01"), *TURNS]])
        mem.consolidate()
        old, new = ids[2], ids[5]
        assert mem.event(old).superseded_by == new
        mem.forget(ids=ids[:2])
        r = mem.retrieve("Where does Ann live?", "2023-04-01")
        assert f"(E{old}) Ann: I live in Boston with my two cats. [superseded 2023-03-02 by (E{new})]" in r.context


def test_explain_names_the_superseding_event_as_the_context_does(emb):
    mem, ids = build(emb)
    with mem:
        mem.consolidate()
        r = mem.retrieve("Where does Ann live?", "2023-04-01")
    assert "[superseded 2023-03-02 by (D3)]" in r.context
    line = next(x for x in format_text(explain(r, 15, 10)).splitlines()
                if x.split()[1:2] == ["D0"] and "2023-01-02 10:00" in x)       # the retrieved events' table
    assert "2023-03-02 10:00 (D3)" in line           # the valid-until column said (E3)
