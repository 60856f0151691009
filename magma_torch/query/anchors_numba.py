"""Reciprocal-rank fusion (query/anchors.py ``rrf_fuse``), and the dense temporal-context views'
ranking (``context_scores`` with ``top_ids``), as compiled loops (numba), on CPU.

The tensor version fuses a batch's ranked lists with ``unique`` over (question, event) keys and
a segmented top-k: for one question a dozen tensor operations over about two thousand rows,
whose fixed cost is most of its time. Here each question's lists are summed per event in one
pass, in the same order (list by list), so the fused scores are the same to the bit; a partial
selection and a sort of the best give the same order (tests/test_query.py). Imported lazily when ``retrieval.kernel``
picks numba (query/kernel.py).
"""
from __future__ import annotations

import numba
import numpy as np
import torch

from magma_torch.query.similarity_numba import best_first, exact_cosine, parallel_threads


def rrf_fuse(ranked: torch.Tensor, weight: torch.Tensor, signal: torch.Tensor, rank: torch.Tensor, k: int, top: int,
             num_signals: int, num_nodes: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(ids [B, top], fused scores [B, top], ranks [B, top, num_signals]) of the lists ``ranked`` [B, T]
    (-1 padded, ids below ``num_nodes``), side by side, column t from signal ``signal[t]`` at 1-based
    ``rank[t]`` with ``weight[t]``."""
    b_size = ranked.shape[0]
    ids = np.full((b_size, top), -1, dtype=np.int64)
    scores = np.zeros((b_size, top))
    ranks = np.zeros((b_size, top, num_signals), dtype=np.int64)
    _fuse(ranked.numpy(), weight.numpy(), signal.numpy(), rank.numpy(), k, num_nodes, ids, scores, ranks)
    return torch.from_numpy(ids), torch.from_numpy(scores), torch.from_numpy(ranks)


@numba.njit(cache=True, nogil=True)
def _fuse(ranked, weight, signal, rank, k, num_nodes, ids, scores, ranks):
    top = ids.shape[1]
    group_of = np.full(num_nodes, -1, dtype=np.int64)   # an event's group in its question, -1: none yet
    for b in range(ranked.shape[0]):
        # Groups in order of first appearance; each sums its contributions in list order, as
        # torch's index_add_ over the concatenated lists does.
        node = np.empty(ranked.shape[1], dtype=np.int64)
        fused = np.empty(ranked.shape[1])
        g = 0
        for t in range(ranked.shape[1]):
            v = ranked[b, t]
            if v < 0:
                continue
            if group_of[v] < 0:
                group_of[v] = g
                node[g], fused[g] = v, 0.0
                g += 1
            fused[group_of[v]] += (1.0 / (k + rank[t])) * weight[t]   # as torch computes w / x for a tensor x
        best = best_first(node[:g], fused[:g], top)
        for j in range(best.shape[0]):
            ids[b, j], scores[b, j] = node[best[j]], fused[best[j]]
        for j in range(best.shape[0]):
            group_of[node[best[j]]] = -2 - j                   # its place in the output, read below
        for t in range(ranked.shape[1]):
            v = ranked[b, t]
            if v >= 0 and group_of[v] <= -2:
                ranks[b, -2 - group_of[v], signal[t]] = rank[t]
        for i in range(g):
            group_of[node[i]] = -1


def context_ranking(cand: torch.Tensor, prev: torch.Tensor, nxt: torch.Tensor, n: int, hop_weights: list[float],
                    sim, chain_dots: torch.Tensor, k: int) -> torch.Tensor:
    """query/anchors.py's dense ``context_scores`` and ``top_ids`` compiled: [B, k] ids of the
    candidates ``cand`` [B, C] (-1 padded, no repeats) whose temporal-context views are most similar
    to their question, best first, ties to the lower id, -1 padded; ``hop_weights[s-1]`` is a
    neighbour's weight at hop s. The loops walk each window, read its cosines (``sim.pairs``'s) and
    sum its squared norm from the predecessor cosines in window_norms' float32 order (numba's
    threads split the candidates); the weighted sum over the window and the square root stay
    torch's reductions, whose float32 results depend on their own order and kernels. So the scores
    are the tensor program's to the bit."""
    scan = sim.matrix is None
    none = np.zeros((1, 1), dtype=np.float32)
    width = 2 * len(hop_weights) + 1
    cos, weight = np.zeros((2, width, *cand.shape), dtype=np.float32)
    sq = np.zeros(cand.shape, dtype=np.float32)
    with parallel_threads():
        _windows(cand.contiguous().numpy(), prev.numpy(), nxt.numpy(), n, np.array(hop_weights, dtype=np.float32),
                 chain_dots.contiguous().numpy(), none if scan else sim.matrix.contiguous().numpy(), scan,
                 sim.queries.contiguous().numpy() if scan else none,
                 sim.embeddings.contiguous().numpy() if scan else none, sim.dtype == torch.float32, cos, weight, sq)
    dot = (torch.from_numpy(weight) * torch.from_numpy(cos)).sum(0)
    norm = torch.from_numpy(sq).clamp(min=0).sqrt().clamp(min=1e-12)
    score = torch.where(cand >= 0, dot / norm, torch.full_like(norm, -np.inf))
    out = np.full((cand.shape[0], k), -1, dtype=np.int64)
    _best_views(cand.numpy(), score.numpy(), out)
    return torch.from_numpy(out)


