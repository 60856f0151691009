"""ScriptedLLM: a deterministic stand-in for an LLM backend, for testing the QA plumbing only
(prompt choice, batching, failure rows, cost accounting). Never a model."""
from __future__ import annotations

import json
import re

from magma_torch.llm.base import Generation, Usage

_QUESTION = re.compile(r"^Question: (.*)$", re.M)


class ScriptedLLM:
    """``mode="reader"``: answers "Not mentioned in the conversation." to questions containing
    ``abstain_on`` and "<first word of the question> answer" otherwise. ``mode="judge"``:
    returns {"verdict": 1} when the generated answer abstains, else 0. Items whose prompt
    contains ``fail_on`` fail with an error; ``garble_on`` returns unparsable text. A chat prompt
    (a list of messages: LLM consolidation) proposes nothing, or fails on ``fail_on`` likewise."""

    def __init__(self, mode: str = "reader", fail_on: str | None = None, garble_on: str | None = None,
                 abstain_on: str | None = None, name: str = "scripted"):
        self.mode, self.fail_on, self.garble_on, self.abstain_on = mode, fail_on, garble_on, abstain_on
        self.name, self.usage, self.calls, self.closed = name, Usage(), [], False

    def generate(self, prompts, schema=None, max_tokens=256, temperature=0.0):
        self.calls.append({"prompts": list(prompts), "schema": schema, "max_tokens": max_tokens,
                           "temperature": temperature})
        gens = [self._one(p) for p in prompts]
        self.usage.record(gens)
        return gens

    def _one(self, prompt) -> Generation:
        if isinstance(prompt, list):
            prompt = "\n".join(m["content"] for m in prompt)
            if not (self.fail_on and self.fail_on in prompt):
                empty = {"causal": [], "entities": [], "supersedes": []}
                return Generation(json.dumps(empty), empty, len(prompt.split()), 9)
        n_in = len(prompt.split())
        if self.fail_on and self.fail_on in prompt:
            return Generation("", prompt_tokens=n_in, error="scripted failure")
        if self.garble_on and self.garble_on in prompt:
            return Generation("maybe?", prompt_tokens=n_in, completion_tokens=1)
        if self.mode == "judge":
            v = int("not mentioned" in prompt.split("Generated answer:")[1].split("\n")[0].lower())
            return Generation(f'{{"verdict": {v}}}', {"verdict": v}, n_in, 4)
        q = _QUESTION.search(prompt).group(1)
        text = ("Not mentioned in the conversation." if self.abstain_on and self.abstain_on in q
                else f"{q.split()[0]} answer")
        return Generation(text, None, n_in, len(text.split()))

    def close(self) -> None:
        self.closed = True
