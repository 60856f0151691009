"""Readers running while writers add, the slow path consolidates and checkpoints land see
consistent stores: no torn CSR views, no index/graph mismatch, nothing dangling."""
import subprocess
import sys
import threading

import pytest
import torch

from magma_torch import MagmaError, MagmaMemory, lifecycle
from magma_torch.config import load_group
from magma_torch.eval.datasets import load_demo
from magma_torch.text.embedder import Embedder

WRITERS, READERS = 2, 2


@pytest.fixture(scope="module")
def embedder():
    return Embedder()


def verify_snapshot(mem: MagmaMemory) -> None:
    """A snapshot taken under the lock still matches the counts of that moment after
    writers have moved on: its views are immutable and agree with the edge tensors."""
    with mem.store.lock:
        snap = mem.store.snapshot()
        counts = mem.store.graph.counts()
        n_vec, n_kw = len(mem.store.vector_index), len(mem.store.keyword_index)
    n, m = snap.num_events, snap.num_entities
    assert n_vec == n_kw == n
    g = snap.graph
    assert int(g.event_adj.degree(torch.arange(n)).sum()) == 2 * (counts["temporal"] + counts["semantic"]
                                                                  + counts["causal"])
    assert int(g.event_entity.degree(torch.arange(n)).sum()) == counts["entity"]
    assert int(g.entity_event.degree(torch.arange(m)).sum()) == counts["entity"]
    _, nbrs, _ = g.event_adj.gather(torch.arange(n))
    _, ents, _ = g.event_entity.gather(torch.arange(n))
    assert bool((nbrs < n).all()) and bool((ents < m).all())
    if n:
        _, ids = snap.vector_index.search(snap.embeddings[:1], 5, upto=n)
        assert bool((ids < n).all())


def test_readers_see_consistent_graphs_while_writers_add_and_consolidate(embedder, tmp_path):
    cfg = load_group("memory", "magma")
    cfg.slow_path.background = True
    cfg.slow_path.batch_size = 8
    cfg.durability.checkpoint_every = 10
    turns = [(s.sample_id, t) for s in load_demo() for t in s.turns]
    questions = [q.question for s in load_demo() for q in s.questions]
    ops = {"adds": 0, "retrievals": 0, "snapshots": 0, "checks": 0, "checkpoints": 0}
    errors: list[BaseException] = []
    done = threading.Event()
    lock = threading.Lock()

    def count(key, k=1):
        with lock:
            ops[key] += k

    def guarded(fn):
        def run(*args):
            try:
                fn(*args)
            except BaseException as err:  # surfaced by the main thread
                errors.append(err)
                done.set()
        return run

    mem = MagmaMemory(cfg, store_dir=tmp_path, durable=True, embedder=embedder)

    @guarded
    def writer(w):
        mine = turns[w::WRITERS]
        for a in range(0, len(mine), 4):
            if done.is_set():
                return
            mem.add_many([{"text": t.text, "timestamp": t.timestamp, "speaker": t.speaker,
                           "source_id": f"{w}/{sid}/{t.source_id}", "stream": f"{w}/{sid}"}
                          for sid, t in mine[a:a + 4]])
            count("adds", len(mine[a:a + 4]))

    @guarded
    def reader(r):
        i = r
        while not done.is_set():
            res = mem.retrieve_batch(questions[i % len(questions): i % len(questions) + 3])
            for x in res:
                rows = mem.store.events.rows
                for node in x.nodes:
                    assert node.text == rows[node.id].text and node.source_ids == [rows[node.id].source_id]
                for p in x.paths:
                    assert 0 <= p.src < len(rows) and 0 <= p.dst < len(rows)
            count("retrievals", len(res))
            verify_snapshot(mem)
            count("snapshots")
            i += 3

    @guarded
    def checker():
        while not done.is_set():
            mem.check()
            count("checks")
            if ops["checks"] % 3 == 0:
                mem.checkpoint()
                count("checkpoints")
            done.wait(0.05)

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(WRITERS)]
    threads += [threading.Thread(target=reader, args=(r,)) for r in range(READERS)]
    threads.append(threading.Thread(target=checker))
    for t in threads:
        t.start()
    for t in threads[:WRITERS]:
        t.join()
    mem.consolidate()
    done.set()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    mem.check()
    assert mem.stats()["events"] == len(turns) == ops["adds"]
    assert set(s for s, _ in mem.worker.status.values()) == {"consolidated"}
    mem.close()
    with MagmaMemory(store_dir=tmp_path, durable=True, embedder=embedder) as back:
        back.check()
        assert back.stats() == mem.stats() | {"queue": 0}
    print(f"\nconcurrency: {sum(ops.values())} operations: {ops}")
    assert ops["retrievals"] > 0 and ops["snapshots"] > 0 and ops["checks"] > 0


