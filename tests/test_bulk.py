"""ingest.bulk: edges are validated before anything is written."""
from __future__ import annotations

import threading

import pytest
import torch

from magma_torch.ingest import bulk
from magma_torch.ingest.fast_path import IngestError
from magma_torch.query.beam import entity_specificity
from magma_torch.store import integrity
from magma_torch.store.store import MemoryStore
from magma_torch.store.tables import EventRow


@pytest.mark.parametrize("bad", [{"text": None},
                                 {"dates": [{"expression": "x", "label": "x", "start": "2023-02-30",
                                             "end": "2023-02-30"}]}])
def test_a_row_that_fails_leaves_the_store_as_it_was(bad):
    """A row whose text is not a string or whose date does not parse is refused naming it, before the
    first write: before, its embedding, id and time were written and not its row (a bare error), so the
    next event read its vector."""
    store = MemoryStore(dim=4)
    emb = torch.nn.functional.normalize(torch.randn(3, 4, generator=torch.Generator().manual_seed(0)), dim=1)
    bulk.add_events(store, [EventRow(text="turn 0", timestamp=1000.0, stream="s")], emb[:1])
    with pytest.raises(IngestError, match=r"^event 0: (text is a NoneType|a date of its dates cannot be read)"):
        bulk.add_events(store, [EventRow(**{"text": "turn 1", "timestamp": 1001.0, "stream": "s", **bad})], emb[1:2],
                        tokens=[["turn"]])
    bulk.add_events(store, [EventRow(text="turn 2", timestamp=1002.0, stream="s")], emb[2:])
    assert len(store.events) == 2 and torch.equal(store.events.embeddings.data[1], emb[2])
    assert integrity.problems(store) == []


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_a_weight_that_is_not_a_finite_number_is_refused_and_nothing_is_written(bad):
    # before: accepted, integrity.check then flagged it and the memory's save no longer loaded
    store = MemoryStore(dim=4)
    emb = torch.nn.functional.normalize(torch.randn(3, 4, generator=torch.Generator().manual_seed(0)), dim=1)
    bulk.add_events(store, [EventRow(text=f"turn {i}", timestamp=1000.0 + i, stream="s") for i in range(3)], emb)
    with pytest.raises(IngestError, match=rf"semantic edges: edge 1 \(2 -> 1\) has weight {bad}, not a finite"):
        bulk.add_links(store, semantic=(torch.tensor([1, 2]), torch.tensor([0, 1]), torch.tensor([0.5, bad])))
    assert store.graph.num_edges("semantic") == 0 and integrity.problems(store) == []


def test_a_repeated_causal_edge_is_refused_and_nothing_of_the_batch_is_written():
    """The causal graph holds each (cause, effect) once: a repeat within a call, or of an edge
    already stored, is refused naming it, and the batch's other edges are not written."""
    # before: both were accepted, and integrity.check then reported 'causal edge 0 -> 1 appears 2 times'
    store = MemoryStore(dim=4)
    emb = torch.nn.functional.normalize(torch.randn(3, 4, generator=torch.Generator().manual_seed(0)), dim=1)
    bulk.add_events(store, [EventRow(text=f"turn {i}", timestamp=1000.0 + i, stream="s") for i in range(3)], emb)
    with pytest.raises(IngestError, match=r"causal edge 2 \(0 -> 1\) repeats an earlier edge of this call"):
        bulk.add_links(store, causal=(torch.tensor([0, 1, 0]), torch.tensor([1, 2, 1])))
    assert store.graph.num_edges("causal") == 0
    bulk.add_links(store, causal=(torch.tensor([1]), torch.tensor([2])))
    with pytest.raises(IngestError, match=r"causal edge 1 \(1 -> 2\) is already stored"):
        bulk.add_links(store, causal=(torch.tensor([0, 1]), torch.tensor([1, 2])))
    src, dst, _ = store.graph.edges("causal")
    assert list(zip(src.tolist(), dst.tolist(), strict=True)) == [(1, 2)]
    assert integrity.problems(store) == []


def test_a_causal_link_the_slow_path_stores_during_the_check_is_not_stored_twice(monkeypatch):
    """The slow path writes links under the store's lock (worker._write, after has_causal); add_links
    checks and writes under one hold of it, so a link stored meanwhile is not written again."""
    # before: the check ran outside the lock; the link was written by both, and integrity.check
    # reported 'causal edge 1 -> 2 appears 2 times'
    store = MemoryStore(dim=4)
    emb = torch.nn.functional.normalize(torch.randn(3, 4, generator=torch.Generator().manual_seed(0)), dim=1)
    bulk.add_events(store, [EventRow(text=f"turn {i}", timestamp=1000.0 + i, stream="s") for i in range(3)], emb)

    def slow_path_write():
        with store.lock:
            if not store.graph.has_causal(1, 2):
                store.graph.add_edges("causal", torch.tensor([1]), torch.tensor([2]), torch.tensor([0.9]))

    checked, writer = bulk._checked_links, threading.Thread(target=slow_path_write)

    def check_then_let_the_slow_path_run(*args):
        out = checked(*args)
        writer.start()
        writer.join(timeout=1.0)      # it waits for the lock, if add_links holds it
        return out

    monkeypatch.setattr(bulk, "_checked_links", check_then_let_the_slow_path_run)
    bulk.add_links(store, causal=(torch.tensor([1]), torch.tensor([2])))
    writer.join()
    assert store.graph.num_edges("causal") == 1
    assert integrity.problems(store) == []


def test_a_repeated_mention_or_semantic_edge_is_refused_and_nothing_of_the_batch_is_written():
    """A mention repeated within a call or already stored, and a semantic edge repeated within a call,
    are refused naming them: a repeat counted its event twice in the entity's degree (halving the
    entity's specificity in the beam) or in the event's semantic neighbours."""
    # before: all were written; integrity.check saw nothing, and an entity one event mentioned twice
    # had specificity 0.5, not 1.0
    store = MemoryStore(dim=4)
    emb = torch.nn.functional.normalize(torch.randn(4, 4, generator=torch.Generator().manual_seed(0)), dim=1)
    bulk.add_events(store, [EventRow(text=f"turn {i}", timestamp=1000.0 + i, stream="s") for i in range(4)], emb)
    bulk.add_entities(store, ["alice", "bob"], torch.nn.functional.normalize(torch.ones(2, 4), dim=1))
    with pytest.raises(IngestError, match=r"entity edge 2 \(0 -> 1\) repeats an earlier edge of this call"):
        bulk.add_links(store, semantic=(torch.tensor([3]), torch.tensor([1]), torch.tensor([0.9])),
                       mentions=(torch.tensor([0, 2, 0]), torch.tensor([1, 1, 1])))
    with pytest.raises(IngestError, match=r"semantic edge 1 \(3 -> 1\) repeats an earlier edge of this call"):
        bulk.add_links(store, semantic=(torch.tensor([3, 3]), torch.tensor([1, 1]), torch.tensor([0.9, 0.8])))
    assert store.graph.num_edges("entity") == store.graph.num_edges("semantic") == 0
    bulk.add_links(store, mentions=(torch.tensor([0]), torch.tensor([1])))
    with pytest.raises(IngestError, match=r"entity edge 1 \(0 -> 1\) is already stored"):
        bulk.add_links(store, mentions=(torch.tensor([2, 0]), torch.tensor([1, 1])))
    assert store.graph.num_edges("entity") == 1
    assert entity_specificity(store.snapshot().graph, torch.tensor([1]), 4).tolist() == [1.0]
    assert integrity.problems(store) == []
