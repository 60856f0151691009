"""Reciprocal-rank fusion (query/anchors.py ``rrf_fuse``) as compiled loops (numba), on CPU.

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
        best = _best(node[:g], fused[:g], top)
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


@numba.njit(cache=True, nogil=True)
def _best(node, fused, top):
    """Indices of the ``top`` highest ``fused``, best first, ties to the lower ``node``."""
    g = node.shape[0]
    if g > top:      # a partial selection first: the top-th highest score, and the ties at it by node
        bound = -np.partition(-fused, top - 1)[top - 1]
        above = np.nonzero(fused > bound)[0]
        tied = np.nonzero(fused == bound)[0]
        tied = tied[np.argsort(node[tied])][:top - above.shape[0]]
        keep = np.concatenate((above, tied))
    else:
        keep = np.arange(g)
    by_node = keep[np.argsort(node[keep])]
    return by_node[np.argsort(-fused[by_node], kind="mergesort")]