def test_retrieve_during_forget_never_returns_an_event_forgotten_before_it_started(embedder):
    """Readers retrieve while forgets run (the background worker consolidating meanwhile): a
    retrieval never returns an event whose forget had returned before it started."""
    recs = [{"text": t.text, "timestamp": t.timestamp, "speaker": t.speaker, "source_id": f"{s.sample_id}/{t.source_id}",
             "stream": s.sample_id} for s in load_demo() for t in s.turns[:30]]
    questions = [q.question for s in load_demo() for q in s.questions][:12]
    with MagmaMemory(load_group("memory", "magma"), "heuristic", embedder=embedder, device="cpu") as mem:
        ids = mem.add_many(recs)
        gone: list[set[int]] = [set()]     # gone[k]: ids whose forget had returned after k forgets
        errors, done, reads = [], threading.Event(), [0]

        def reader(offset):
            try:
                k = offset
                while not done.is_set():
                    forgotten = gone[-1]
                    r = mem.retrieve(questions[k % len(questions)])
                    hit = forgotten & ({n.id for n in r.nodes} | {a.id for a in r.anchors} | set(r.context_ids))
                    assert not hit, f"retrieved forgotten events {hit}"
                    k += 1
                    reads[0] += 1
            except BaseException as err:
                errors.append(err)

        threads = [threading.Thread(target=reader, args=(i,)) for i in range(2)]
        for t in threads:
            t.start()
        try:
            for batch in (ids[1:60:4], ids[2:60:4], ids[60::3]):
                out = mem.forget(ids=batch)
                gone.append(gone[-1] | set(out.ids))
        finally:
            done.set()
            for t in threads:
                t.join()
        assert not errors, errors[0]
        assert reads[0] > 0
        mem.worker.drain()
        mem.check()
    print(f"\nforget under readers: {reads[0]} retrievals during 3 forgets of {len(gone[-1])} events, "
          "none returned after its forget")



# Run in a child process: a deadlock cannot be undone, and a hung thread holding the worker's lock
# would hang this process's exit too; the child reports and leaves with os._exit.
_DEADLOCK_CHILD = """
import os, threading
from magma_torch import MagmaError, MagmaMemory, lifecycle
mem = MagmaMemory(config={"slow_path": {"background": True}}, consolidation="none")
mem.add_many([{"text": f"turn {i}", "timestamp": 1_700_000_000 + i, "stream": "s"} for i in range(5)])
mem.worker.drain()
reader_holds_the_store, go_on, statuses = threading.Event(), threading.Event(), []

def reader():   # events()' order: the store's lock, then the worker's
    with mem.store.lock:
        reader_holds_the_store.set()
        go_on.wait(timeout=60)
        statuses.append(mem.worker.statuses(range(5)))

r = threading.Thread(target=reader, daemon=True)
r.start()
reader_holds_the_store.wait(timeout=60)
checker = threading.Thread(target=mem.check, daemon=True)   # check(): paused(), then the store's lock
checker.start()
while mem.worker._holds == 0:
    checker.join(timeout=0.01)
go_on.set()
r.join(timeout=30)
checker.join(timeout=30)
print("deadlock" if r.is_alive() or checker.is_alive() else [s for s, _ in statuses[0]], flush=True)
os._exit(0)
"""


