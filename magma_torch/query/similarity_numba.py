"""Exact cosines of (question, event) pairs, and each question's top k, as compiled loops (numba), on CPU.

Under a pre-filtering scan (query/similarity.py) every cosine the query path keeps is computed
again from the float32 rows: the dense ranking's band, the time ranking's in-window events, the
temporal-context views, the re-ranker's features and the beam's pairs near the drop threshold,
some five thousand pairs for one question over 10^5 events. The tensor way gathers each pair's
row into a temporary and takes the products from there; here each pair's dot product reads the
two rows in place, pairs split between the intra-op threads torch uses. Imported lazily when
``retrieval.kernel`` picks numba (query/kernel.py).
"""
from __future__ import annotations

import contextlib
import threading

import numba
import numpy as np
import torch


# Numba's workqueue pool (its layer where neither OpenMP nor TBB is, e.g. on macOS) aborts the
# process when two threads enter it at once, as two readers of one memory would.
_WORKQUEUE = threading.RLock()


@contextlib.contextmanager
def parallel_threads():
    """Around numba's parallel loops: they run on as many threads as torch's operations, and torch's
    count stays as it was (numba's OpenMP pool, launched by the first call, resets the OpenMP thread
    count that torch reads: a user's ``torch.set_num_threads`` was lost); under the workqueue layer,
    one caller at a time."""
    wanted = torch.get_num_threads()
    threads = max(1, min(wanted, numba.config.NUMBA_NUM_THREADS))
    if numba.get_num_threads() != threads:     # the first call launches numba's pool
        numba.set_num_threads(threads)
    if torch.get_num_threads() != wanted:
        torch.set_num_threads(wanted)
    if numba.threading_layer() == "workqueue":
        with _WORKQUEUE:
            yield
    else:
        yield


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
    with parallel_threads():
        _pair_cosines(queries.contiguous().numpy(), q_idx.numpy(), rows.contiguous().numpy(), v_idx.numpy(),
                      dtype == torch.float32, out)
    return torch.from_numpy(out).to(dtype)


def top_k(values: torch.Tensor, error: torch.Tensor | None, k: int, stride: int, queries: torch.Tensor | None,
          rows: torch.Tensor | None, dtype: torch.dtype) -> torch.Tensor:
    """[B, k] ids of each row's k highest cosines, best first, ties to the lower id, -1 padded, as
    ``Similarity.top_k`` finds them: over a ``values`` [B, N] matrix of exact cosines (``error``
    None), or of approximate ones within ``error`` [B] of the exact, which are read from ``queries``
    and the event ``rows`` for every event within twice that of the k-th approximate one (those
    reads split between the threads, as ``pair_cosines``'s)."""
    b_size, n = values.shape
    k_eff = min(k, n)
    scan = error is not None
    matrix = values.float().contiguous().numpy() if scan else values.contiguous().numpy()
    floors, counts = np.empty(b_size), np.empty(b_size, dtype=np.int64)
    offsets = np.zeros(b_size + 1, dtype=np.int64)
    out = np.full((b_size, k), -1, dtype=np.int64)
    with parallel_threads():
        _band_floors(matrix, error.double().numpy() if scan else np.zeros(b_size), k_eff, stride, floors)
        _count_at_least(matrix, floors, counts)
        np.cumsum(counts, out=offsets[1:])
        band = np.empty(offsets[-1], dtype=np.int64)
        _fill_at_least(matrix, floors, offsets, band)
        q_idx = np.repeat(np.arange(b_size), counts)
        exact = (pair_cosines(queries, torch.from_numpy(q_idx), rows, torch.from_numpy(band), dtype).double().numpy()
                 if scan else matrix[q_idx, band].astype(np.float64))
        _best(offsets, band, exact, k_eff, out)
    return torch.from_numpy(out)


@numba.njit(cache=True, nogil=True, parallel=True)
def _band_floors(values, error, k, stride, floors):
    """Per row, twice ``error`` below its k-th value: the k-th is found among the values at or above
    a bound that about 2k of them pass (the k_sample-th best of every stride-th value, the tensor
    way's sampled bound), or among all where that leaves fewer than k."""
    n = values.shape[1]
    k_sample = 2 * k // stride + 8
    for b in numba.prange(values.shape[0]):
        row = values[b]
        bound = -np.inf
        if 4 * k_sample * stride <= n:
            bound = -np.partition(-row[::stride].astype(np.float64), k_sample - 1)[k_sample - 1]
        passed = row[row >= bound]
        if passed.shape[0] < k:
            passed = row
        floors[b] = -np.partition(-passed.astype(np.float64), k - 1)[k - 1] - 2 * error[b]


@numba.njit(cache=True, nogil=True, parallel=True)
def _count_at_least(values, floors, counts):
    for b in numba.prange(values.shape[0]):
        counts[b] = np.sum(values[b] >= floors[b])


@numba.njit(cache=True, nogil=True, parallel=True)
def _fill_at_least(values, floors, offsets, band):
    """Each row's ids at or above its floor, ascending, at band[offsets[b]:offsets[b + 1]]."""
    for b in numba.prange(values.shape[0]):
        j = offsets[b]
        for i in range(values.shape[1]):
            if values[b, i] >= floors[b]:
                band[j] = i
                j += 1


@numba.njit(cache=True, nogil=True, parallel=True)
def _best(offsets, band, exact, k, out):
    """The k best of each row's band by ``exact``, best first, ties to the lower id."""
    for b in numba.prange(offsets.shape[0] - 1):
        lo, hi = offsets[b], offsets[b + 1]
        best = best_first(band[lo:hi], exact[lo:hi], k)
        out[b, :best.shape[0]] = band[lo:hi][best]


@numba.njit(cache=True, nogil=True)
def best_first(ids, scores, top):
    """Indices of the ``top`` highest ``scores``, best first, ties to the lower of ``ids`` (distinct)."""
    g = ids.shape[0]
    if g > top:      # a partial selection first: the top-th highest score, and the ties at it by id
        bound = -np.partition(-scores, top - 1)[top - 1]
        above = np.nonzero(scores > bound)[0]
        tied = np.nonzero(scores == bound)[0]
        tied = tied[np.argsort(ids[tied])][:top - above.shape[0]]
        keep = np.concatenate((above, tied))
    else:
        keep = np.arange(g)
    by_id = keep[np.argsort(ids[keep])]
    return by_id[np.argsort(-scores[by_id], kind="mergesort")]
