"""Algorithm 1's beam search as compiled loops (numba), one question after another, on CPU.

The tensor program (query/beam.py) pays a fixed cost of 5-20 µs per tensor operation on CPU,
and one question's search is some 400 of them over a few thousand rows, so a single question
spends most of its beam time in that overhead. Here the same search is plain loops compiled to
machine code: the same candidates in the same order (direct edges, then entity hops, then
episode hops; each CSR's main part before its delta), the same float64 scores and the same
tie rules, so it returns what the tensor program returns (tests/test_beam.py runs both, and the
reference, on the same graphs). It reads cosines from the batch's similarity matrix (the
``matrix`` and ``columns`` ways, query/similarity.py). Under the half-precision scan it reads the
approximate matrix and, as ``Similarity.pairs`` with a floor does, computes a pair's cosine from
the float32 rows only when the approximate one comes within the scan's error bound of the drop
threshold (each such pair once per question): below that bound the pair is dropped either way.

Imported lazily, only when ``retrieval.kernel`` picks it (query/kernel.py): numba is an
optional accelerator (the ``fast`` extra), as pyg-lib is for PyG.
"""
from __future__ import annotations

import math

import numba
import numpy as np
import torch

from magma_torch.query.similarity import Similarity
from magma_torch.query.similarity_numba import exact_cosine
from magma_torch.store.csr_numba import csr_arrays, degree, gather_rows
from magma_torch.store.graph import REL_ID, GraphSnapshot

NUM_RELATIONS = len(REL_ID)


def beam_search(graph: GraphSnapshot, sim: Similarity, intents: torch.Tensor, anchors: torch.Tensor,
                anchor_scores: torch.Tensor, lam_w: torch.Tensor, removed: torch.Tensor | None, cfg) -> tuple:
    """The columns of a ``BeamResult`` (query, node, score, parent, relation, via, depth) for the
    questions of ``sim`` (their cosines with the snapshot's events); the arguments are
    query/beam.py's ``beam_search``'s, with ``lam_w`` = lambda1 * w and ``removed`` its zero-weight
    mask (None: no relation removed)."""
    b_size = anchors.shape[0]
    scan = sim.matrix is None
    if scan:   # approximate cosines, their error bound, and the rows that give exact ones
        matrix, error = sim.approx.float().numpy(), sim.error.double().numpy()
        queries, rows = sim.queries.contiguous().numpy(), sim.embeddings.to(sim.dtype).contiguous().numpy()
    else:
        matrix, error = sim.matrix.contiguous().numpy(), np.zeros(b_size)
        queries = rows = np.zeros((1, 1), dtype=np.float32)
    round32 = sim.dtype == torch.float32
    cap = b_size * cfg.max_nodes
    out_long = np.empty((6, cap), dtype=np.int64)
    out_score = np.empty(cap, dtype=np.float64)
    no_removal = np.zeros((1, 1), dtype=np.bool_)
    count = _search(matrix, scan, error, queries, rows, round32, intents.numpy(), anchors.numpy(),
                    anchor_scores.to(torch.float64).numpy(),
                    lam_w.numpy(), no_removal if removed is None else removed.numpy(), removed is not None,
                    csr_arrays(graph.event_adj), csr_arrays(graph.event_entity), csr_arrays(graph.entity_event),
                    csr_arrays(graph.event_episode), csr_arrays(graph.episode_event), graph.num_events,
                    float(cfg.gamma), float(cfg.lambda2), float(cfg.drop_threshold), int(cfg.max_depth),
                    int(cfg.beam_width), int(cfg.max_nodes), out_long, out_score)
    q, node, parent, rel, via, depth = (torch.from_numpy(out_long[i, :count]) for i in range(6))
    score = torch.from_numpy(out_score[:count])
    cols = (q, node, score, parent, rel, via, depth)
    if b_size > 1:   # the tensor program's row order: depth by depth, questions in order within one
        order = torch.sort(depth, stable=True).indices
        cols = tuple(c.index_select(0, order) for c in cols)
    return cols


@numba.njit(cache=True, nogil=True)
def specificity(ent_ev, entity, n):
    """beam.entity_specificity of one entity: log(N / df) / log(N), df the events that mention it."""
    if n < 2:
        return 1.0
    return min(max(math.log(n / max(degree(ent_ev, entity), 1)) / math.log(n), 0.0), 1.0)


@numba.njit(cache=True, nogil=True)
def _emit(out_long, out_score, row, query, node, score, parent, relation, via, depth):
    out_long[0, row], out_long[1, row], out_long[2, row] = query, node, parent
    out_long[3, row], out_long[4, row], out_long[5, row] = relation, via, depth
    out_score[row] = score


