"""One small LLM interface shared by every backend (vLLM, OpenAI-compatible HTTP,
llama.cpp server, transformers)."""
from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from magma_torch.errors import MagmaError

Prompt = str | list[dict]   # plain text (sent as one user message) or chat messages


@dataclass(frozen=True)
class Generation:
    """One completion. ``parsed`` holds the decoded JSON when a schema was asked for and the
    output validated; ``error`` says why an item failed after its retries (text is "")."""

    text: str
    parsed: Any | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    error: str | None = None


class LLMUnavailable(MagmaError, RuntimeError):
    """The backend cannot be used at all (no key, server unreachable): fail fast, one line."""


class LLMInterfaceError(MagmaError, RuntimeError):
    """An LLM broke its interface: ``generate`` did not give one Generation per prompt (a bug of that
    backend; which generation belongs to which prompt is then unknown)."""


@dataclass
class Usage:
    """Thread-safe counters for cost accounting."""

    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    failures: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def record(self, gens: Sequence[Generation]) -> None:
        with self._lock:
            self.calls += len(gens)
            self.prompt_tokens += sum(g.prompt_tokens for g in gens)
            self.completion_tokens += sum(g.completion_tokens for g in gens)
            self.failures += sum(g.error is not None for g in gens)

    def as_dict(self) -> dict:
        return {"calls": self.calls, "prompt_tokens": self.prompt_tokens,
                "completion_tokens": self.completion_tokens, "failures": self.failures}


def finish_batch(done: dict[int, Generation], failed: dict[int, str], attempts: int, prompt_tokens: list[int],
                 completion_tokens: list[int], usage: Usage) -> list[Generation]:
    """Close a batch of local-engine generations: items still ``failed`` after ``attempts``
    become error Generations (tokens spent on them still counted), usage is recorded, and
    results come back in prompt order."""
    for i, reason in failed.items():
        done[i] = Generation("", None, prompt_tokens[i], completion_tokens[i], f"after {attempts} attempts: {reason}")
    gens = [done[i] for i in range(len(prompt_tokens))]
    usage.record(gens)
    return gens


class LLM(Protocol):
    name: str
    usage: Usage
    # What besides the prompt decides a backend's generations (model, server, decoding settings), as JSON,
    # local models by file or folder name (a run folder's cache still fits where the model lies elsewhere):
    # a consolidation cache (llm/cache.py) refuses a file another identity wrote. Optional: None or absent
    # for a model of your own that does not say.
    identity: dict | None

    def generate(self, prompts: Sequence[Prompt], schema: dict | type | None = None, max_tokens: int = 256,
                 temperature: float = 0.0) -> list[Generation]:
        """One Generation per prompt, in order; batched inside the backend."""

    def close(self) -> None: ...


def checked_generate(llm: LLM, prompts: Sequence[Prompt], **kw) -> list[Generation]:
    """``llm.generate(prompts, **kw)`` (no call for no prompts), held to one Generation per prompt."""
    gens = list(llm.generate(prompts, **kw)) if prompts else []
    if len(gens) != len(prompts):
        raise LLMInterfaceError(f"LLM {getattr(llm, 'name', llm)!s} returned {len(gens)} generations "
                                f"for {len(prompts)} prompts")
    return gens
