"""Out-of-order adds (issue 13): refused by default with an error that says how to backfill;
with ``backfill=True`` the event is inserted at its place in its stream's temporal chain, joins
an episode, gets semantic edges and is queued, other events keep their ids, and a durable
memory replays it."""
from __future__ import annotations

import json
from collections import defaultdict
from datetime import timedelta

import pytest

from magma_torch import MagmaMemory
from magma_torch.config import load_group
from magma_torch.eval.datasets import load_demo
from magma_torch.ingest.backfill import place
from magma_torch.ingest.episodes import EpisodeConfig
from magma_torch.ingest.fast_path import IngestError
from magma_torch.store.durable import WAL
from magma_torch.store.tables import EventRow
from magma_torch.testing import abandon, assert_same_store, store_tensors
from magma_torch.text.embedder import Embedder


@pytest.fixture(scope="module")
def emb():
    return Embedder(device="cpu")


def config():
    cfg = load_group("memory", "magma")
    cfg.slow_path.background = False
    return cfg


def demo_records(n: int) -> list[dict]:
    """The first ``n`` turns of each demo conversation (one stream each), a minute apart (a session's
    turns share its time: an out-of-order turn must be older than the stream's last one)."""
    return [{"text": t.text, "timestamp": t.timestamp + timedelta(minutes=k), "speaker": t.speaker,
             "session_id": t.session_id, "source_id": f"{s.sample_id}/{t.source_id}", "stream": s.sample_id}
            for s in load_demo() for k, t in enumerate(s.turns[:n])]


def chains(mem) -> dict[str, list[str]]:
    """Each stream's texts along its temporal chain (prev/next pointers)."""
    ev, out = mem.store.events, {}
    for stream, last in ev.last_of_stream.items():
        texts, cur = [], last
        while cur >= 0:
            texts.append(ev.rows[cur].text)
            cur = int(ev.prev.data[cur])
        out[stream] = texts[::-1]
    return out


def episode_partition(mem) -> set[frozenset[str]]:
    """The episodes as sets of their events' source ids."""
    ev, members = mem.store.events, defaultdict(set)
    for row, e in enumerate(ev.episode.data.tolist()):
        members[e].add(ev.rows[row].source_id)
    return {frozenset(m) for m in members.values()}


def tensors(mem) -> dict[str, list]:
    return {k: v.nan_to_num(-1.0).tolist() for k, v in store_tensors(mem).items()}


def test_an_out_of_order_add_names_the_stream_and_how_to_backfill(emb):
    recs = demo_records(4)
    with MagmaMemory(config(), "none", embedder=emb, device="cpu") as mem:
        mem.add_many(recs)
        before = tensors(mem)
        last = mem.event(3)   # the first stream's last event
        with pytest.raises(IngestError) as err:
            mem.add("Earlier.", "2020-01-01 09:00", stream=last.stream)
        assert str(err.value) == (f"record 0: timestamp 2020-01-01T09:00:00 goes backwards in stream {last.stream!r} "
                                  f"(last event {last.timestamp:%Y-%m-%dT%H:%M:%S}); pass backfill=True to insert it "
                                  "at its place")
        assert tensors(mem) == before and len(mem.store) == len(recs)
        with pytest.raises(IngestError, match="record 1: text is empty"):   # backfill validates as add does
            mem.add_many([{"text": "Earlier.", "timestamp": "2020-01-01", "stream": last.stream},
                          {"text": " ", "timestamp": "2020-01-01"}], backfill=True)
        assert tensors(mem) == before and len(mem.store) == len(recs)


def test_a_backfilled_event_takes_its_place(emb):
    """Turn 5 of each conversation arrives last: backfilled, the memory has the chains and episodes of
    one that got every turn in time order, the other events keep their ids, and the event is
    linked, queued, retrieved and shown in time order."""
    recs = demo_records(12)
    late = [r for r in recs if r["source_id"].endswith(":5")]
    assert len(late) == 3
    with MagmaMemory(config(), "heuristic", embedder=emb, device="cpu") as mem, \
            MagmaMemory(config(), "heuristic", embedder=emb, device="cpu") as ordered:
        ids = mem.add_many([r for r in recs if r not in late])
        mem.consolidate()
        ordered.add_many(recs)
        got = mem.add_many(late, backfill=True)
        assert got == list(range(len(ids), len(recs)))   # fresh ids
        assert [mem.store.events.row_of[i] for i in ids] != list(range(len(ids)))   # rows moved ...
        assert [mem.event(i).source_id for i in ids] == [r["source_id"] for r in recs if r not in late]  # ... ids not
        mem.check()
        assert chains(mem) == chains(ordered)
        assert episode_partition(mem) == episode_partition(ordered)
        assert [e.source_id for e in mem.events()] == [e.source_id for e in ordered.events()]
        # queued: the three, and the 6 events after each (consolidation.window), whose causal links are drawn again
        assert [mem.event(i).status for i in got] == ["pending"] * 3 and mem.stats()["queue"] == 3 + 3 * 6
        rows = [mem.store.events.row_of[i] for i in got]
        src, dst, _ = mem.store.graph.edges("semantic")
        for r in rows:
            assert 0 < int((src == r).sum()) <= 10 and bool((dst[src == r] < r).all())
        mem.consolidate()
        mem.check()
        target = late[0]
        r = mem.retrieve(target["text"])
        assert got[0] in [n.id for n in r.nodes][:3]
        at = recs.index(target)   # shown between its stream's turns 4 and 6 (the context cites source ids)
        cited = [r.context.index(f"({recs[i]['source_id']})") for i in (at - 1, at, at + 1)]
        assert cited == sorted(cited)


