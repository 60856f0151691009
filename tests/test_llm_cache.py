"""CachedLLM: generations kept in a JSON-lines file and given back to a rerun without the model."""
from __future__ import annotations

import json

import pytest
from pydantic import BaseModel

from magma_torch.llm.base import Generation, LLMInterfaceError, Usage
from magma_torch.llm.cache import CacheModelError, CachedLLM, cost

SCHEMA = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}


class Verdict(BaseModel):
    verdict: int


class CountingLLM:
    """Answers {"n": len(prompt)}; prompts containing "fail" fail. Records every prompt it is sent."""

    def __init__(self, name: str = "counting"):
        self.name, self.usage, self.sent, self.closed = name, Usage(), [], False

    def generate(self, prompts, schema=None, max_tokens=256, temperature=0.0):
        self.sent.append(list(prompts))
        gens = []
        for p in prompts:
            if "fail" in p:
                gens.append(Generation("", prompt_tokens=3, error="scripted failure"))
            elif schema is Verdict:
                gens.append(Generation('{"verdict": 1}', Verdict(verdict=1), 3, 2))
            else:
                gens.append(Generation(json.dumps({"n": len(p)}), {"n": len(p)}, len(p), 4))
        self.usage.record(gens)
        return gens

    def close(self):
        self.closed = True


def test_a_rerun_is_answered_from_the_file(tmp_path):
    path = tmp_path / "cache.jsonl"
    first = CachedLLM(CountingLLM(), path)
    gens = first.generate(["a", "bb"], schema=SCHEMA)
    assert [g.parsed for g in gens] == [{"n": 1}, {"n": 2}]
    assert first.hits == 0 and first.usage.calls == 2
    again = CachedLLM(inner := CountingLLM(), path)     # a new process, the same file
    back = again.generate(["bb", "a", "ccc"], schema=SCHEMA)
    assert inner.sent == [["ccc"]]                       # only the prompt the file lacks reaches the model
    assert [g.parsed for g in back] == [{"n": 2}, {"n": 1}, {"n": 3}]
    assert [g.text for g in back[:2]] == [gens[1].text, gens[0].text]
    assert (back[0].prompt_tokens, back[0].completion_tokens) == (2, 4)
    assert again.hits == 2 and again.usage.calls == 1 and len(again) == 3


@pytest.mark.parametrize("change", [{"max_tokens": 64}, {"temperature": 0.7}, {"schema": None}])
def test_another_budget_temperature_or_schema_misses(tmp_path, change):
    path = tmp_path / "cache.jsonl"
    CachedLLM(CountingLLM(), path).generate(["a"], schema=SCHEMA)
    inner = CountingLLM()
    CachedLLM(inner, path).generate(["a"], **{"schema": SCHEMA, **change})
    assert inner.sent == [["a"]]


def test_another_model_misses(tmp_path):
    path = tmp_path / "cache.jsonl"
    CachedLLM(CountingLLM("one"), path).generate(["a"])
    inner = CountingLLM("two")
    CachedLLM(inner, path).generate(["a"])
    assert inner.sent == [["a"]]


def test_a_model_that_gives_fewer_generations_than_prompts_is_named(tmp_path):
    llm = CountingLLM("short")
    answers = llm.generate
    llm.generate = lambda prompts, **kw: answers(prompts, **kw)[:1]
    cached = CachedLLM(llm, tmp_path / "gen.jsonl")
    with pytest.raises(LLMInterfaceError, match="LLM short returned 1 generations for 2 prompts"):
        cached.generate(["a", "bb"], schema=SCHEMA)


def test_failures_are_not_kept_and_are_tried_again(tmp_path):
    path = tmp_path / "cache.jsonl"
    gens = CachedLLM(CountingLLM(), path).generate(["ok", "fail"])
    assert gens[1].error == "scripted failure"
    inner = CountingLLM()
    again = CachedLLM(inner, path).generate(["ok", "fail"])
    assert inner.sent == [["fail"]] and again[1].error == "scripted failure"
    assert len(path.read_text().splitlines()) == 1


