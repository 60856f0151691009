"""save/load: an exact round trip (store, indexes, queue, consolidator), verified and atomic."""
import json
import math
import os
import re
import shutil
import time
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from magma_torch import MagmaMemory
from magma_torch.config import load_group
from magma_torch.eval.datasets import load_demo
from magma_torch.ingest import bulk
from magma_torch.memory import saved_config
from magma_torch.store import persistence
from magma_torch.ingest.fast_path import IngestError
from magma_torch.store.persistence import CorruptSaveError, SaveNotFoundError
from magma_torch.store.store import MemoryStore
from magma_torch.store.tables import EventRow
from magma_torch.testing import assert_same_retrieval, assert_same_store
from magma_torch.text.embedder import Embedder

@pytest.fixture(scope="module")
def embedder():
    return Embedder()


def records():
    """All demo conversations in one memory (source ids made unique across them)."""
    return [{"text": t.text, "timestamp": t.timestamp, "speaker": t.speaker, "session_id": t.session_id,
             "source_id": f"{s.sample_id}/{t.source_id}", "stream": s.sample_id}
            for s in load_demo() for t in s.turns]


def new_memory(embedder, background: bool = False) -> MagmaMemory:
    cfg = load_group("memory", "magma")
    cfg.slow_path.background = background  # False: nothing is consolidated until consolidate()
    return MagmaMemory(cfg, embedder=embedder)


