"""Exact cosines of (question, event) pairs as compiled loops (numba), on CPU.

Under a pre-filtering scan (query/similarity.py) every cosine the query path keeps is computed
again from the float32 rows: the dense ranking's band, the time ranking's in-window events, the
temporal-context views, the re-ranker's features and the beam's pairs near the drop threshold,
some five thousand pairs for one question over 10^5 events. The tensor way gathers each pair's
row into a temporary and takes the products from there; here each pair's dot product reads the
two rows in place, pairs split between the intra-op threads torch uses. Imported lazily when
``retrieval.kernel`` picks numba (query/kernel.py).
"""
from __future__ import annotations

import numba
import numpy as np
import torch


@numba.njit(cache=True, nogil=True, fastmath={"reassoc"})
def exact_cosine(queries, b, rows, v, round32):
    """queries[b] . rows[v], summed in float64; ``round32``: rounded to float32, the scores' dtype.
    Reassociation lets the sum run in vector lanes (the float64 sums' order moves their value by far
    less than float32's rounding); in order, the chain of dependent adds took four times as long."""
    acc = 0.0
    for i in range(rows.shape[1]):
        acc += np.float64(queries[b, i]) * np.float64(rows[v, i])
    return np.float64(np.float32(acc)) if round32 else acc


@numba.njit(cache=True, nogil=True, parallel=True)
def _pair_cosines(queries, q_idx, rows, v_idx, round32, out):
    for i in numba.prange(q_idx.shape[0]):
        out[i] = exact_cosine(queries, q_idx[i], rows, v_idx[i], round32)


def pair_cosines(queries: torch.Tensor, q_idx: torch.Tensor, rows: torch.Tensor, v_idx: torch.Tensor,
                 dtype: torch.dtype) -> torch.Tensor:
    """queries[q_idx[i]] . rows[v_idx[i]] for every i, in ``dtype`` (float32 or float64), as
    store/tables.py's ``row_dots`` computes them up to the order of each sum."""
    out = np.empty(q_idx.numel(), dtype=np.float64)
    threads = max(1, min(torch.get_num_threads(), numba.config.NUMBA_NUM_THREADS))
    if numba.get_num_threads() != threads:   # torch's setting, read each call: a user may change it
        numba.set_num_threads(threads)
    _pair_cosines(queries.contiguous().numpy(), q_idx.numpy(), rows.contiguous().numpy(), v_idx.numpy(),
                  dtype == torch.float32, out)
    return torch.from_numpy(out).to(dtype)
