"""The memory's lifecycle (issue 13): inspecting what it holds, JSON-lines export and import,
and the bad input a new user runs into (far-future timestamps, metadata that is not JSON, a
huge event against the token budget, duplicate turns, bad questions, tenants, dataset.limit)."""
from __future__ import annotations

import json
import subprocess
import sys
from datetime import datetime, timedelta, timezone

import pytest

from magma_torch import MagmaMemory, QueryError, StoredEvent
from magma_torch.config import load_group
from magma_torch.eval.datasets import load_demo
from magma_torch.events import UnknownEventError
from magma_torch.ingest.fast_path import IngestError
from magma_torch.store import persistence
from magma_torch.store.durable import CHECKPOINT
from magma_torch.store.graph import RELATIONS
from magma_torch.testing import assert_no_run, assert_same_retrieval, assert_same_store
from magma_torch.text.embedder import Embedder
from magma_torch.tokens import count_tokens


@pytest.fixture(scope="module")
def emb():
    return Embedder(device="cpu")


def make_mem(emb, consolidation="none", rerank_pool: int | None = None, **kw) -> MagmaMemory:
    cfg = load_group("memory", "magma")
    cfg.slow_path.background = False
    if rerank_pool is not None:
        cfg.retrieval.rerank.pool = rerank_pool
    return MagmaMemory(cfg, consolidation, device="cpu", embedder=emb, **kw)


def demo_records(n: int | None = None) -> list[dict]:
    """The first ``n`` turns of every demo conversation, one stream each."""
    return [{"text": t.text, "timestamp": t.timestamp, "speaker": t.speaker, "session_id": t.session_id,
             "source_id": f"{s.sample_id}/{t.source_id}", "stream": s.sample_id}
            for s in load_demo() for t in s.turns[:n]]


@pytest.fixture(scope="module")
def consolidated(emb):
    """Demo turns, heuristic consolidation: the first 60 consolidated, the last 12 still queued."""
    mem = make_mem(emb, "heuristic")
    recs = demo_records(24)
    mem.add_many(recs[:60])
    mem.consolidate()
    mem.add_many(recs[60:])
    yield mem
    mem.close()


# ---- inspect ----

def test_events_lists_what_the_memory_holds_oldest_first(emb):
    with make_mem(emb) as mem:
        later = mem.add("We moved to Lisbon.", "2023-06-02 10:00", speaker="Ann", stream="b",
                        metadata={"mood": "happy"})
        first = mem.add("I adopted a puppy.", "2023-05-08 13:56", speaker="Bo", source_id="D1:1",
                        session_id="s1", stream="a")
        tie = mem.add("Its name is Max.", "2023-05-08 13:56", speaker="Bo", stream="a")
        events = list(mem.events())
        assert [e.id for e in events] == [first, tie, later]           # by timestamp, then id
        e = mem.event(first)
        assert isinstance(e, StoredEvent) and e == events[0]
        assert (e.text, e.speaker, e.source_id, e.session_id, e.stream) == (
            "I adopted a puppy.", "Bo", "D1:1", "s1", "a")
        assert e.timestamp == datetime(2023, 5, 8, 13, 56, tzinfo=timezone.utc)
        assert e.valid_from == e.timestamp and e.valid_to is None
        assert e.episode == int(mem.store.events.episode.data[first])
        assert mem.event(later).metadata == {"mood": "happy"} and e.metadata is None
        assert {ev.status for ev in events} == {"pending"}
        mem.consolidate()
        assert {ev.status for ev in mem.events()} == {"consolidated"}
        with pytest.raises(dataclasses_frozen_error()):
            e.text = "changed"


def test_events_are_read_when_called_not_when_iterated(emb):
    # before: events() was a generator, and an iterator taken before a forget and an add yielded their result
    with make_mem(emb) as mem:
        alpha = mem.add("alpha", "2023-05-01 10:00")
        mem.add("beta", "2023-05-01 10:01")
        taken = mem.events()
        mem.forget(ids=[alpha])
        mem.add("gamma", "2023-05-01 10:02")
        assert [e.text for e in taken] == ["alpha", "beta"]


