"""Any OpenAI-compatible chat-completions server: the OpenAI API (gpt-4o-mini, the paper's
backbone), a ``vllm serve`` job, a llama.cpp server.

Plain httpx with a thread pool: ``concurrency`` requests in flight at most. Each item is
retried with exponential backoff on timeouts, connection errors, HTTP 408/429/5xx, malformed
JSON and schema violations, then recorded as ``Generation(error=...)``; the batch always
finishes. A missing key or an unreachable server raises ``LLMUnavailable`` at construction.
Keys come from the environment (``api_key_env``), never from config files."""
from __future__ import annotations

import logging
import os
import random
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from magma_torch.config.schema import ConfigError
from magma_torch.errors import MissingDependencyError

from .base import Generation, LLMUnavailable, Prompt, Usage
from .schema import OutputError, parse_output, schema_name, to_json_schema, to_messages

log = logging.getLogger(__name__)

_RETRY_STATUS = {408, 409, 425, 429, 500, 502, 503, 504}


def import_httpx():
    """httpx, imported when a backend first talks to a server (the llama.cpp backend's readiness wait too)."""
    try:
        import httpx
    except ImportError as e:  # a core dependency, so only in a broken install
        raise MissingDependencyError("llm=openai or llm=llamacpp (or the same judge=) needs httpx, a dependency of "
                                     "magma-torch: pip install 'httpx>=0.27'") from e
    return httpx


class _Unreachable(Exception):
    """The server stopped answering (connection refused) for good within this batch."""


