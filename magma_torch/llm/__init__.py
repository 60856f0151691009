"""LLM backends behind one interface (``base.LLM``): vLLM offline engine, OpenAI-compatible
HTTP (OpenAI API / vllm serve / llama.cpp server), a managed llama.cpp server, transformers.

Backends are imported lazily: ``from magma_torch.llm import OpenAIBackend`` pulls only httpx;
vllm, llama_cpp and transformers are imported by their own backend when it is built."""
from __future__ import annotations

import importlib

from .base import LLM, Generation, LLMInterfaceError, LLMUnavailable, Prompt, Usage

_LAZY = {
    "OpenAIBackend": "openai_backend",
    "LlamaCppBackend": "llamacpp_backend",
    "LlamaCppServer": "llamacpp_backend",
    "TransformersBackend": "transformers_backend",
    "VLLMBackend": "vllm_backend",
}

__all__ = ["LLM", "Generation", "LLMInterfaceError", "LLMUnavailable", "Prompt", "Usage", "build_llm", *_LAZY]


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def build_llm(cfg, setting: str = "llm") -> LLM | None:
    """Build the backend of a ``conf/llm/*.yaml`` node (``_target_`` + kwargs), or None for
    ``llm=none`` / a missing node. Accepts the llm node itself or a full config with ``.llm``.
    ``setting``: where the node sits (``llm``, ``judge``, ``consolidation.llm``), as errors name it."""
    if cfg is None:
        return None
    from omegaconf import DictConfig, OmegaConf

    if isinstance(cfg, dict):
        cfg = OmegaConf.create(cfg)
    if isinstance(cfg, DictConfig) and "_target_" not in cfg and "llm" in cfg:
        cfg = cfg.llm
    if cfg is None or not isinstance(cfg, DictConfig) or cfg.get("_target_") in (None, "", "none"):
        return None
    from magma_torch.config.build import instantiate   # lazy: Hydra, only when a backend is built
    from magma_torch.config.schema import ConfigError

    # a backend's own refusal (LLMUnavailable, a ConfigError naming an llm.* setting) comes out as it is,
    # its "llm." renamed where the node is the judge's or the consolidator's
    try:
        return instantiate(OmegaConf.to_container(cfg, resolve=True), setting, _convert_="all")
    except ConfigError as err:
        if setting == "llm" or not str(err).startswith("llm."):
            raise
        raise ConfigError(f"{setting}.{str(err)[len('llm.'):]}") from None