def test_backfill_batches_across_streams_in_one_rebuild(emb):
    """One call backfills events of several streams (one older than a stream's first event, two into
    one gap, one after its stream's end, one in a new stream); a known source id is not added
    twice; a batch in time order is appended exactly as without backfill."""
    recs = demo_records(10)
    streams = list(dict.fromkeys(r["stream"] for r in recs))
    first_of = {s: next(r for r in recs if r["stream"] == s) for s in streams}
    extra = [{**first_of[streams[0]], "text": "Before it all began.", "source_id": "x0",
              "timestamp": "2020-01-01 08:00"},
             {**recs[3], "text": "In a gap, first.", "source_id": "x1"},
             {**recs[3], "text": "In a gap, second.", "source_id": "x2"},
             {"text": "A new stream.", "timestamp": "2021-01-01", "stream": "fresh", "source_id": "x3"},
             recs[5]]
    with MagmaMemory(config(), "none", embedder=emb, device="cpu") as mem, \
            MagmaMemory(config(), "none", embedder=emb, device="cpu") as ordered:
        ids = mem.add_many(recs)
        got = mem.add_many(extra, backfill=True)
        assert got == [len(recs), len(recs) + 1, len(recs) + 2, len(recs) + 3, ids[5]]
        mem.check()
        chain = chains(mem)[streams[0]]
        assert chain[0] == "Before it all began."
        assert chain[4:7] == [recs[3]["text"], "In a gap, first.", "In a gap, second."]
        assert chains(mem)["fresh"] == ["A new stream."]
        ordered.add_many(sorted(recs + extra[:4], key=lambda r: (r["stream"], str(r["timestamp"]))))
        assert chains(mem) == chains(ordered)
        assert episode_partition(mem) == episode_partition(ordered)
    with MagmaMemory(config(), "heuristic", embedder=emb, device="cpu") as a, \
            MagmaMemory(config(), "heuristic", embedder=emb, device="cpu") as b:
        assert a.add_many(recs, backfill=True) == b.add_many(recs)
        assert_same_store(a, b)


def test_backfill_episode_rule():
    """Inside an episode: that episode; else the predecessor's when it continues it, else the
    successor's, else one of its own."""
    cfg = EpisodeConfig(max_gap_hours=1.0)

    def row(hour: float, session: str | None = None) -> EventRow:
        return EventRow(text=f"t{hour}", timestamp=hour * 3600, stream="s", session_id=session)

    stored = [row(0), row(0.5), row(5), row(5.5)]            # episodes 0 (0, 0.5) and 1 (5, 5.5)
    placed = place(stored, [0, 0, 1, 1], 2, [row(0.2), row(1.2), row(4.5), row(3), row(-3), row(2.8)], cfg)
    assert placed.episode == [0, 0, 1, 3, 2, 3] and placed.new_episodes == 2
    assert placed.order == [8, 0, 4, 1, 5, 9, 7, 6, 2, 3]
    other_session = place(stored, [0, 0, 1, 1], 2, [row(4.5, session="b")], EpisodeConfig(max_gap_hours=1.0))
    assert other_session.episode == [1]   # no session on the stored events: nothing to differ from
    stored_sessions = [row(0, "a"), row(5, "c")]
    assert place(stored_sessions, [0, 1], 2, [row(4.5, "b")], cfg).episode == [2]


def test_a_backfill_replays_from_the_log(emb, tmp_path):
    """Killed after a logged backfill and before a checkpoint: reopening replays it and gives the
    memory that never crashed."""
    recs = demo_records(10)
    late = [r for r in recs if r["source_id"].endswith(":4")]
    early = [r for r in recs if r not in late]
    mem = MagmaMemory(config(), "heuristic", store_dir=tmp_path, durable=True, embedder=emb, device="cpu")
    mem.add_many(early)
    mem.consolidate()                     # checkpointed; the backfill and the add after it are only logged
    mem.add_many(late, backfill=True)
    mem.add("One more turn.", recs[-1]["timestamp"], stream=recs[-1]["stream"])
    abandon(mem)
    log = (tmp_path / "default" / WAL).read_text().splitlines()
    logged = [json.loads(line.split(" ", 2)[2])["op"] for line in log]   # framed: size, crc, record
    assert logged == ["backfill", "add"]
    with MagmaMemory(store_dir=tmp_path, durable=True, embedder=emb, device="cpu") as back, \
            MagmaMemory(config(), "heuristic", embedder=emb, device="cpu") as never:
        back.check()
        never.add_many(early)
        never.consolidate()
        never.add_many(late, backfill=True)
        never.add("One more turn.", recs[-1]["timestamp"], stream=recs[-1]["stream"])
        assert_same_store(back, never)
        back.consolidate()
        never.consolidate()
        assert_same_store(back, never)


def semantic_pairs(mem) -> set[tuple[str, str]]:
    """The semantic edges, as (source id, source id)."""
    src, dst, _ = mem.store.graph.edges("semantic")
    rows = mem.store.events.rows
    return {(rows[s].source_id, rows[d].source_id) for s, d in zip(src.tolist(), dst.tolist(), strict=True)}


def test_a_backfill_gives_the_semantic_edges_of_an_in_order_ingest(emb):
    # A late event can be one of a later event's nearest earlier events: those edges are derived again.
    recs = [r for r in demo_records(12) if r["stream"] == load_demo()[0].sample_id]
    late = [recs[3], recs[7]]
    with MagmaMemory(config(), "none", embedder=emb, device="cpu") as mem, \
            MagmaMemory(config(), "none", embedder=emb, device="cpu") as fresh:
        mem.add_many([r for r in recs if r not in late])
        mem.add_many(late, backfill=True)
        fresh.add_many(recs)
        assert semantic_pairs(mem) == semantic_pairs(fresh)
        mem.check()
