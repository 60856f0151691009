"""Which implementation runs the query steps that have a compiled twin (``retrieval.kernel``).

The tensor programs (query/beam.py's search, query/rerank.py's graph support, query/anchors.py's
reciprocal-rank fusion) pay a fixed cost of 5-20 µs per tensor operation on CPU, which is most of
their time for one question. Their twins, query/beam_numba.py, query/rerank_numba.py and
query/anchors_numba.py, are the same computations as loops compiled by numba, an optional
accelerator (the ``fast`` extra) imported only when picked: "numba", or "auto" where it is
installed. CUDA always takes the tensor programs.
"""
from __future__ import annotations

import functools
import importlib.util

import torch

from magma_torch.config.schema import KERNELS, ConfigError
from magma_torch.errors import MissingDependencyError


def resolve_kernel(kernel: str) -> str:
    """"torch" or "numba" for the setting ``kernel`` ("auto": numba when installed)."""
    if kernel not in KERNELS:
        raise ConfigError(f"retrieval.kernel must be one of {', '.join(KERNELS)}, got {kernel!r}")
    if kernel == "torch":
        return kernel
    if not _numba_installed():
        if kernel == "numba":
            raise MissingDependencyError("retrieval.kernel=numba needs numba: pip install 'magma-torch[fast]' "
                                         "(retrieval.kernel=auto runs without it)")
        return "torch"
    return "numba"


def compiled(kernel: str, device: torch.device) -> bool:
    """Whether a step on ``device`` runs compiled under the resolved ``kernel``."""
    return kernel == "numba" and torch.device(device).type == "cpu"


def search_kernel(kernel: str, score_dtype: torch.dtype, device: torch.device) -> str:
    """The beam search a batch runs: the compiled one on CPU, for every similarity way
    (query/similarity.py); CUDA takes the tensor program, and so do half-precision cosines
    (``retrieval.score_dtype`` float16 or bfloat16), which numba has no type for."""
    return "numba" if compiled(kernel, device) and score_dtype in (torch.float32, torch.float64) else "torch"


@functools.cache
def _numba_installed() -> bool:
    return importlib.util.find_spec("numba") is not None