def test_a_pydantic_schema_gets_its_model_back(tmp_path):
    path = tmp_path / "cache.jsonl"
    CachedLLM(CountingLLM(), path).generate(["a"], schema=Verdict)
    inner = CountingLLM()
    [g] = CachedLLM(inner, path).generate(["a"], schema=Verdict)
    assert inner.sent == [] and g.parsed == Verdict(verdict=1)


def test_a_line_torn_by_a_kill_is_dropped_and_the_next_starts_clean(tmp_path):
    path = tmp_path / "cache.jsonl"
    CachedLLM(CountingLLM(), path).generate(["a"])
    with path.open("a") as f:
        f.write('{"key": "torn')
    cache = CachedLLM(CountingLLM(), path)
    assert len(cache) == 1
    cache.generate(["bb"])
    assert [json.loads(line)["text"] for line in path.read_text().splitlines()] == ['{"n": 1}', '{"n": 2}']


def test_cost_sums_what_the_kept_generations_cost(tmp_path):
    path = tmp_path / "cache.jsonl"
    cache = CachedLLM(CountingLLM(), path)
    cache.generate(["a", "bbb"])
    cache.generate(["a"])                                # a hit costs nothing more
    c = cost(path)
    assert (c["generations"], c["prompt_tokens"], c["completion_tokens"]) == (2, 4, 8)
    assert c["seconds"] >= 0 and c["per_generation"]["prompt_tokens"] == 2
    assert cost(tmp_path / "none.jsonl")["generations"] == 0


def test_the_file_and_its_folder_are_made_on_first_use(tmp_path):
    path = tmp_path / "run" / "cache.jsonl"
    cache = CachedLLM(CountingLLM(), path)
    assert not path.exists() and len(cache) == 0
    cache.generate(["a"])
    assert len(path.read_text().splitlines()) == 1


def test_close_closes_the_model(tmp_path):
    inner = CountingLLM()
    CachedLLM(inner, tmp_path / "cache.jsonl").close()
    assert inner.closed


def test_a_file_another_model_wrote_is_refused(tmp_path):
    # The key holds the backend's name ("openai", "llamacpp"), not its model: before, a file that
    # gpt-4o-mini wrote answered gpt-4o's prompts. Each line now names the model that wrote it.
    path = tmp_path / "cache.jsonl"
    mini = CountingLLM("openai")
    mini.identity = {"backend": "openai", "model": "gpt-4o-mini"}
    CachedLLM(mini, path).generate(["a"], schema=SCHEMA)
    assert json.loads(path.read_text())["model"] == mini.identity
    again = CountingLLM("openai")
    again.identity = dict(mini.identity)
    assert CachedLLM(again, path).generate(["a"], schema=SCHEMA)[0].parsed == {"n": 1} and again.sent == []
    big = CountingLLM("openai")
    big.identity = {"backend": "openai", "model": "gpt-4o"}
    with pytest.raises(CacheModelError, match=r"cache\.jsonl: its generations are another model's "
                                              r"\(\{\"backend\": \"openai\", \"model\": \"gpt-4o-mini\"\}\)"):
        CachedLLM(big, path)
    assert CachedLLM(CountingLLM("openai"), path).generate(["a"], schema=SCHEMA)[0].parsed == {"n": 1}  # a replayer


def test_the_openai_backend_names_its_model_and_settings():
    from magma_torch.llm.openai_backend import OpenAIBackend

    a = OpenAIBackend(model="gpt-4o-mini", api_key_env=None, require_key=False, check=False)
    b = OpenAIBackend(model="gpt-4o-mini", api_key_env=None, require_key=False, check=False, extra_body={"seed": 7})
    assert a.identity["model"] == "gpt-4o-mini" and a.identity != b.identity
    a.close(), b.close()