@numba.njit(cache=True, nogil=True, parallel=True)
def _windows(cand, prev, nxt, n, hop_weights, chain_dots, matrix, scan, queries, rows, round32, cos, weight, sq):
    """Per candidate, its window's cosines and weights in context_scores' stack order (the event, its
    hops back, its hops forward; 0 and 0 for a missing neighbour) and squared norm (window_norms'
    ``sq``); pads are left 0."""
    hops = hop_weights.shape[0]
    width = 2 * hops + 1
    b_size, c_size = cand.shape
    for flat in numba.prange(b_size * c_size):
        b, c = flat // c_size, flat % c_size
        v = cand[b, c]
        if v < 0:
            continue
        # The window x_-h .. x_h (window_norms' order) and its weights; a missing neighbour is -1, weight 0.
        member = np.empty(width, dtype=np.int64)
        w = np.zeros(width, dtype=np.float32)
        member[hops], w[hops] = v, np.float32(1)
        for side in range(2):
            pointer, sign = (prev, -1) if side == 0 else (nxt, 1)
            cur = v
            for s in range(1, hops + 1):
                if cur >= 0:
                    cur = pointer[cur]
                if cur >= n:
                    cur = -1
                member[hops + sign * s] = cur
                if cur >= 0:
                    w[hops + sign * s] = hop_weights[s - 1]
        for t in range(width):
            j = hops if t == 0 else hops - t if t <= hops else t
            if w[j] != 0:
                cos[t, b, c] = _cosine(matrix, scan, queries, rows, round32, b, member[j])
                weight[t, b, c] = w[j]
        square = np.float32(0)
        for j in range(width):
            square = square + w[j] * w[j]
        for j in range(1, width):
            dots = chain_dots[max(member[j], 0)]
            for i in range(j):
                square = square + np.float32(2) * w[i] * w[j] * dots[j - i - 1]
        sq[b, c] = square


@numba.njit(cache=True, nogil=True)
def _cosine(matrix, scan, queries, rows, round32, b, v):
    """cos(question b, event v) in float32, as ``Similarity.pairs`` gives it and context_scores rounds it."""
    if scan:
        return np.float32(exact_cosine(queries, b, rows, v, round32))
    return np.float32(matrix[b, v])


@numba.njit(cache=True, nogil=True)
def _best_views(cand, scores, out):
    """Per row, the ids of the best finite scores, best first, ties to the lower id (top_ids)."""
    for b in range(cand.shape[0]):
        keep = np.nonzero(np.isfinite(scores[b]))[0]
        best = keep[best_first(cand[b][keep], scores[b][keep], out.shape[1])]
        out[b, :best.shape[0]] = cand[b][best]