def test_listing_events_while_another_thread_checks_the_memory_does_not_deadlock():
    """``events()`` holds the store's lock and then asks the worker for statuses; ``check()`` (and
    save, forget, update) pauses the worker and then takes the store's lock. The pause no longer
    holds the worker's lock inside it, so the two cannot wait on each other."""
    # before: paused() held the worker's lock for its whole block: "deadlock" here, and two threads
    # listing events and checking in loops deadlocked within seconds
    proc = subprocess.run([sys.executable, "-c", _DEADLOCK_CHILD], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == str(["consolidated"] * 5)


# ---------------------------------------------------------------- close() racing other threads


def background(**durability):
    cfg = load_group("memory", "magma")
    cfg.slow_path.background = True
    cfg.slow_path.batch_size = 4
    for k, v in durability.items():
        cfg.durability[k] = v
    return cfg


def turn(i: int) -> dict:
    return {"text": f"Turn {i}: we talked about the garden and the violin.", "timestamp": 1_683_500_000 + 60 * i,
            "speaker": "Ann" if i % 2 else "Bob"}


def slowed(mem: MagmaMemory, seconds: float) -> None:
    """Each slow-path batch takes ``seconds`` longer, so that a queue is still there when the test acts."""
    propose = mem.worker.consolidator.propose

    def slow(*args):
        threading.Event().wait(seconds)
        return propose(*args)
    mem.worker.consolidator.propose = slow


def test_an_add_during_close_is_kept_or_refused_and_close_checkpoints_the_finished_queue(embedder, tmp_path):
    """Before, close() checkpointed first and then marked the memory closed: an add in between was acknowledged
    and, with no log (store_dir without durable), gone on reopening; and the consolidation close() then waited
    for never reached the checkpoint, so it was done again on reopening."""
    mem = MagmaMemory(background(), store_dir=tmp_path, embedder=embedder)
    slowed(mem, 0.3)
    mem.add_many([turn(i) for i in range(12)])      # three batches: still queued when close() begins
    outcome = {}

    def add_late():
        try:
            outcome["id"] = mem.add(**turn(100))
        except MagmaError as err:
            outcome["refused"] = err

    write = mem._folder.checkpoint
    late = threading.Thread(target=add_late)

    def checkpoint_with_an_add_in_flight(encode):
        late.start()
        late.join(0.2)       # it waits for close to finish
        write(encode)
    mem._folder.checkpoint = checkpoint_with_an_add_in_flight
    mem.close()
    late.join()
    assert "refused" in outcome and "this memory is closed" in str(outcome["refused"])
    view = MagmaMemory.open_readonly(tmp_path, embedder=embedder)
    assert len(list(view.events())) == 12
    assert {e.status for e in view.events()} == {"consolidated"}, "close() did not checkpoint its last consolidation"
    view.close()


def test_a_change_that_raced_close_is_applied_and_not_reported_refused(embedder, tmp_path):
    """Before, forget (and add or update at a due checkpoint) ended with a checkpoint taken after it released
    the ingest lock: a close() in between made that checkpoint raise MemoryClosedError for a change that was
    applied and kept; and update read its event back there, after a forget in another thread could take it."""
    mem = MagmaMemory(background(checkpoint_every=1), store_dir=tmp_path, durable=True, embedder=embedder)
    ids = mem.add_many([turn(i) for i in range(6)])
    after_change = mem._checkpoint_after_change

    def close_first(**kw):
        closing = threading.Thread(target=mem.close)
        closing.start()
        closing.join()
        after_change(**kw)
    mem._checkpoint_after_change = close_first
    assert mem.forget([ids[0]]).ids == (ids[0],)
    with MagmaMemory(store_dir=tmp_path, durable=True, embedder=embedder) as again:
        assert [e.id for e in again.events()] == ids[1:]
        forgetting = []
        update_row = lifecycle.update_row

        def update_then_forget(*args):    # a forget of the same event from another thread, as the update lands
            forgetting.append(threading.Thread(target=again.forget, args=([ids[1]],)))
            forgetting[0].start()
            return update_row(*args)
        lifecycle.update_row = update_then_forget
        try:
            assert again.update(ids[1], text="Turn 1: we talked about the cello.").text.endswith("cello.")
        finally:
            lifecycle.update_row = update_row
        forgetting[0].join()
        assert ids[1] not in [e.id for e in again.events()]


def test_consolidate_waiting_while_the_memory_is_closed_without_its_queue_ends(embedder):
    """Before, consolidate() waited for an empty queue that a close(finish_queue=False) (or interpreter exit)
    leaves full: it never returned."""
    mem = MagmaMemory(background(), embedder=embedder)
    slowed(mem, 0.2)
    mem.add_many([turn(i) for i in range(20)])
    outcome = {}

    def consolidate():
        try:
            mem.consolidate()
            outcome["returned"] = True
        except MagmaError as err:
            outcome["refused"] = err

    waiting = threading.Thread(target=consolidate, daemon=True)
    waiting.start()
    threading.Event().wait(0.1)
    mem.close(finish_queue=False)
    waiting.join(30)      # a hang guard only: it ends with the batch in flight
    assert not waiting.is_alive()
    assert "closed while consolidate() waited" in str(outcome.get("refused"))


def test_two_threads_closing_a_durable_memory_at_once(embedder, tmp_path):
    """Before, both passed the closed test: the second raised MemoryClosedError from its checkpoint, or both
    closed the log's descriptor (OSError: Bad file descriptor)."""
    mem = MagmaMemory(background(), store_dir=tmp_path, durable=True, embedder=embedder)
    mem.add_many([turn(i) for i in range(4)])
    write = mem._folder.checkpoint

    def slow_checkpoint(encode):
        threading.Event().wait(0.2)    # the other close arrives meanwhile
        write(encode)
    mem._folder.checkpoint = slow_checkpoint
    errors = []

    def close():
        try:
            mem.close()
        except BaseException as err:   # noqa: BLE001 - any error is the failure
            errors.append(err)
    closers = [threading.Thread(target=close) for _ in range(2)]
    for t in closers:
        t.start()
    for t in closers:
        t.join()
    assert errors == []
    with MagmaMemory(store_dir=tmp_path, durable=True, embedder=embedder) as again:
        assert len(list(again.events())) == 4