def half_consolidated(embedder) -> MagmaMemory:
    """The demo memory with its first half consolidated and the second half queued."""
    mem = new_memory(embedder)
    recs = records()
    mem.add_many(recs[: len(recs) // 2])
    mem.consolidate()
    mem.add_many(recs[len(recs) // 2:])
    assert 0 < mem.stats()["queue"] < len(recs)
    return mem


@pytest.fixture
def half(embedder):
    mem = half_consolidated(embedder)
    yield mem
    mem.close()


@pytest.fixture(scope="module")
def saved(embedder, tmp_path_factory):
    """A save of ``half_consolidated`` that tests copy before damaging it."""
    path = tmp_path_factory.mktemp("saved") / "mem"
    with half_consolidated(embedder) as mem:
        mem.save(path)
    return path


def test_round_trip_is_exact(half, embedder, tmp_path):
    half.save(tmp_path / "mem")
    assert sorted(p.name for p in (tmp_path / "mem").iterdir()) == sorted((*persistence.FILES, persistence.MANIFEST))
    loaded = MagmaMemory.load(tmp_path / "mem", embedder=embedder)
    try:
        assert loaded.namespace == half.namespace and loaded.config == half.config
        assert loaded.consolidation_config == half.consolidation_config
        assert_same_store(half, loaded)
        assert_same_retrieval(half, loaded)
    finally:
        loaded.close()


def test_pending_queue_resumes_after_load(half, embedder, tmp_path):
    half.save(tmp_path / "mem")
    loaded = MagmaMemory.load(tmp_path / "mem", embedder=embedder)
    try:
        assert loaded.stats()["queue"] == half.stats()["queue"] > 0
        before = loaded.stats()
        half.consolidate()
        loaded.consolidate()
        after = loaded.stats()
        assert after["queue"] == 0 and after["entities"] > before["entities"]
        assert after["edges"]["entity"] > before["edges"]["entity"]
        assert_same_store(half, loaded)
        assert_same_retrieval(half, loaded)
    finally:
        loaded.close()


def test_save_while_the_background_worker_runs(embedder, tmp_path):
    """A save waits for the batch in flight and stops the next one starting, so its queue,
    consolidator state and graph agree: load + consolidate ends where the original does."""
    with new_memory(embedder, background=True) as mem:
        mem.add_many(records())
        deadline = time.monotonic() + 60
        while mem.worker.status[0][0] == "pending" and time.monotonic() < deadline:
            time.sleep(0.001)  # let the first batch land, so the save comes mid-queue
        mem.save(tmp_path / "mem")
        saved = persistence.read_save(tmp_path / "mem").state["worker"]
        assert saved["queue"] and "consolidated" in {s for s, _ in saved["status"]}
        with MagmaMemory.load(tmp_path / "mem", embedder=embedder) as loaded:
            mem.consolidate()
            loaded.consolidate()
            assert_same_store(mem, loaded)


def test_odd_text_metadata_and_empty_memory(embedder, tmp_path):
    mem = new_memory(embedder)
    mem.save(tmp_path / "empty")
    empty = MagmaMemory.load(tmp_path / "empty", embedder=embedder)
    assert_same_store(mem, empty)
    # U+2028 and U+0085 are line breaks to str.splitlines() but not to JSON.
    mem.add("line\u2028separator and next\x85line, Café ☕", "2024-01-02 10:00", speaker="Zoë",
            source_id="x:1", metadata={"tags": ["a", "b"], "n": 1.5})
    mem.add("We met again on Friday.", "2024-01-03 11:00", speaker="Ann", source_id="x:2")
    mem.save(tmp_path / "small")
    small = MagmaMemory.load(tmp_path / "small", embedder=embedder)
    try:
        assert_same_store(mem, small)
        assert small.store.events.rows[0].metadata == {"tags": ["a", "b"], "n": 1.5}
        assert math.isnan(small.store.events.date_spans.data[0, 0])
    finally:
        for m in (mem, empty, small):
            m.close()


def test_unserialisable_metadata_is_named(embedder, tmp_path):
    """``add`` refuses such metadata (test_lifecycle.py); rows written around the fast path
    (``ingest.bulk``) are still checked when saved."""
    mem = new_memory(embedder)
    rows = [EventRow("hello there", 1.7e9, "s", source_id="x:1", metadata={"obj": object()})]
    bulk.add_events(mem.store, rows, embedder.encode(["hello there"]))
    with pytest.raises(TypeError, match=r"event 0 \(source_id='x:1'\): metadata"):
        mem.save(tmp_path / "mem")
    assert not list(tmp_path.iterdir())
    mem.close()


@pytest.mark.parametrize("name", [*persistence.FILES, persistence.MANIFEST])
@pytest.mark.parametrize("damage", ["flip", "truncate"])
def test_damaged_file_is_named(saved, embedder, tmp_path, name, damage):
    path = shutil.copytree(saved, tmp_path / "mem")
    file = path / name
    data = bytearray(file.read_bytes())
    if damage == "flip":
        data[len(data) // 2] ^= 0xFF
    else:
        del data[len(data) * 2 // 3:]
    file.write_bytes(bytes(data))
    with pytest.raises(CorruptSaveError, match=re.escape(f"{file}: ")):
        MagmaMemory.load(path, embedder=embedder)


def test_missing_file_is_named(saved, embedder, tmp_path):
    path = shutil.copytree(saved, tmp_path / "mem")
    (path / persistence.EVENTS).unlink()
    with pytest.raises(CorruptSaveError, match=re.escape(f"{path / persistence.EVENTS}: missing")):
        MagmaMemory.load(path, embedder=embedder)


def test_wrong_embedding_dim_is_refused(saved, embedder):
    with pytest.raises(ValueError, match=f"{embedder.dim}-dim embeddings, the embedder gives {embedder.dim + 1}"):
        persistence.load_store(persistence.read_save(saved), MemoryStore(embedder.dim + 1), lambda r: r.text)


@pytest.mark.parametrize("stage", ["write", "rename"])
def test_failed_save_keeps_previous_one(half, embedder, tmp_path, monkeypatch, stage):
    path = tmp_path / "mem"
    half.save(path)
    before = half.stats()
    half.consolidate()
    assert half.stats() != before
    if stage == "write":  # fail in the middle of writing the new folder's files
        write = persistence.write_synced

        def failing_write(file, data):
            if file.name == persistence.ENTITIES:
                raise OSError("simulated failure")
            write(file, data)

        monkeypatch.setattr(persistence, "write_synced", failing_write)
    else:  # fail moving the new folder in, after the old one was moved aside
        rename = os.rename

        def failing_rename(src, dst):
            if Path(src).name.startswith(".mem.tmp-"):
                raise OSError("simulated failure")
            rename(src, dst)

        monkeypatch.setattr(os, "rename", failing_rename)
    with pytest.raises(OSError, match="simulated failure"):
        half.save(path)
    monkeypatch.undo()
    assert [p.name for p in tmp_path.iterdir()] == ["mem"]  # no temporary or moved-aside folders left
    old = MagmaMemory.load(path, embedder=embedder)
    assert old.stats() == before
    old.close()
    half.save(path)  # and a save that succeeds does replace it
    new = MagmaMemory.load(path, embedder=embedder)
    assert_same_store(half, new)
    new.close()


def test_refuses_to_replace_a_foreign_folder(embedder, tmp_path):
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep me")
    with new_memory(embedder) as mem, pytest.raises(FileExistsError, match="not a save folder"):
        mem.save(tmp_path / "mine")
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep me"


def test_a_config_saved_before_new_settings_gets_their_defaults():
    old = OmegaConf.to_container(load_group("memory", "hybrid_rag"), resolve=True)
    for key in ("chain_span", "scan_dtype"):
        del old[key]
    del old["retrieval"]["similarity"]
    cfg = saved_config(old)
    assert cfg.chain_span == 4 and cfg.scan_dtype == "auto" and cfg.retrieval.similarity.matrix_min_batch == 8
    assert cfg.name == "hybrid_rag" and cfg.retrieval.anchor_k == 200          # the saved values win


def _export(embedder, path: Path) -> list[dict]:
    with MagmaMemory(consolidation="none", embedder=embedder) as mem:
        mem.add("I live in Boston.", "2023-01-01 10:00", speaker="A")
        mem.add("I moved to Denver.", "2023-01-01 11:00", speaker="A")
        mem.export_jsonl(path)
    return [json.loads(line) for line in path.read_text().splitlines()]


def _events(lines: list[dict]) -> list[int]:
    return [i for i, line in enumerate(lines) if line["type"] == "event"]


@pytest.mark.parametrize("edit", [
    lambda lines: lines[_events(lines)[0]].update(timestamp="2023-01-01T10:00:00"),
    lambda lines: lines[_events(lines)[0]].update(text=42),
    lambda lines: lines[_events(lines)[1]].update(prev=99),
    lambda lines: lines[_events(lines)[0]].update(status="pending"),
    lambda lines: lines[0]["counts"].pop("edges"),
], ids=["timestamp a string", "text a number", "prev past the table", "status a string", "counts without edges"])
def test_a_hand_edited_export_of_the_wrong_type_is_refused_naming_it(embedder, tmp_path, edit):
    # each raised a bare ValueError, TypeError, IndexError or KeyError that named no file
    lines = _export(embedder, tmp_path / "good.jsonl")
    edit(lines)
    bad = tmp_path / "bad.jsonl"
    bad.write_text("".join(json.dumps(line) + "\n" for line in lines))
    with pytest.raises(CorruptSaveError, match=r"bad\.jsonl"):
        MagmaMemory.import_jsonl(bad, embedder=embedder)


def test_a_refused_import_into_a_store_dir_leaves_no_namespace(embedder, tmp_path):
    # the README: refused "before anything is stored"; the namespace's folder and empty checkpoint stayed
    lines = _export(embedder, tmp_path / "good.jsonl")
    lines[_events(lines)[1]]["prev"] = -5
    bad = tmp_path / "bad.jsonl"
    bad.write_text("".join(json.dumps(line) + "\n" for line in lines))
    with pytest.raises(CorruptSaveError, match="integrity problem"):
        MagmaMemory.import_jsonl(bad, embedder=embedder, store_dir=tmp_path / "dir", namespace="tenant")
    assert MagmaMemory.namespaces(tmp_path / "dir") == []
    with MagmaMemory.import_jsonl(tmp_path / "good.jsonl", embedder=embedder, store_dir=tmp_path / "dir",
                                  namespace="tenant") as mem:
        assert len(list(mem.events())) == 2


def test_load_given_a_store_dir_or_a_namespace_folder_says_how_to_open_it(embedder, tmp_path):
    with MagmaMemory(consolidation="none", embedder=embedder, store_dir=tmp_path / "dir", namespace="tenant") as mem:
        mem.add("hello there", "2023-01-01 10:00")
    with pytest.raises(SaveNotFoundError, match=r"tenant: a namespace folder of a store_dir, not a save: .*"
                                                r"namespace='tenant'"):
        MagmaMemory.load(tmp_path / "dir" / "tenant")
    with pytest.raises(SaveNotFoundError, match=r"dir: a store_dir, not a save"):
        MagmaMemory.load(tmp_path / "dir")


def test_metadata_nested_past_the_limit_is_refused_at_add(embedder, tmp_path):
    # 500 levels were added, and then the save, the export and a durable memory's log raised RecursionError
    deep = leaf = {}
    for _ in range(500):
        leaf["a"] = {}
        leaf = leaf["a"]
    with MagmaMemory(consolidation="none", embedder=embedder) as mem:
        with pytest.raises(IngestError, match="metadata is nested 501 levels deep, more than 64"):
            mem.add("hello", "2023-01-01 10:00", metadata=deep)
        mem.add("hello", "2023-01-01 10:00", metadata={"a": {"b": [1, {"c": 2}]}})
        mem.save(tmp_path / "ok")
