"""A local Hugging Face causal LM through transformers (GGUF files included: ``gguf_file=``,
dequantised on load; needs the ``transformers`` extra: accelerate + gguf).

Batched greedy/sampled generation with the tokenizer's chat template and left padding. There
is no constrained decoding here: with a schema the model is told to answer with JSON only, the
output is parsed leniently and validated, and failing items are retried (sampled, so a retry
can differ) before they are recorded as ``Generation(error=...)``. Token counts come from the
tokenizer."""
from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

from magma_torch.errors import MissingDependencyError

from .base import Generation, Prompt, Usage, finish_batch
from .schema import OutputError, parse_output, to_json_schema, to_messages, with_json_instruction

log = logging.getLogger(__name__)


def _import_transformers():
    try:
        import torch
        import transformers
    except ImportError as e:
        raise MissingDependencyError("llm=transformers (or judge=transformers) needs transformers: "
                                     "pip install 'magma-torch[transformers]'") from e
    return torch, transformers


class TransformersBackend:
    def __init__(self, model: str | None = None, gguf_file: str | None = None, device: str = "auto",
                 dtype: str = "auto", batch_size: int = 8, max_retries: int = 2, retry_temperature: float = 0.7,
                 trust_remote_code: bool = False, seed: int = 0, name: str = "transformers"):
        torch, transformers = _import_transformers()
        if model is None:   # the bundled SmolLM2-135M-Instruct GGUF
            from .llamacpp_backend import bundled_smollm2

            p = bundled_smollm2()
            model, gguf_file = str(p.parent), p.name
        elif gguf_file is None and str(model).endswith(".gguf") and Path(model).is_file():
            model, gguf_file = str(Path(model).parent), Path(model).name
        if gguf_file is not None:
            for mod in ("gguf", "accelerate"):
                try:
                    __import__(mod)
                except ImportError as e:
                    raise MissingDependencyError(f"llm=transformers with a GGUF file (llm.model, llm.gguf_file; "
                                                 f"the default bundled SmolLM2 is one) needs {mod}: "
                                                 "pip install 'magma-torch[transformers]'") from e
        self.name = name
        self.usage = Usage()
        self.batch_size = max(1, int(batch_size))
        self.max_retries = max(0, int(max_retries))
        self.retry_temperature = float(retry_temperature)
        self.seed = seed
        self.identity = {"backend": "transformers", "model": Path(str(model)).name, "gguf_file": gguf_file,
                         "dtype": dtype, "seed": seed, "retry_temperature": self.retry_temperature}
        if device == "auto":
            device = "cuda" if torch.cuda.is_available() else "cpu"
        self.device = torch.device(device)
        kw = {"trust_remote_code": trust_remote_code}
        if gguf_file is not None:
            kw["gguf_file"] = gguf_file
        self.tokenizer = transformers.AutoTokenizer.from_pretrained(model, **kw)
        self.tokenizer.padding_side = "left"
        if self.tokenizer.pad_token is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        torch_dtype = "auto" if dtype == "auto" else getattr(torch, dtype)
        self.model = transformers.AutoModelForCausalLM.from_pretrained(model, dtype=torch_dtype, **kw)
        self.model.to(self.device).eval()
        self._torch = torch

    def _render(self, messages: list[dict]) -> str:
        if getattr(self.tokenizer, "chat_template", None):
            return self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        return "\n".join(f"{m['role']}: {m['content']}" for m in messages) + "\nassistant:"

    def _batch(self, texts: list[str], max_tokens: int, temperature: float) -> list[tuple[str, int, int]]:
        torch, tok = self._torch, self.tokenizer
        enc = tok(texts, return_tensors="pt", padding=True, add_special_tokens=False).to(self.device)
        gen_kw = {"max_new_tokens": int(max_tokens), "pad_token_id": tok.pad_token_id}
        if temperature > 0:
            gen_kw.update(do_sample=True, temperature=float(temperature), top_p=1.0)
        else:
            gen_kw.update(do_sample=False, temperature=None, top_p=None, top_k=None)
        with torch.inference_mode():
            out = self.model.generate(**enc, **gen_kw)
        new = out[:, enc["input_ids"].shape[1]:]
        eos = self.model.generation_config.eos_token_id
        eos_ids = set(eos if isinstance(eos, list) else [eos]) | {tok.eos_token_id}
        res = []
        for i in range(len(texts)):
            ids = new[i].tolist()
            n = len(ids)
            for j, t in enumerate(ids):
                if t in eos_ids:
                    n = j + 1
                    break
            text = tok.decode(ids[:n], skip_special_tokens=True).strip()
            res.append((text, int(enc["attention_mask"][i].sum()), n))
        return res

    def generate(self, prompts: Sequence[Prompt], schema: dict | type | None = None, max_tokens: int = 256,
                 temperature: float = 0.0) -> list[Generation]:
        prompts = list(prompts)
        if schema is not None:
            to_json_schema(schema)
        msgs = [to_messages(p) for p in prompts]
        if schema is not None:
            msgs = [with_json_instruction(m, schema) for m in msgs]
        texts = [self._render(m) for m in msgs]
        p_tok = [0] * len(prompts)
        c_tok = [0] * len(prompts)
        done: dict[int, Generation] = {}
        reasons: dict[int, str] = {}
        todo = list(range(len(prompts)))
        self._torch.manual_seed(self.seed)
        for attempt in range(self.max_retries + 1 if schema is not None else 1):
            temp = temperature if attempt == 0 else max(temperature, self.retry_temperature)
            retry = []
            for s in range(0, len(todo), self.batch_size):
                idx = todo[s:s + self.batch_size]
                try:
                    outs = self._batch([texts[i] for i in idx], max_tokens, temp)
                except Exception as e:   # e.g. out of memory: record, do not abort the run
                    for i in idx:
                        reasons[i] = f"generation failed: {type(e).__name__}: {str(e)[:200]}"
                        retry.append(i)
                    continue
                for i, (text, pt, ct) in zip(idx, outs, strict=True):
                    p_tok[i] += pt
                    c_tok[i] += ct
                    if schema is None:
                        done[i] = Generation(text, None, p_tok[i], c_tok[i])
                        continue
                    try:
                        done[i] = Generation(text, parse_output(text, schema, lenient=True), p_tok[i], c_tok[i])
                    except OutputError as e:
                        reasons[i] = str(e)
                        retry.append(i)
            todo = retry
            if not todo:
                break
        n_att = self.max_retries + 1 if schema is not None else 1
        return finish_batch(done, {i: reasons[i] for i in todo}, n_att, p_tok, c_tok, self.usage)

    def close(self) -> None:
        self.model = None
        if self._torch.cuda.is_available():
            self._torch.cuda.empty_cache()
