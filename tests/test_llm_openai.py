"""OpenAI-compatible backend against a scripted local HTTP server: faults are retried, then
recorded per item; a missing key or an unreachable server fails fast."""
from __future__ import annotations

import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace

import httpx
import pytest
from pydantic import BaseModel

from magma_torch.config.schema import ConfigError
from magma_torch.llm import openai_backend
from magma_torch.llm.base import LLMUnavailable
from magma_torch.llm.openai_backend import OpenAIBackend
from magma_torch.llm.schema import OutputError, parse_output

SCHEMA = {"type": "object", "properties": {"answer": {"type": "string"}, "n": {"type": "integer"}},
          "required": ["answer", "n"], "additionalProperties": False}


class Answer(BaseModel):
    answer: str
    n: int


class FakeServer:
    """Scripted /v1 server. ``script`` is a list of actions consumed one per POST (then ``default``):
    an int status ("500"), "garbage" (non-JSON body), "sleep" (longer than the client timeout),
    a string that becomes the message content of a 200 answer, {"content": value}: that value
    as the content, whatever its type (with "refusal" and "finish_reason" keys: those of the
    answer), or {"status": 429, "retry_after": "1"}: that status with a Retry-After header."""

    def __init__(self, script=(), default='{"answer": "ok", "n": 1}', delay=0.0):
        self.script = list(script)
        self.default = default
        self.delay = delay
        self.lock = threading.Lock()
        self.inflight = self.max_inflight = self.posts = 0
        self.bodies: list[dict] = []
        self.auth: list[str | None] = []
        srv = self

        class H(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def _send(self, code, body: bytes, ctype="application/json", headers=()):
                self.send_response(code)
                for name, value in headers:
                    self.send_header(name, value)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self):
                self._send(200, json.dumps({"data": [{"id": "fake"}]}).encode())

            def _reply(self, action, body) -> tuple[int, bytes, str]:
                if srv.delay:
                    time.sleep(srv.delay)
                if isinstance(action, int):
                    return action, b'{"error": "boom"}', "application/json"
                if action == "garbage":
                    return 200, b"<html>not json", "text/html"
                if action == "sleep":
                    time.sleep(1.0)
                    return 200, b"{}", "application/json"
                if isinstance(action, dict) and "status" in action:
                    return (action["status"], b'{"error": "slow down"}', "application/json",
                            [("Retry-After", action["retry_after"])])
                n = len(body["messages"][-1]["content"])
                content = action.get("content") if isinstance(action, dict) else action
                message = {"role": "assistant", "content": content}
                if isinstance(action, dict) and "refusal" in action:
                    message["refusal"] = action["refusal"]
                finish = action.get("finish_reason", "stop") if isinstance(action, dict) else "stop"
                out = {"choices": [{"message": message, "finish_reason": finish}],
                       "usage": {"prompt_tokens": n, "completion_tokens": 3, "total_tokens": n + 3}}
                return 200, json.dumps(out).encode(), "application/json"

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with srv.lock:
                    srv.posts += 1
                    srv.inflight += 1
                    srv.max_inflight = max(srv.max_inflight, srv.inflight)
                    srv.bodies.append(body)
                    srv.auth.append(self.headers.get("Authorization"))
                    action = srv.script.pop(0) if srv.script else srv.default
                try:
                    reply = self._reply(action, body)
                finally:
                    # Out of flight before the answer is written: once the client has it, its worker
                    # may post the next prompt before a finally after the write would have run.
                    with srv.lock:
                        srv.inflight -= 1
                try:
                    self._send(*reply)
                except (BrokenPipeError, ConnectionResetError):
                    pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def stop(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server():
    servers = []

    def make(**kw):
        s = FakeServer(**kw)
        servers.append(s)
        return s

    yield make
    for s in servers:
        s.stop()


def backend(url, **kw):
    kw = {"require_key": False, "max_retries": 2, "backoff_s": 0.01, "timeout_s": 5.0, "model": "fake", **kw}
    return OpenAIBackend(base_url=url, **kw)


def test_500_then_garbage_then_valid_is_retried(server):
    s = server(script=[500, "garbage"])
    llm = backend(s.url)
    [g] = llm.generate(["hello"], schema=SCHEMA)
    assert g.error is None and g.parsed == {"answer": "ok", "n": 1}
    assert s.posts == 3
    rf = s.bodies[0]["response_format"]
    assert rf["type"] == "json_schema" and rf["json_schema"]["schema"] == SCHEMA and rf["json_schema"]["strict"]
    llm.close()


def test_timeout_is_retried_then_recorded(server):
    s = server(default="sleep")                          # each answer comes after 1 s, past the 0.3 s timeout
    llm = backend(s.url, timeout_s=0.3, max_retries=1)
    backoffs = []
    llm._sleep = backoffs.append                         # record the backoffs instead of sleeping them
    [g] = llm.generate(["slow"])
    assert g.text == "" and g.parsed is None
    assert g.error.startswith("after 2 attempts: timeout after 0.3s")   # the client gave up, not the server
    assert s.posts == 2 and backoffs == [0]              # max_retries=1: two attempts, one backoff between them
    assert llm.usage.failures == 1


def test_malformed_json_and_schema_violation_fail_with_reason(server):
    s = server(script=['{"answer": "x"'] * 3 + ['{"answer": "x"}'] * 3)
    llm = backend(s.url)
    gens = llm.generate(["a"], schema=SCHEMA) + llm.generate(["b"], schema=Answer)
    assert s.posts == 6   # 3 attempts each
    assert "malformed JSON" in gens[0].error and gens[0].parsed is None
    assert "schema violation" in gens[1].error
    assert llm.usage.failures == 2 and llm.usage.calls == 2


@pytest.mark.parametrize("lenient", [False, True])
def test_json_nested_past_the_recursion_limit_is_an_output_error(lenient):
    with pytest.raises(OutputError, match="nested too deeply"):
        parse_output("[" * 5000, SCHEMA, lenient=lenient)


@pytest.mark.parametrize("content", ["[" * 5000, {"content": ["part"]}, {"content": 123}],
                         ids=["nested too deeply", "a list", "a number"])
def test_one_unreadable_answer_fails_its_item_and_the_batch_goes_on(server, content):
    s = server(script=[content] * 3)                     # every attempt of the first prompt
    llm = backend(s.url, concurrency=1)
    bad, good = llm.generate(["a", "b"], schema=SCHEMA)
    assert bad.error.startswith("after 3 attempts:") and bad.text == "" and bad.parsed is None
    assert good.error is None and good.parsed == {"answer": "ok", "n": 1}


@pytest.mark.parametrize("content", [["part"], 123], ids=["a list", "a number"])
def test_an_answer_that_is_no_string_is_a_bad_body_without_a_schema_too(server, content):
    s = server(script=[{"content": content}] * 3)
    [g] = backend(s.url).generate(["a"])
    assert g.error == f"after 3 attempts: bad response body: TypeError: message content is a " \
                      f"{type(content).__name__}, not a string"
    assert g.text == ""


def test_retry_recovers_from_schema_violation_and_pydantic_parse(server):
    s = server(script=['{"answer": 5, "n": 1}'], default='{"answer": "yes", "n": 2}')
    llm = backend(s.url)
    [g] = llm.generate([[{"role": "system", "content": "be brief"}, {"role": "user", "content": "q"}]],
                       schema=Answer)
    assert g.error is None and isinstance(g.parsed, Answer) and g.parsed.n == 2
    assert s.bodies[0]["messages"][0]["role"] == "system"


def test_client_error_is_not_retried(server):
    s = server(script=[400])
    [g] = backend(s.url).generate(["x"])
    assert s.posts == 1 and g.error.startswith("HTTP 400")


def test_missing_key_fails_fast_naming_the_env_var(monkeypatch):
    monkeypatch.delenv("MAGMA_TEST_NO_SUCH_KEY", raising=False)
    with pytest.raises(LLMUnavailable, match="MAGMA_TEST_NO_SUCH_KEY"):
        OpenAIBackend(api_key_env="MAGMA_TEST_NO_SUCH_KEY", require_key=True)


@pytest.mark.parametrize("check", [True, False])
def test_a_base_url_that_is_no_url_is_refused_naming_the_setting(check):
    # before: httpx's InvalidURL, which is no HTTPError, escaped check() (and, unchecked, every request) raw
    with pytest.raises(ConfigError, match=r"^llm\.base_url: 'http://localhost:80OO/v1' is not a URL \(.*80OO"):
        OpenAIBackend(base_url="http://localhost:80OO/v1", require_key=False, check=check)


def test_key_comes_from_the_environment(server, monkeypatch):
    monkeypatch.setenv("MAGMA_TEST_KEY", "sk-test")
    s = server()
    backend(s.url, api_key_env="MAGMA_TEST_KEY", require_key=True).generate(["x"])
    assert s.auth == ["Bearer sk-test"]


def test_unreachable_server_fails_fast_naming_the_url(monkeypatch):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    url = f"http://127.0.0.1:{port}/v1"
    gets, posts, sleeps = [], [], []
    real_get = httpx.Client.get
    monkeypatch.setattr(httpx.Client, "get", lambda self, u, **kw: gets.append((u, kw)) or real_get(self, u, **kw))
    monkeypatch.setattr(httpx.Client, "post", lambda self, u, **kw: posts.append(u))
    monkeypatch.setattr(openai_backend, "time", SimpleNamespace(sleep=sleeps.append))   # the backend's clock
    with pytest.raises(LLMUnavailable, match=r"openai backend: cannot reach http://127\.0\.0\.1:\d+/v1"):
        backend(url, connect_timeout_s=2.0)
    # fast: one reachability check with the short connect timeout, no retry, no backoff, no request
    assert gets == [(f"{url}/models", {"timeout": 2.0})] and posts == [] and sleeps == []


def test_server_dying_mid_run_gives_failed_items(server):
    s = server()
    llm = backend(s.url, concurrency=2)
    assert llm.generate(["x"])[0].error is None
    s.stop()
    gens = llm.generate(["a", "b", "c", "d"])
    assert len(gens) == 4 and all(g.error and g.text == "" for g in gens)
    assert any("connection error" in g.error for g in gens)


def test_concurrency_limit_and_token_counts(server):
    s = server(delay=0.1)
    llm = backend(s.url, concurrency=3)
    prompts = [f"prompt number {i}" for i in range(10)]
    gens = llm.generate(prompts, schema=SCHEMA)
    assert all(g.error is None for g in gens)
    assert s.max_inflight == 3
    assert [g.prompt_tokens for g in gens] == [len(p) for p in prompts]
    assert llm.usage.as_dict() == {"calls": 10, "prompt_tokens": sum(map(len, prompts)),
                                   "completion_tokens": 30, "failures": 0}


def test_a_retry_after_replaces_the_backoff(server):
    # the server's Retry-After was slept and then the exponential backoff on top of it
    s = server(script=[{"status": 429, "retry_after": "0"}, {"status": 429, "retry_after": "0"}])
    llm = backend(s.url, max_retries=3)
    backoffs = []
    llm._sleep = backoffs.append
    [g] = llm.generate(["hello"], schema=SCHEMA)
    assert g.error is None and s.posts == 3 and backoffs == []
    llm.close()


def test_a_refusal_fails_its_item_at_once_naming_it(server):
    # it was read as an empty answer, "malformed JSON", and asked again max_retries times
    s = server(script=[{"content": None, "refusal": "I'm sorry, I cannot help with that."}])
    llm = backend(s.url)
    [g] = llm.generate(["hello"], schema=SCHEMA)
    assert g.error == "refused: I'm sorry, I cannot help with that." and s.posts == 1
    llm.close()


def test_an_answer_cut_at_max_tokens_is_not_asked_again(server):
    s = server(script=[{"content": '{"answer": "x', "finish_reason": "length"}])
    llm = backend(s.url)
    [g] = llm.generate(["hello"], schema=SCHEMA, max_tokens=6)
    assert s.posts == 1 and "malformed JSON" in g.error and "did not fit max_tokens=6" in g.error
    llm.close()


@pytest.mark.parametrize("setting, value", [("timeout_s", 0), ("timeout_s", -1.0), ("connect_timeout_s", 0),
                                            ("backoff_s", -1), ("timeout_s", "abc")])
def test_a_timeout_or_backoff_out_of_range_is_refused_naming_it(setting, value):
    # a timeout of 0 or less failed every request later, as a connection error or a raw ValueError
    with pytest.raises(ConfigError, match=rf"^llm\.{setting} must be a number"):
        OpenAIBackend(api_key_env=None, require_key=False, check=False, **{setting: value})
