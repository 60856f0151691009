"""cos(q, v) for a batch of questions, computed once per batch and read by every step of
the query path: the dense ranking, the time ranking, the temporal-context views and the
beam's transition scores.

Embeddings are L2-normalised, so the inner product is the cosine. Three ways to the same
exact values (up to the order of each sum), chosen per batch (``SimilarityConfig``) and by
the store's copy of the embeddings (``scan_dtype``, magma_torch/hardware.py):

- ``matrix``: the [B, N] product Q·Eᵀ in the score dtype. One streaming pass over the
  embeddings serves the whole batch; every later lookup is an index into it. Wins once a
  batch is large enough for the matmul to be compute-bound.
- ``columns``: the same matrix for one question, from the store's float32 copy of the
  embeddings kept as columns [d, N]: the matrix-vector product streams each of the d rows once
  where the row-major one takes N dot products of d (on the 2-core Xeon VM, one question over
  10^5 events: about 7 ms against 11, and 8.5 for the float16 scan below; BENCHMARKS.md).
- ``scan``: a product with the store's half-precision copy of the embeddings (half the
  bytes of the pass that bounds a small batch; torch's product, or FBGEMM's for the packed
  float16 copy, store/packed_half.py, with its own bound) finds the top-k *candidates*; their exact
  scores, and every other pair's, come from the fp32 rows themselves. Rounding both vectors
  and the product to a format of unit roundoff u (accumulating in fp32) moves q.v by at most
  (3u + u^2)|q||v| < 2 eps |q| = 4u |q| for unit events (the store holds unit rows), so
  every event of the exact top-k scores within twice that of the k-th approximate score:
  that band is rescored exactly and the result equals the matrix way's.

FAISS's flat index is not used here: it returns top-k lists only, and the beam needs
scores of arbitrary (question, event) pairs from the same pass.
"""
from __future__ import annotations

import torch

from magma_torch.config.schema import SimilarityConfig
from magma_torch.query.segment import rank_in_group, top_in_group
from magma_torch.store.packed_half import PackedView
from magma_torch.store.tables import COLUMNS_DTYPE, row_dots


SAMPLE_STRIDE = 64     # top_k's bound on CPU reads every 64th cosine (see _above_sampled_bound)


