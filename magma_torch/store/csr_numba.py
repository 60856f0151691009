"""store/csr.py's neighbourhood reads for numba-compiled code (query/beam_numba.py, query/rerank_numba.py).

A ``CSRSnapshot`` goes in as the tuple of its six arrays (``csr_arrays``); ``gather_rows`` and
``degree`` read it as ``CSRSnapshot.gather`` and ``degree`` do, the main part before the delta.
"""
from __future__ import annotations

import numba
import numpy as np

from magma_torch.store.csr import CSRSnapshot


def csr_arrays(csr: CSRSnapshot) -> tuple:
    return tuple(t.numpy() for t in (csr.rowptr, csr.col, csr.rel, csr.delta_row, csr.delta_col, csr.delta_rel))


@numba.njit(cache=True, nogil=True)
def gather_rows(csr, rows):
    """CSRSnapshot.gather: (position in rows, neighbour, relation) of every out-edge of ``rows``,
    the main part's edges for every row first, then the delta's."""
    rowptr, col, rel, d_row, d_col, d_rel = csr
    n_main = rowptr.shape[0] - 1
    total = 0
    for r in rows:
        if r < n_main:
            total += rowptr[r + 1] - rowptr[r]
    lo = np.searchsorted(d_row, rows, side="left")
    hi = np.searchsorted(d_row, rows, side="right")
    total += np.sum(hi - lo)
    seg = np.empty(total, dtype=np.int64)
    nbr = np.empty(total, dtype=np.int64)
    out_rel = np.empty(total, dtype=np.int64)
    j = 0
    for i in range(rows.shape[0]):
        r = rows[i]
        if r < n_main:
            for e in range(rowptr[r], rowptr[r + 1]):
                seg[j], nbr[j], out_rel[j] = i, col[e], rel[e]
                j += 1
    for i in range(rows.shape[0]):
        for e in range(lo[i], hi[i]):
            seg[j], nbr[j], out_rel[j] = i, d_col[e], d_rel[e]
            j += 1
    return seg, nbr, out_rel


@numba.njit(cache=True, nogil=True)
def degree(csr, row):
    rowptr, _, _, d_row, _, _ = csr
    deg = rowptr[row + 1] - rowptr[row] if row < rowptr.shape[0] - 1 else 0
    return deg + np.searchsorted(d_row, row, side="right") - np.searchsorted(d_row, row, side="left")