def dataclasses_frozen_error():
    import dataclasses
    return dataclasses.FrozenInstanceError


@pytest.mark.parametrize("bad", [3, -1, "0", True, 1.0])
def test_an_unknown_event_id_is_named(emb, bad):
    with make_mem(emb) as mem:
        mem.add("hello there", "2023-05-08 13:56")
        with pytest.raises(UnknownEventError) as err:
            mem.event(bad)
        assert isinstance(err.value, KeyError) and repr(bad) in str(err.value) and "\n" not in str(err.value)


# ---- export and import ----

def test_export_then_import_is_exact(consolidated, emb, tmp_path):
    mem = consolidated
    assert mem.stats()["queue"] == 12 and mem.stats()["edges"]["causal"] + mem.stats()["edges"]["entity"] > 0
    path = tmp_path / "mem.jsonl"
    mem.export_jsonl(path)
    lines = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    assert lines[0]["type"] == "header" and lines[0]["namespace"] == "default"
    kinds = [ln["type"] for ln in lines]
    assert kinds.count("event") == len(mem.store) and kinds.count("entity") == len(mem.store.entities)
    assert kinds.count("episode") == len(mem.store.episodes)
    assert sorted(ln["relation"] for ln in lines if ln["type"] == "edges") == sorted(RELATIONS)
    back = MagmaMemory.import_jsonl(path, embedder=emb, device="cpu")
    try:
        assert back.config == mem.config and back.consolidation_config == mem.consolidation_config
        assert_same_store(mem, back)
        assert list(back.events()) == list(mem.events())
        assert_same_retrieval(mem, back)
        back.check()
        # both consolidate the queued events the same way
        mem.consolidate()
        back.consolidate()
        assert_same_store(mem, back)
    finally:
        back.close()


def test_import_into_a_store_dir_and_another_namespace(consolidated, emb, tmp_path):
    path, store = tmp_path / "mem.jsonl", tmp_path / "store"
    consolidated.export_jsonl(path)
    with MagmaMemory.import_jsonl(path, namespace="copy", store_dir=store, durable=True, embedder=emb,
                                  device="cpu") as back:
        assert back.namespace == "copy" and len(back.store) == len(consolidated.store)
    assert MagmaMemory.namespaces(store) == ["copy"]
    with MagmaMemory(store_dir=store, namespace="copy", embedder=emb, device="cpu") as reopened:
        assert_same_store(consolidated, reopened)
        reopened.check()
    with pytest.raises(FileExistsError) as err:
        MagmaMemory.import_jsonl(path, namespace="copy", store_dir=store, embedder=emb, device="cpu")
    assert "'copy'" in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("damage", ["cut", "garble", "header"])