class Similarity:
    """Exact cosines of questions ``queries`` [B, d] with events ``embeddings`` [N, d]; ``compiled``:
    the scan's exact re-reads run as compiled loops (query/similarity_numba.py) on CPU."""

    def __init__(self, embeddings: torch.Tensor, scan_embeddings: torch.Tensor | PackedView | None, queries: torch.Tensor,
                 cfg: SimilarityConfig = SimilarityConfig(), dtype: torch.dtype = torch.float32,
                 compiled: bool = False):
        self.embeddings, self.dtype = embeddings, dtype
        self.compiled = compiled and queries.device.type == "cpu" and dtype in (torch.float32, torch.float64)
        self.queries = queries.to(dtype)
        self.num_events, b_size = embeddings.shape[0], queries.shape[0]
        self.mode = self.way(b_size, scan_embeddings, cfg)
        self.matrix = self.approx = self.error = None
        if self.mode == "matrix":
            self.matrix = self.queries @ embeddings.to(dtype).T
        elif self.mode == "columns":
            self.matrix = self.queries @ scan_embeddings.to(dtype)
        elif isinstance(scan_embeddings, PackedView):   # scan, FBGEMM's float16 product (store/packed_half.py)
            self.approx = scan_embeddings.product(self.queries, embeddings)
            self.error = self._scored_error(scan_embeddings.error_bound(self.queries))
        else:   # scan: approximate [B, N] cosines and the bound on their error, see the module doc
            self.approx = self.queries.to(scan_embeddings.dtype) @ scan_embeddings.T
            self.error = self._scored_error(2 * torch.finfo(scan_embeddings.dtype).eps
                                            * torch.linalg.vector_norm(self.queries.float(), dim=1))

    def _scored_error(self, bound: torch.Tensor) -> torch.Tensor:
        """[B] the scan's bound on |approximate - exact cosine|, widened by the rounding of the approximate
        cosines to a score dtype narrower than theirs (up to eps(score dtype) |q|): ``pairs`` and the k-th
        value of ``top_k`` compare them rounded. Kept in float32 or wider: rounded to bfloat16, the bound
        itself could fall below the error. Before, with bfloat16 scores and the packed copy, pairs at a
        floor came back below it and ``top_k`` missed members of the exact top k, even padding with -1."""
        wide = torch.promote_types(self.dtype, torch.float32)
        bound = bound.to(wide)
        score_eps = torch.finfo(self.dtype).eps
        if score_eps > torch.finfo(self.approx.dtype).eps:
            bound = bound + score_eps * torch.linalg.vector_norm(self.queries.to(wide), dim=1)
        return bound

    @staticmethod
    def way(batch_size: int, scan_embeddings: torch.Tensor | PackedView | None, cfg: SimilarityConfig) -> str:
        """Which way a batch goes: ``matrix`` from ``matrix_min_batch`` questions (or without a
        copy), else the copy's: ``scan`` for a half-precision copy; for the float32 [d, N] copy,
        ``columns`` for one question and ``matrix`` for more (BLAS streams the columns for a
        matrix-vector product only: at 10^5 events on the Xeon VM, 6.4 ms for one question
        against 12.4 from the rows, but 20-24 ms for 2 to 8 against 10-20 from the rows;
        experiments/results/bench/history/scan_kernels_xeon_batches_2026-12-03.json)."""
        if scan_embeddings is None or batch_size >= cfg.matrix_min_batch:
            return "matrix"
        if isinstance(scan_embeddings, torch.Tensor) and scan_embeddings.dtype == COLUMNS_DTYPE:
            return "columns" if batch_size == 1 else "matrix"
        return "scan"

    @property
    def batch_size(self) -> int:
        return self.queries.shape[0]

    def pairs(self, q_idx: torch.Tensor, nodes: torch.Tensor, floor: float | None = None) -> torch.Tensor:
        """cos(queries[q_idx[i]], embeddings[nodes[i]]) for every i. With ``floor``, values
        below it may be approximate (they are still below it): the scan then reads exact rows
        only for pairs whose approximate cosine comes within its error bound of ``floor``."""
        keys = q_idx * self.num_events + nodes
        if self.matrix is not None:
            return self.matrix.view(-1).index_select(0, keys)
        if floor is None:
            return self._exact(keys)
        out = self.approx.view(-1).index_select(0, keys).to(self.dtype)
        near = (out >= floor - self.error.index_select(0, q_idx)).nonzero().squeeze(1)
        return out.index_copy_(0, near, self._exact(keys.index_select(0, near)))

    @staticmethod
    def _above_sampled_bound(values: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor] | tuple[None, None]:
        """(row, id) pairs, in that order, of the [B, N] ``values`` at or above a bound that leaves
        at least ``k`` per row, so they hold every row's top k; (None, None) on CUDA, for a small
        matrix (the bound would pass a quarter of it), or when a row's bound leaves fewer than k.

        On CPU torch.topk over 10^5 events takes ~1.9 ms a question for the dense ranking's top
        1000 (~0.8 ms over the scan's float16 values). The bound is the ``k_sample``-th best of
        every ``SAMPLE_STRIDE``-th value, about 2k / stride: it is passed by about 2k of the row,
        rarely fewer than k (then topk decides), and the compare, nonzero and a sort of those take
        ~0.6 ms (~0.2 for float16)."""
        b_size, n = values.shape
        k_sample = 2 * k // SAMPLE_STRIDE + 8
        if values.device.type != "cpu" or 4 * k_sample * SAMPLE_STRIDE > n:   # a quarter of the row or more
            return None, None
        sample = values[:, ::SAMPLE_STRIDE]
        bound = torch.topk(sample, k_sample, dim=1, sorted=False).values.min(dim=1, keepdim=True).values
        r, e = (values >= bound).nonzero(as_tuple=True)
        if bool((torch.bincount(r, minlength=b_size) < k).any()):
            return None, None
        return r, e

    def _exact(self, keys: torch.Tensor) -> torch.Tensor:
        # The tensor way reads each distinct pair's row once: hubs repeat the same (question, event)
        # pairs. The compiled loops read each pair's rows in place, so a repeat costs one dot product.
        if self.compiled:
            from magma_torch.query.similarity_numba import pair_cosines   # lazy: an optional accelerator

            return pair_cosines(self.queries, keys // self.num_events, self.embeddings, keys % self.num_events,
                                self.dtype)
        # summed in float64 and rounded, as the compiled loops sum them, so that both give one value per pair
        distinct, inverse = torch.unique(keys, return_inverse=True)
        q, v = distinct // self.num_events, distinct % self.num_events
        return row_dots(self.queries, q, self.embeddings, v, self.dtype, acc=torch.float64).index_select(0, inverse)

    def _approx_kth(self, k: int) -> torch.Tensor:
        """[B, 1] each row's k-th highest approximate cosine, in the score dtype: picked from the
        values above a sampled bound (``_above_sampled_bound``) where there is one, else torch.topk."""
        r, e = self._above_sampled_bound(self.approx, k)
        if r is None:
            return torch.topk(self.approx, k, dim=1).values[:, -1:].to(self.dtype)
        values = self.approx.view(-1).index_select(0, r * self.num_events + e)
        best = top_in_group(r, values, k, self.batch_size)   # k per row, row by row, best first
        return values.index_select(0, best).view(self.batch_size, k)[:, -1:].to(self.dtype)

    def top_k(self, k: int) -> torch.Tensor:
        """[B, k] ids of each question's k most similar events, best first (ties: lower id; an exact
        tie across the k-th place is cut to the lower id too), -1 padded when there are fewer than k
        events."""
        b_size, n = self.batch_size, self.num_events
        k_eff = min(k, n)
        out = torch.full((b_size, k), -1, dtype=torch.long, device=self.queries.device)
        if k_eff == 0:
            return out
        if self.compiled:   # the same selection as one compiled pass per question
            from magma_torch.query.similarity_numba import top_k   # lazy: an optional accelerator

            return top_k(self.approx if self.matrix is None else self.matrix,
                         None if self.matrix is not None else self.error, k, SAMPLE_STRIDE,
                         self.queries, self.embeddings, self.dtype)
        if self.matrix is not None:
            r, e = self._above_sampled_bound(self.matrix, k_eff)
            if r is None:   # every value at or above the row's k-th (torch.topk alone cut a tie across it anyhow)
                kth = torch.topk(self.matrix, k_eff, dim=1).values[:, -1:]
                r, e = (self.matrix >= kth).nonzero(as_tuple=True)
            exact = self.matrix.view(-1).index_select(0, r * n + e)
        else:   # every event within the error band of the k-th approximate cosine, rescored
            kth = self._approx_kth(k_eff)
            r, e = (self.approx >= kth - 2 * self.error[:, None]).nonzero(as_tuple=True)
            exact = self._exact(r * n + e)
        best = top_in_group(r, exact, k_eff, b_size)     # pairs are in (row, id) order: ties to the lower id
        r, e = r[best], e[best]
        out[r, rank_in_group(r)] = e
        return out

