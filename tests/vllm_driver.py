"""Drives the vllm backend on a real vLLM engine; run by tests/test_llm_vllm.py with
.venv-vllm/bin/python (vLLM lives in its own venv, see the Makefile's ``vllm-env``).

One engine start for everything: batched plain generation, schema-constrained JSON, per-item
failures (a prompt over ``max_model_len``, output cut off by ``max_tokens``) and an LLM
consolidation pass over demo-dataset events. Writes what happened as JSON to ``--out``; the
test asserts on it. The ``__main__`` guard matters: vLLM's engine core is a child process
that re-imports this module."""
from __future__ import annotations

import argparse
import json
import time

# The whole package is imported before the engine starts, as in magma-run: vLLM forks its
# engine processes from this one, with these modules loaded.
from magma_torch import MagmaMemory
from magma_torch.config import load_group
from magma_torch.eval.datasets.demo import load_demo
from magma_torch.llm import build_llm

SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}, "year": {"type": "integer"}},
          "required": ["city", "year"], "additionalProperties": False}


def gens_json(gens) -> list[dict]:
    return [{"text": g.text, "parsed": g.parsed, "prompt_tokens": g.prompt_tokens,
             "completion_tokens": g.completion_tokens, "error": g.error} for g in gens]


class RecordingLLM:
    """Passes generate calls through and keeps each call's user messages, for the test to read
    which nodes each consolidation prompt showed."""

    def __init__(self, llm):
        self.llm, self.name, self.usage = llm, llm.name, llm.usage
        self.calls: list[list[str]] = []

    def generate(self, prompts, **kw):
        self.calls.append([p[-1]["content"] for p in prompts])
        return self.llm.generate(prompts, **kw)

    def close(self):
        pass


def consolidation_pass(llm, n_events: int, batch_size: int) -> dict:
    cfg = load_group("memory", "magma")
    cfg.slow_path.background = False
    cfg.slow_path.batch_size = batch_size
    rec = RecordingLLM(llm)
    turns = load_demo()[0].turns[:n_events]
    with MagmaMemory(cfg, load_group("consolidation", "llm"), device="cpu", llm=rec) as mem:
        ids = mem.add_many({"text": t.text, "timestamp": t.timestamp, "speaker": t.speaker,
                            "source_id": t.source_id} for t in turns)
        mem.consolidate()
        src, dst, w = mem.store.graph.edges("causal")
        return {"events": {str(i): t.text for i, t in zip(ids, turns, strict=True)},
                "status": {str(i): list(mem.worker.status[i]) for i in ids},
                "causal": [[s, d, x] for s, d, x in zip(src.tolist(), dst.tolist(), w.tolist(), strict=True)],
                "prompts": rec.calls, "stats": mem.stats()}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, help="safetensors model folder")
    ap.add_argument("--out", required=True, help="JSON file to write")
    ap.add_argument("--events", type=int, default=12, help="demo events to consolidate")
    ap.add_argument("--batch-size", type=int, default=6, help="slow-path batch size")
    args = ap.parse_args(argv)
    cfg = load_group("llm", "vllm")
    cfg.model = args.model
    cfg.max_model_len = 2048
    cfg.kv_cache_memory_bytes = 1 << 30
    cfg.enforce_eager = True      # torch.compile would slow every start on CPU
    cfg.dtype = "bfloat16"
    out: dict = {}
    t0 = time.perf_counter()
    llm = build_llm(cfg)
    out["engine_start_s"] = time.perf_counter() - t0
    try:
        t0 = time.perf_counter()
        out["plain"] = gens_json(llm.generate(["What is the capital of France?", "Say hello.", "Name a colour.",
                                               "What is 2 plus 2?"], max_tokens=16))
        out["schema"] = gens_json(llm.generate(
            ["Where and when were the first modern Olympic games held? Answer in JSON.",
             [{"role": "system", "content": "You answer in JSON."},
              {"role": "user", "content": "Which city hosted the 2012 Olympics, and in which year?"}]],
            schema=SCHEMA, max_tokens=48))
        # Failures for reasons sampling cannot change: a prompt over max_model_len, and a JSON
        # schema that cannot fit in max_tokens=3. The usage counted over just these two calls is
        # kept apart from the consolidation's, whose failures depend on what the model emits.
        before = llm.usage.as_dict()
        out["too_long"] = gens_json(llm.generate(["word " * 4000, "Say hello."], max_tokens=8))
        out["cut_off"] = gens_json(llm.generate(["Which city hosted the 2012 Olympics?"], schema=SCHEMA,
                                                max_tokens=3))
        out["failure_usage"] = {k: v - before[k] for k, v in llm.usage.as_dict().items()}
        out["generate_s"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        out["consolidation"] = consolidation_pass(llm, args.events, args.batch_size)
        out["consolidation_s"] = time.perf_counter() - t0
        out["usage"] = llm.usage.as_dict()
    finally:
        llm.close()
    with open(args.out, "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
