"""Progress bars: consolidation shows the events the slow path has done, and keeps its result."""
from __future__ import annotations

from datetime import datetime, timedelta

from omegaconf import OmegaConf

from magma_torch import MagmaMemory
from magma_torch.config import load_group
from magma_torch.eval import progress
from magma_torch.ingest.embedder import Embedder


def test_consolidation_bar_counts_every_event(capsys):
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
    err = capsys.readouterr().err
    assert "consolidation" in err and f"{len(recs)}/{len(recs)}" in err