class OpenAIBackend:
    def __init__(self, base_url: str = "https://api.openai.com/v1", model: str = "gpt-4o-mini",
                 api_key_env: str | None = "OPENAI_API_KEY", require_key: bool = True, concurrency: int = 8,
                 timeout_s: float = 60.0, connect_timeout_s: float = 5.0, max_retries: int = 3,
                 backoff_s: float = 1.0, max_backoff_s: float = 30.0, strict: bool = True,
                 response_format: str = "json_schema", check: bool = True, name: str = "openai",
                 extra_body: dict | None = None):
        httpx = import_httpx()
        self.name = name
        self.usage = Usage()
        self.base_url = base_url.rstrip("/")
        try:   # httpx's InvalidURL is no HTTPError: unchecked, it escaped check() and every request raw
            httpx.URL(f"{self.base_url}/models")
        except httpx.InvalidURL as err:
            raise ConfigError(f"llm.base_url: {base_url!r} is not a URL ({err})") from None
        self.model = model
        for setting, value, low in (("timeout_s", timeout_s, 0), ("connect_timeout_s", connect_timeout_s, 0),
                                    ("backoff_s", backoff_s, None), ("max_backoff_s", max_backoff_s, None)):
            # a timeout of 0 or less failed every request later, as a connection error or a raw ValueError
            if (isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0
                    or (low is not None and not value > low)):
                raise ConfigError(f"llm.{setting} must be a number {'> 0' if low is not None else '>= 0'} "
                                  f"(seconds), got {value!r}")
        self.concurrency = max(1, int(concurrency))
        self.timeout_s = float(timeout_s)
        self.max_retries = max(0, int(max_retries))
        self.backoff_s = float(backoff_s)
        self.max_backoff_s = float(max_backoff_s)
        self.strict = bool(strict)
        if response_format not in ("json_schema", "json_object"):
            raise ConfigError(f"llm.response_format must be json_schema or json_object, got {response_format!r}")
        self.response_format = response_format
        self.extra_body = dict(extra_body or {})
        self.identity = {"backend": "openai", "base_url": self.base_url, "model": model,
                         "response_format": response_format, "strict": self.strict, "extra_body": self.extra_body}
        key = os.environ.get(api_key_env) if api_key_env else None
        if require_key and not key:
            raise LLMUnavailable(f"{name} backend: environment variable {api_key_env} is not set "
                                 f"(API key for {self.base_url})")
        headers = {"Content-Type": "application/json"}
        if key:
            headers["Authorization"] = f"Bearer {key}"
        self._client = httpx.Client(
            headers=headers,
            timeout=httpx.Timeout(self.timeout_s, connect=min(connect_timeout_s, self.timeout_s)),
            limits=httpx.Limits(max_connections=self.concurrency, max_keepalive_connections=self.concurrency))
        self._connect_timeout_s = connect_timeout_s
        self._closed = False
        if check:
            try:
                self.check()
            except LLMUnavailable:
                self._client.close()
                raise

    # -- start-up --------------------------------------------------------------------------
    def check(self) -> None:
        """GET /models with a short timeout; raise LLMUnavailable if unreachable or the key is refused."""
        httpx = import_httpx()
        url = f"{self.base_url}/models"
        try:
            r = self._client.get(url, timeout=self._connect_timeout_s)
        except httpx.HTTPError as e:
            raise LLMUnavailable(f"{self.name} backend: cannot reach {self.base_url} "
                                 f"({type(e).__name__}: {e or 'no answer'})") from None
        if r.status_code in (401, 403):
            raise LLMUnavailable(f"{self.name} backend: {self.base_url} refused the API key "
                                 f"(HTTP {r.status_code})")

    # -- generation ------------------------------------------------------------------------
    def _payload(self, prompt: Prompt, schema, max_tokens: int, temperature: float) -> dict:
        body: dict[str, Any] = {"model": self.model, "messages": to_messages(prompt),
                                "max_tokens": int(max_tokens), "temperature": float(temperature)}
        if schema is not None:
            js = to_json_schema(schema)
            if self.response_format == "json_schema":
                body["response_format"] = {"type": "json_schema", "json_schema": {
                    "name": schema_name(schema), "schema": js, "strict": self.strict}}
            else:   # llama-cpp-python's server: grammar-constrained json_object with a schema
                body["response_format"] = {"type": "json_object", "schema": js}
        body.update(self.extra_body)
        return body

    def _sleep(self, attempt: int) -> None:
        d = min(self.max_backoff_s, self.backoff_s * (2 ** attempt))
        time.sleep(d * (0.5 + random.random() / 2))

    def _one(self, prompt: Prompt, schema, max_tokens: int, temperature: float,
             dead: threading.Event) -> Generation:
        httpx = import_httpx()
        url = f"{self.base_url}/chat/completions"
        body = self._payload(prompt, schema, max_tokens, temperature)
        p_tok = c_tok = 0
        reason = "no attempt"
        connect_fail_only = True
        paced = False   # the server's Retry-After was waited out: it replaces the backoff, not adds to it
        for attempt in range(self.max_retries + 1):
            if dead.is_set():
                return Generation("", None, p_tok, c_tok, f"skipped: {self.base_url} unreachable ({reason})")
            if attempt and not paced:
                self._sleep(attempt - 1)
            paced = False
            try:
                r = self._client.post(url, json=body)
            except httpx.TimeoutException as e:
                reason, connect_fail_only = f"timeout after {self.timeout_s:g}s ({type(e).__name__})", False
                continue
            except httpx.TransportError as e:
                reason = f"connection error: {type(e).__name__}: {e}"
                continue
            connect_fail_only = False
            if r.status_code != 200:
                reason = f"HTTP {r.status_code}: {r.text[:200]}"
                if r.status_code in _RETRY_STATUS:
                    ra = r.headers.get("retry-after", "")
                    if ra.replace(".", "", 1).isdigit() and attempt < self.max_retries:
                        time.sleep(min(float(ra), self.max_backoff_s))   # the server's own pacing (429)
                        paced = True
                    continue
                return Generation("", None, p_tok, c_tok, reason)   # 400/404/...: retrying will not help
            try:
                data = r.json()
                usage = data.get("usage") or {}
                p_tok += int(usage.get("prompt_tokens") or 0)
                c_tok += int(usage.get("completion_tokens") or 0)
                choice = data["choices"][0]
                refusal = choice["message"].get("refusal")
                text = choice["message"].get("content") or ""
                if not isinstance(text, str):   # e.g. a list of content parts: no text this backend can read
                    raise TypeError(f"message content is a {type(text).__name__}, not a string")
            except Exception as e:
                reason = f"bad response body: {type(e).__name__}: {str(e)[:120]}"
                continue
            if refusal and not text:   # the model declined: asking again costs as much and gets the same
                return Generation("", None, p_tok, c_tok, f"refused: {str(refusal)[:200]}")
            if schema is None:
                return Generation(text, None, p_tok, c_tok)
            try:
                parsed = parse_output(text, schema)
            except OutputError as e:
                if choice.get("finish_reason") == "length":   # cut at max_tokens: the same request is cut again
                    return Generation("", None, p_tok, c_tok, f"{e} (finish_reason=length: the answer did not fit "
                                                              f"max_tokens={int(max_tokens)})")
                reason = f"{e}"
                continue
            return Generation(text, parsed, p_tok, c_tok)
        if connect_fail_only:
            dead.set()   # the server is gone: the rest of the batch fails fast
        return Generation("", None, p_tok, c_tok, f"after {self.max_retries + 1} attempts: {reason}")

    def generate(self, prompts: Sequence[Prompt], schema: dict | type | None = None, max_tokens: int = 256,
                 temperature: float = 0.0) -> list[Generation]:
        if self._closed:
            raise RuntimeError(f"{self.name} backend is closed")
        prompts = list(prompts)
        if not prompts:
            return []
        if schema is not None:
            to_json_schema(schema)   # a bad schema argument is a caller bug: raise now
        dead = threading.Event()
        if len(prompts) == 1 or self.concurrency == 1:
            gens = [self._one(p, schema, max_tokens, temperature, dead) for p in prompts]
        else:
            with ThreadPoolExecutor(max_workers=min(self.concurrency, len(prompts)),
                                    thread_name_prefix=f"{self.name}-llm") as ex:
                gens = list(ex.map(lambda p: self._one(p, schema, max_tokens, temperature, dead), prompts))
        self.usage.record(gens)
        nfail = sum(g.error is not None for g in gens)
        if nfail:
            first = next(g.error for g in gens if g.error)
            log.warning("%s backend: %d/%d items failed (first: %s)", self.name, nfail, len(gens), first)
        return gens

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._client.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
