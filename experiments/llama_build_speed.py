"""Prompt-evaluation and decoding speed of a GGUF under the interpreter's llama.cpp build.

    .venv/bin/python experiments/llama_build_speed.py models/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf \
        --label native-no-amx --json out.json

Compares builds of llama-cpp-python (the Makefile's LLAMA_CMAKE_ARGS): run it once under each
build's interpreter, or with PYTHONPATH pointing at another build's install. The prompt is the
first 1,000 tokens of README.md, evaluated in one batch (the answer and consolidation prompts are
about that long); then 48 greedy tokens one at a time. Three repeats; each JSON records which
libggml-cpu it loaded and whether that holds AVX-512 or AMX code.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import time
from pathlib import Path

import llama_cpp
from llama_cpp import Llama
from machine import machine  # experiments/machine.py

README = Path(__file__).resolve().parents[1] / "README.md"


def kernel_code(lib: Path) -> dict:
    """Whether the CPU backend holds AVX-512 (zmm registers) or AMX (ldtilecfg) instructions."""
    asm = subprocess.run(["objdump", "-d", str(lib)], capture_output=True, text=True, check=True).stdout
    return {"library": str(lib), "avx512": "zmm" in asm, "amx": "ldtilecfg" in asm}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", type=Path)
    ap.add_argument("--label", required=True, help="the build's name in the JSON")
    ap.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    llm = Llama(model_path=str(args.model), n_ctx=2048, n_threads=args.threads, n_threads_batch=args.threads,
                verbose=False)
    prompt = llm.tokenize(README.read_text().encode())[:1000]
    prompt_rate, decode_rate = [], []
    for _ in range(args.repeats):
        llm.reset()
        t = time.perf_counter()
        llm.eval(prompt)
        prompt_rate.append(len(prompt) / (time.perf_counter() - t))
        t = time.perf_counter()
        for _ in range(48):
            llm.eval([llm.sample(temp=0.0)])
        decode_rate.append(48 / (time.perf_counter() - t))
    lib = Path(llama_cpp.__file__).parent / "lib" / "libggml-cpu.so"
    out = {"label": args.label, "model": args.model.name, "threads": args.threads, "prompt_tokens": len(prompt),
           "prompt_tokens_per_s": round(statistics.median(prompt_rate), 1),
           "decode_tokens_per_s": round(statistics.median(decode_rate), 2),
           "runs": {"prompt_tokens_per_s": [round(r, 1) for r in prompt_rate],
                    "decode_tokens_per_s": [round(r, 2) for r in decode_rate]},
           "llama_cpp_python": llama_cpp.__version__, "kernels": kernel_code(lib), **machine()}
    print(json.dumps(out, indent=2))
    if args.json:
        args.json.write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