@numba.njit(cache=True, nogil=True)
def _search(matrix, scan, error, queries, event_rows, round32, intents, anchors, anchor_scores, lam_w, removed,
            any_removed, adj, ev_ent, ent_ev, ev_epi, epi_ev, n, gamma, lambda2, drop, max_depth, beam_width, max_nodes,
            out_long, out_score):
    visited = np.zeros(n, dtype=np.bool_)
    exact = np.full(n if scan else 0, np.nan)     # scan: this question's exact cosines, once computed
    computed = np.empty(n if scan else 0, dtype=np.int64)
    n_computed = 0
    slot_of = np.full(n, -1, dtype=np.int64)      # a node's candidate slot at the current depth
    rows = 0
    for b in range(anchors.shape[0]):
        first_row = rows
        intent = intents[b]
        # Anchors in score order (ties: lower id), at most max_nodes of them.
        valid = anchors[b] >= 0
        a_node, a_score = anchors[b][valid], anchor_scores[b][valid]
        by_node = np.argsort(a_node, kind="mergesort")
        order = by_node[np.argsort(-a_score[by_node], kind="mergesort")][:max_nodes]
        f_node, f_score = a_node[order], a_score[order]
        for i in range(f_node.shape[0]):
            visited[f_node[i]] = True
            _emit(out_long, out_score, rows, b, f_node[i], f_score[i], -1, -1, -1, 0)
            rows += 1
        count = f_node.shape[0]
        for depth in range(1, max_depth + 1):
            room = max_nodes - count
            if room <= 0 or f_node.shape[0] == 0:
                break
            seg, nbr, rel = gather_rows(adj, f_node)
            seg1, ent, _ = gather_rows(ev_ent, f_node)
            seg2, nbr2, rel2 = gather_rows(ent_ev, ent)
            seg3, epi, _ = gather_rows(ev_epi, f_node)
            seg4, nbr4, rel4 = gather_rows(epi_ev, epi)
            spec_of_ent = np.empty(ent.shape[0])
            for i in range(ent.shape[0]):
                spec_of_ent[i] = specificity(ent_ev, ent[i], n)
            # The candidates side by side, in the tensor program's order: direct, entity hops, episode hops.
            c_row = np.concatenate((seg, seg1[seg2], seg3[seg4]))
            c_node = np.concatenate((nbr, nbr2, nbr4))
            c_relation = np.concatenate((rel, rel2, rel4))
            c_through = np.concatenate((np.full(nbr.shape[0], -1, dtype=np.int64), ent[seg2], epi[seg4]))
            c_spec = np.concatenate((np.ones(nbr.shape[0]), spec_of_ent[seg2], np.ones(nbr4.shape[0])))
            total = c_node.shape[0]
            # Best candidate per node: highest score, then lowest parent * relations + relation,
            # then the first in candidate order (so a later one replaces only a strictly better one).
            touched = np.empty(total, dtype=np.int64)
            c_score = np.empty(total)
            c_tie = np.empty(total, dtype=np.int64)
            c_parent = np.empty(total, dtype=np.int64)
            c_rel = np.empty(total, dtype=np.int64)
            c_via = np.empty(total, dtype=np.int64)
            m = 0
            for j in range(total):
                row, v, r, via, spec = c_row[j], c_node[j], c_relation[j], c_through[j], c_spec[j]
                if v >= n or visited[v]:
                    continue
                cos = np.float64(matrix[b, v])
                if scan and cos >= drop - error[b]:
                    if math.isnan(exact[v]):
                        exact[v] = exact_cosine(queries, b, event_rows, v, round32)
                        computed[n_computed] = v
                        n_computed += 1
                    cos = exact[v]
                if not cos >= drop or (any_removed and removed[intent, r]):
                    continue
                s = gamma * f_score[row] + math.exp(lam_w[intent, r] * spec + lambda2 * cos)
                tie = f_node[row] * NUM_RELATIONS + r
                slot = slot_of[v]
                if slot < 0:
                    slot = m
                    slot_of[v] = slot
                    touched[m] = v
                    m += 1
                elif not (s > c_score[slot] or (s == c_score[slot] and tie < c_tie[slot])):
                    continue
                c_score[slot], c_tie[slot], c_parent[slot] = s, tie, f_node[row]
                c_rel[slot], c_via[slot] = r, via
            # The best min(beam_width, room) by score (ties: lower node id).
            take = min(beam_width, room, m)
            chosen = np.empty(take, dtype=np.int64)
            for t in range(take):
                best = -1
                for slot in range(m):
                    if slot_of[touched[slot]] < 0:
                        continue      # already chosen
                    if best < 0 or c_score[slot] > c_score[best] or (
                            c_score[slot] == c_score[best] and touched[slot] < touched[best]):
                        best = slot
                chosen[t] = best
                slot_of[touched[best]] = -1
            for slot in range(m):
                slot_of[touched[slot]] = -1
            f_node = np.empty(take, dtype=np.int64)
            f_score = np.empty(take)
            for t in range(take):
                slot = chosen[t]
                v = touched[slot]
                visited[v] = True
                _emit(out_long, out_score, rows, b, v, c_score[slot], c_parent[slot], c_rel[slot], c_via[slot], depth)
                f_node[t], f_score[t] = v, c_score[slot]
                rows += 1
            count += take
        for i in range(first_row, rows):
            visited[out_long[1, i]] = False
        for i in range(n_computed):
            exact[computed[i]] = np.nan
        n_computed = 0
    return rows
