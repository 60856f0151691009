"""Batched heuristic beam search (paper, Algorithm 1, step 3) as one tensor program.

All queries of a batch expand together: frontier neighbourhoods come from CSR gathers,
visited sets are sorted ``query * N + node`` keys (membership by ``searchsorted``, so no
dense [B, N] mask), and per-query top-k is a segmented sort. The only Python loop is
over depth.

A transition is s_uv = exp(lambda1 * w[T_q, r] * spec + lambda2 * cos(v, q)). Direct edges
and episode hops (event -> its episode -> the episode's other events) have spec = 1; an
entity hop has the entity's specificity, log(N / df) / log(N) for an entity mentioned by
df of the N events, so a hop through a rare entity counts more than one through a common
word, and an entity every event mentions carries nothing.

Scores are float64 whatever the cosines' dtype (``retrieval.score_dtype``, the similarity
matrix's): exp(lambda2 * cos) spreads the scores over orders of magnitude, and in float32 two
transitions whose cosines differ by 4e-7 can round to the wrong order. At 10^5 events, one
question in 200 kept a different one of two such candidates than the float64 reference
(magma-bench's ``agreement_with_reference`` 0.995 on the 2-core Xeon VM). The score tensors
are a few thousand rows per question, so the wider type costs nothing measurable.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch_geometric.utils import index_sort, scatter

from magma_torch.config.schema import BeamConfig
from magma_torch.query.kernel import search_kernel
from magma_torch.query.segment import lexsort, rank_in_group, take, top_in_group
from magma_torch.query.similarity import Similarity
from magma_torch.store.graph import REL_ID, GraphSnapshot

SCORE_DTYPE = torch.float64     # see the module doc


@dataclass(frozen=True)
class BeamResult:
    """Visited (query, node) pairs; anchors have parent -1 and relation -1."""

    query: torch.Tensor
    node: torch.Tensor
    score: torch.Tensor
    parent: torch.Tensor
    relation: torch.Tensor
    via: torch.Tensor             # entity or episode node a hop went through, else -1
    depth: torch.Tensor


def beam_search(graph: GraphSnapshot, sim: Similarity, intents: torch.Tensor, anchors: torch.Tensor,
                anchor_scores: torch.Tensor, weights: torch.Tensor, cfg: BeamConfig,
                kernel: str = "torch") -> BeamResult:
    """Expand ``anchors`` [B, K] (-1 padded) for the questions of ``sim`` with intents [B].

    ``weights`` is the [num_intents, num_relations] matrix w[T_q, r]; w = 0 removes relation r
    from intent T_q's traversal. ``kernel`` (resolved, query/kernel.py): "numba" runs the compiled
    twin (query/beam_numba.py) where it applies, with the same result.
    """
    device = anchors.device
    n = graph.num_events
    b_size = sim.batch_size
    w = weights.to(device, SCORE_DTYPE)
    lam_w = cfg.lambda1 * w
    # A relation weighted 0 for the query's intent is removed, not merely down-weighted
    # (exp(0) would still score it): this is how the ablation configs switch a graph off.
    removed = (w == 0) if bool((w == 0).any()) else None
    if search_kernel(kernel, sim.dtype, device) == "numba":
        from magma_torch.query import beam_numba   # lazy: an optional accelerator

        return BeamResult(*beam_numba.beam_search(graph, sim, intents, anchors.contiguous(),
                                                  anchor_scores, lam_w, removed, cfg))
    valid = anchors >= 0
    a_q = torch.arange(b_size, device=device)[:, None].expand_as(anchors)[valid]
    a_n = anchors[valid]
    a_s = anchor_scores[valid].to(SCORE_DTYPE)
    # Anchors count against the node budget in their score order.
    perm = lexsort((a_q, False), (a_s, True), (a_n, False))
    a_q, a_n, a_s = a_q[perm], a_n[perm], a_s[perm]
    keep = rank_in_group(a_q) < cfg.max_nodes
    a_q, a_n, a_s = a_q[keep], a_n[keep], a_s[keep]
    minus = torch.full_like(a_n, -1)
    parts = [(a_q, a_n, a_s, minus, minus, minus, torch.zeros_like(a_n))]
    # Visited (query, node) keys, kept sorted for searchsorted: PyG's index_sort (a radix sort
    # with pyg-lib installed, torch.sort without it).
    visited = index_sort(a_q * n + a_n, max_value=b_size * n)[0]
    count = torch.bincount(a_q, minlength=b_size)
    f_q, f_n, f_s = a_q, a_n, a_s
    for depth in range(1, cfg.max_depth + 1):
        room = cfg.max_nodes - count
        live = (room.index_select(0, f_q) > 0).nonzero().squeeze(1)
        f_q, f_n, f_s = take(live, f_q, f_n, f_s)
        if f_n.numel() == 0:
            break
        # Candidates: one row per (frontier row, neighbour): direct, through entity nodes and
        # through the frontier event's episode.
        seg, nbr, rel = graph.event_adj.gather(f_n)
        spec = torch.ones_like(nbr, dtype=SCORE_DTYPE)
        seg1, ent, _ = graph.event_entity.gather(f_n)
        seg2, nbr2, rel2 = graph.entity_event.gather(ent)
        seg3, epi, _ = graph.event_episode.gather(f_n)
        seg4, nbr4, rel4 = graph.episode_event.gather(epi)
        (ent_of, seg_of_ent), (epi_of, seg_of_epi) = take(seg2, ent, seg1), take(seg4, epi, seg3)
        via = torch.cat([torch.full_like(nbr, -1), ent_of, epi_of])
        spec = torch.cat([spec, entity_specificity(graph, ent, n, SCORE_DTYPE).index_select(0, seg2),
                          torch.ones_like(nbr4, dtype=SCORE_DTYPE)])
        seg = torch.cat([seg, seg_of_ent, seg_of_epi])
        nbr = torch.cat([nbr, nbr2, nbr4])
        rel = torch.cat([rel, rel2, rel4])
        c_q = f_q.index_select(0, seg)
        cos = sim.pairs(c_q, nbr.clamp(max=n - 1), floor=cfg.drop_threshold).to(SCORE_DTYPE)
        # The parent itself (reached back through an entity) is caught by the visited test below.
        ok = (cos >= cfg.drop_threshold) & (nbr < n)
        if removed is not None:
            ok &= ~removed[intents[c_q], rel]
        # Surviving rows are carried as indices into the candidate columns, read when needed.
        idx = ok.nonzero().squeeze(1)
        keys = c_q.index_select(0, idx) * n + nbr.index_select(0, idx)
        if visited.numel():
            pos = torch.searchsorted(visited, keys).clamp(max=visited.numel() - 1)
            fresh = (visited.index_select(0, pos) != keys).nonzero().squeeze(1)
            idx, keys = take(fresh, idx, keys)
        if idx.numel() == 0:
            break
        r_seg, r_rel, r_q, r_spec, r_cos = take(idx, seg, rel, c_q, spec, cos)
        score = cfg.gamma * f_s.index_select(0, r_seg) + torch.exp(
            lam_w[intents.index_select(0, r_q), r_rel] * r_spec + cfg.lambda2 * r_cos)
        # Best incoming transition per (query, node): highest score, then lowest parent, then
        # relation, then the first candidate; segmented reductions instead of a 4-key sort.
        # Hubs (a speaker's entity node) reach the same node from many parents.
        pair_keys, inverse = torch.unique(keys, return_inverse=True)
        best = _segment_argbest(inverse, pair_keys.numel(), score, f_n.index_select(0, r_seg) * len(REL_ID) + r_rel)
        idx, score, r_q = take(best, idx, score, r_q)
        # Per-query top beam_width (bounded by the remaining budget); ties to the lower node id,
        # which is the order the (query, node) pairs are in already.
        perm = top_in_group(r_q, score, cfg.beam_width, b_size)
        idx, score, r_q = take(perm, idx, score, r_q)
        kept = (rank_in_group(r_q) < room.index_select(0, r_q)).nonzero().squeeze(1)
        idx, score, r_q = take(kept, idx, score, r_q)
        node, parent_row, r_rel, r_via = take(idx, nbr, seg, rel, via)
        parts.append((r_q, node, score, f_n.index_select(0, parent_row), r_rel, r_via, torch.full_like(node, depth)))
        visited = index_sort(torch.cat([visited, r_q * n + node]), max_value=b_size * n)[0]
        count = count + torch.bincount(r_q, minlength=b_size)
        f_q, f_n, f_s = r_q, node, score
    return BeamResult(*(torch.cat(col) for col in zip(*parts, strict=True)))


def entity_specificity(graph: GraphSnapshot, entities: torch.Tensor, num_events: int,
                       dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """log(N / df) / log(N) of each entity, df = the events (of the N in the snapshot) that mention it."""
    df = graph.entity_event.degree(entities).clamp(min=1).to(torch.float64)
    if num_events < 2:
        return torch.ones_like(df, dtype=dtype)
    return (torch.log(num_events / df) / math.log(num_events)).clamp(0, 1).to(dtype)


def _segment_argbest(segment: torch.Tensor, num_segments: int, score: torch.Tensor,
                     tie: torch.Tensor) -> torch.Tensor:
    """Index of the best row of each segment, in segment order: highest score, then lowest
    ``tie``, then lowest index. Every segment must have a row (``segment`` is an inverse
    from ``torch.unique``), so PyG's scatter leaves no empty segment at its fill value.
    Float64 scores rarely tie, so the tie-breaking reductions run only when one does."""
    top = scatter(score, segment, 0, num_segments, reduce="max")
    cand = score == top.index_select(0, segment)
    best = cand.nonzero().squeeze(1)
    if best.numel() == num_segments:    # no segment has two best scores: the usual case
        return best.new_empty(num_segments).index_put_((segment.index_select(0, best),), best)
    low = scatter(tie[cand], segment[cand], 0, num_segments, reduce="min")
    cand &= tie == low[segment]
    rows = torch.arange(score.numel(), device=score.device)
    return scatter(rows[cand], segment[cand], 0, num_segments, reduce="min")


def relation_weights(intent_weights: dict[str, dict[str, float]], intents: tuple[str, ...]) -> torch.Tensor:
    """The [intent, relation] matrix w from the config mapping."""
    w = torch.zeros(len(intents), len(REL_ID))
    for i, intent in enumerate(intents):
        for rel, j in REL_ID.items():
            w[i, j] = float(intent_weights[intent][rel])
    return w


def salience_order(res: BeamResult) -> torch.Tensor:
    """Permutation of ``res`` rows grouping queries in order, each by descending score
    (ties: lower node id): the order retrieved nodes are handed out in."""
    return lexsort((res.query, False), (res.score, True), (res.node, False))
