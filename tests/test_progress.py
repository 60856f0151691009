"""Progress bars: consolidation shows the events the slow path has done; an aborted memory skips it."""
from __future__ import annotations

from datetime import datetime, timedelta

from omegaconf import OmegaConf

from magma_torch import MagmaMemory
from magma_torch.config import load_group
from magma_torch.eval import progress
from magma_torch.text.embedder import Embedder


def test_consolidation_bar_counts_every_event(capsys, monkeypatch):
    bars = []

    class Recorded(progress.tqdm):
        def close(self):
            bars.append((self.n, self.total))
            super().close()

    monkeypatch.setattr(progress, "tqdm", Recorded)
    cfg = load_group("memory", "magma")
    OmegaConf.set_struct(cfg, False)
    cfg.slow_path.background = False          # the queue stays full until consolidate() drains it
    t0 = datetime(2024, 1, 1)
    recs = [{"text": f"Ana met Bo at the {p} on day {i}.", "timestamp": t0 + timedelta(days=i)}
            for i, p in enumerate(["park", "museum", "lake", "cafe", "library", "market"])]
    with MagmaMemory(cfg, "heuristic", device="cpu", embedder=Embedder(device="cpu")) as mem:
        mem.add_many(recs)
        assert mem.worker.pending() == len(recs)
        progress.consolidate(mem, enabled=True)
        assert mem.worker.pending() == 0 and mem.stats()["edges"]["entity"] > 0
    assert set(bars) == {(len(recs), len(recs))}      # the bar (cleared when done) reached every event
    assert "consolidation:" in capsys.readouterr().err


def test_cancel_drops_the_queue_so_an_aborted_memory_closes_at_once():
    cfg = load_group("memory", "magma")
    OmegaConf.set_struct(cfg, False)
    cfg.slow_path.background = False
    mem = MagmaMemory(cfg, "heuristic", device="cpu", embedder=Embedder(device="cpu"))
    ids = mem.add_many([{"text": f"event {i}", "timestamp": datetime(2024, 1, 1 + i)} for i in range(4)])
    assert mem.worker.cancel() == 4 and mem.worker.pending() == 0
    assert {mem.worker.status[i] for i in ids} == {("failed", "cancelled")}
    mem.consolidate()                           # nothing left to do
    mem.close()
    assert mem.stats()["edges"]["entity"] == 0