def test_a_damaged_export_is_named(consolidated, emb, tmp_path, damage):
    path = tmp_path / "mem.jsonl"
    consolidated.export_jsonl(path)
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    if damage == "cut":
        lines = lines[:len(lines) // 2]
    elif damage == "garble":
        lines[3] = lines[3][:40] + "\n"
    else:
        lines[0] = lines[0].replace('"magma_torch.jsonl"', '"something.else"')
    path.write_text("".join(lines), encoding="utf-8")
    with pytest.raises(persistence.CorruptSaveError) as err:
        MagmaMemory.import_jsonl(path, embedder=emb, device="cpu")
    assert str(path) in str(err.value) and "\n" not in str(err.value)


def _edit_lines(path, edit) -> None:
    """Apply ``edit`` to the export's lines until one says it made its change."""
    lines = [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines()]
    for obj in lines:
        if edit(obj):
            break
    path.write_text("".join(json.dumps(x) + "\n" for x in lines), encoding="utf-8")


def _entity_edge_to_nowhere(o):
    if o.get("type") == "edges" and o["relation"] == "entity" and o["dst"]:
        o["dst"][0] = 10**6
        return True


def _second_event_takes_the_first_id(o):
    if o.get("type") == "event" and o["id"] == 1:
        o["event_id"] = 0
        return True


def _episode_past_the_table(o):
    if o.get("type") == "event" and o["id"] == 1:
        o["episode"] = 10**6
        return True


def _unknown_event_queued(o):
    if o.get("type") == "slow_path":
        o["queue"] = [10**6]
        return True


@pytest.mark.parametrize("edit", [_entity_edge_to_nowhere, _second_event_takes_the_first_id,
                                  _episode_past_the_table, _unknown_event_queued])
def test_an_export_whose_parts_do_not_hold_together_is_refused(consolidated, emb, tmp_path, edit):
    # Each line parses; what they say together breaks the store's invariants (a hand edit, say):
    # refused naming the file, with none of it stored: a sound export imports there afterwards.
    path, sound, store = tmp_path / "mem.jsonl", tmp_path / "sound.jsonl", tmp_path / "store"
    consolidated.export_jsonl(path)
    consolidated.export_jsonl(sound)
    _edit_lines(path, edit)
    with pytest.raises(persistence.CorruptSaveError) as err:
        MagmaMemory.import_jsonl(path, store_dir=store, embedder=emb, device="cpu")
    assert str(path) in str(err.value) and "\n" not in str(err.value)
    with MagmaMemory.import_jsonl(sound, store_dir=store, embedder=emb, device="cpu") as back:
        assert len(back.store) == len(consolidated.store)


# ---- bad input ----

def test_a_far_future_timestamp_is_refused_and_the_stream_stays_open(emb):
    with make_mem(emb) as mem:
        with pytest.raises(IngestError) as err:
            mem.add("I will retire.", "2099-01-01", source_id="x:1")
        msg = str(err.value)
        assert "source_id='x:1'" in msg and "2099-01-01" in msg and "future_horizon_days" in msg and "\n" not in msg
        assert len(mem.store) == 0
        soon = datetime.now(timezone.utc) + timedelta(days=mem.fast_cfg.future_horizon_days - 1)
        mem.add("Dinner at eight.", soon)
        mem.add("Lunch tomorrow.", soon + timedelta(minutes=1))
        assert len(mem.store) == 2


def test_the_future_horizon_is_a_setting_and_old_stores_without_it_open(emb, tmp_path):
    cfg = load_group("memory", "magma")
    assert cfg.fast_path.future_horizon_days > 0
    cfg.fast_path.future_horizon_days = 40000
    with MagmaMemory(cfg, "none", device="cpu", embedder=emb) as mem:
        mem.add("I will retire.", "2099-01-01")
    # a store checkpointed before the setting existed reopens, with the stored or the default config
    with MagmaMemory(store_dir=tmp_path, durable=True, embedder=emb, device="cpu") as mem:
        mem.add("hello there", "2023-05-08 13:56")
    ckpt = tmp_path / "default" / CHECKPOINT
    saved = persistence.read_save(ckpt)
    del saved.state["config"]["fast_path"]["future_horizon_days"]
    files = {n: (ckpt / n).read_bytes() for n in persistence.FILES}
    files[persistence.STATE] = json.dumps(saved.state).encode()
    persistence.write_save(ckpt, files)
    (tmp_path / "default" / "wal.jsonl").write_bytes(b"")
    for k, config in enumerate((None, "magma")):
        with MagmaMemory(config, store_dir=tmp_path, durable=True, embedder=emb, device="cpu") as mem:
            assert len(mem.store) == 1 + k
            mem.add("again", f"2023-05-08 13:5{7 + k}")


@pytest.mark.parametrize("durable", [False, True])
def test_metadata_that_is_not_json_is_refused_at_add(emb, tmp_path, durable):
    kw = {"store_dir": tmp_path, "durable": True} if durable else {}
    with make_mem(emb, **kw) as mem:
        with pytest.raises(IngestError) as err:
            mem.add_many([{"text": "fine", "timestamp": "2024-01-01"},
                          {"text": "hello", "timestamp": "2024-01-01", "source_id": "x", "metadata": {"obj": object()}}])
        assert "record 1 (source_id='x'): metadata is not JSON" in str(err.value) and "\n" not in str(err.value)
        assert len(mem.store) == 0
        # JSON metadata is stored as JSON gives it back, so save, log and export agree
        mem.add("hello", "2024-01-01", metadata={"tags": ("a", "b"), 1: "one"})
        assert mem.event(0).metadata == {"tags": ["a", "b"], "1": "one"}
        mem.save(tmp_path / "saved")


def test_a_huge_event_is_cut_to_the_budget(emb):
    # RRF's order (no re-ranker): this is about the budget; in a three-event memory the re-ranker's
    # length feature lifts the huge event above the others for any question
    with make_mem(emb, rerank_pool=0) as mem:
        mem.add("I adopted a beagle puppy named Max.", "2023-05-08 13:56", speaker="Ann")
        huge = " ".join(f"Line {i} of the quarterly budget report for the lighthouse." for i in range(2_000))
        assert len(huge) > 100_000
        big = mem.add(huge, "2023-05-08 13:58", speaker="Bo", source_id="big")
        mem.add("We walk Max every morning.", "2023-05-08 14:01", speaker="Ann")
        r = mem.retrieve("What does the quarterly budget report for the lighthouse say?", budget_tokens=500)
        assert r.nodes[0].id == big and r.context_ids == [big]
        assert r.truncated and r.context.count("…[cut]") == 1 and "Line 7 of the quarterly" in r.context
        assert r.context_tokens == count_tokens(r.context) <= 500
        codes = sum(count_tokens(line) for line in r.context.splitlines() if "intermediate event" in line)
        assert r.nodes[0].tokens + codes == r.context_tokens
        # a question the huge event does not lead: nothing is cut, the node tokens still add up
        r = mem.retrieve("When did they walk Max?", budget_tokens=500)
        assert r.nodes[0].id != big and not r.truncated and r.context_tokens <= 500
        kept = r.nodes[:len(r.context_ids)]
        codes = sum(count_tokens(line) for line in r.context.splitlines() if "intermediate event" in line)
        assert {n.id for n in kept} == set(r.context_ids) and sum(n.tokens for n in kept) + codes == r.context_tokens
        assert not mem.retrieve("What does the quarterly budget report say?", budget_tokens=10**6).truncated


def test_a_huge_event_is_cut_in_full_context_mode_too(emb):
    cfg = load_group("memory", "full_context")
    cfg.slow_path.background = False
    with MagmaMemory(cfg, "none", device="cpu", embedder=emb) as mem:
        mem.add("short one", "2023-05-08 13:56")
        mem.add("x " * 50_000, "2023-05-08 13:58")
        r = mem.retrieve("what happened?", budget_tokens=300)
        assert r.truncated and "…[cut]" in r.context and count_tokens(r.context) == r.context_tokens <= 300


def test_the_same_turn_without_source_id_is_added_once(emb):
    with make_mem(emb) as mem:
        turn = {"text": "I adopted a puppy.", "timestamp": "2023-05-08 13:56", "speaker": "Bo", "stream": "a"}
        ids = mem.add_many([turn, dict(turn), {**turn, "speaker": "Ann"}, {**turn, "stream": "b"}])
        assert ids[0] == ids[1] and len(set(ids)) == 3 and len(mem.store) == 3
        assert mem.add(**turn) == ids[0]
        later = mem.add("Its name is Max.", "2023-05-08 14:00", speaker="Bo", stream="a")
        assert mem.add(**turn) == ids[0]              # not refused as going backwards: it is known
        assert mem.add_many([dict(turn)] * 3) == [ids[0]] * 3
        assert len(mem.store) == 4 and later == 3
        assert mem.add(**{**turn, "stream": "c", "source_id": "D1:1"}) != mem.add(**{**turn, "stream": "c"})
        mem.check()


@pytest.mark.parametrize("question", ["", "   \n", None, 42, ["a question"]])
def test_a_bad_question_is_one_line(emb, question):
    with make_mem(emb) as mem:
        mem.add("hello there", "2023-05-08 13:56")
        for call in (lambda: mem.retrieve(question), lambda: mem.retrieve_batch(["fine?", question])):
            with pytest.raises(ValueError) as err:
                call()
            assert "question" in str(err.value) and "\n" not in str(err.value)


def test_a_bad_question_batch_or_query_time_is_a_query_error_naming_it(emb):
    with make_mem(emb) as mem:
        mem.add("hello there", "2023-05-08 13:56")
        with pytest.raises(QueryError, match="one string, not a sequence"):
            mem.retrieve_batch("Where did she go?")              # not five questions, one per letter
        with pytest.raises(QueryError, match="query_time: cannot parse"):
            mem.retrieve("Where did she go?", query_time="garbage")
        with pytest.raises(QueryError, match="query_time of question 1: cannot parse"):
            mem.retrieve_batch(["Where?", "When?"], ["2023-05-09", "garbage"])


@pytest.mark.parametrize("budget, why", [(-3, "must be >= 1, got -3"), (0, "must be >= 1, got 0"),
                                         ("x", "must be a whole number, got 'x'"),
                                         (30.7, "must be a whole number, got 30.7"),
                                         (True, "must be a whole number, got True")])
def test_a_bad_budget_is_a_query_error_naming_it(emb, budget, why):
    # -3 and 0 gave a context of the episode header and "[cut]", "x" a TypeError from inside, 30.7 a
    # context that no cut held to it (52 tokens)
    with make_mem(emb) as mem:
        mem.add("hello there", "2023-05-08 13:56")
        with pytest.raises(QueryError, match=f"^retrieve.budget_tokens: {why}$"):
            mem.retrieve("Where did she go?", budget_tokens=budget)
        assert mem.retrieve("Where did she go?", budget_tokens=None).context_ids   # None: no cut


def test_namespaces_lists_the_tenants(emb, tmp_path):
    with pytest.raises(FileNotFoundError, match="nowhere"):
        MagmaMemory.namespaces(tmp_path / "nowhere")
    assert MagmaMemory.namespaces(tmp_path) == []
    for ns in ("user-42", "alice", "bob.x"):
        with MagmaMemory(store_dir=tmp_path, namespace=ns, embedder=emb, device="cpu") as mem:
            mem.add("hello there", "2023-05-08 13:56")
    (tmp_path / "not-a-tenant").mkdir()
    (tmp_path / "stray.txt").write_text("x")
    assert MagmaMemory.namespaces(tmp_path) == ["alice", "bob.x", "user-42"]


@pytest.mark.parametrize("limit", ["-1", "0"])
def test_a_bad_dataset_limit_is_refused_before_any_work(tmp_path, limit):
    out = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-m", "magma_torch.eval.cli", "dataset=demo", f"dataset.limit={limit}",
                           f"out_dir={out}", "progress=false"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr[-2000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("magma-run: error: dataset.limit") and limit in last and "Traceback" not in proc.stderr
    assert_no_run(out)


def test_one_event_alone_fills_a_small_budget_without_brevity_codes(emb):
    # Before, the codes were charged first: at 20 tokens the context was a header, "…[cut]" and
    # "…5 intermediate events…", at 26 a header and "(D2:1) Melanie: …[cut]". (At 12 the episode
    # header and the cut mark alone are over the budget, the exception linearize documents.)
    with make_mem(emb) as mem:
        mem.add_many([{"text": f"Turn {i}: I painted a sunset by the lake with my friends on a long evening.",
                       "timestamp": f"2023-05-08 13:{i:02d}", "speaker": "Mel"} for i in range(8)])
        for budget in (20, 26, 40):
            r = mem.retrieve("What did Mel paint?", budget_tokens=budget)
            assert len(r.context_ids) == 1 and r.context_tokens == count_tokens(r.context) <= budget
            assert "intermediate event" not in r.context and r.truncated
        assert "Mel: Turn" in r.context          # at 40 the text begins to show
