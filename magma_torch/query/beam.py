"""Batched heuristic beam search (paper, Algorithm 1, step 3) as one tensor program.

All queries of a batch expand together: frontier neighbourhoods come from CSR gathers,
visited sets are sorted ``query * N + node`` keys (membership by ``searchsorted``, so no
dense [B, N] mask), and per-query top-k is a segmented sort. The only Python loop is
over depth.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from magma_torch.query.segment import lexsort, rank_in_group
from magma_torch.store.graph import REL_ID, GraphSnapshot


@dataclass(frozen=True)
class BeamConfig:
    lambda1: float = 1.0          # weight of the intent-specific relation prior w[T_q, r]
    lambda2: float = 0.5          # weight of the semantic affinity cos(v, q)
    gamma: float = 0.5            # decay of the parent's score along a path
    max_depth: int = 5
    beam_width: int = 10          # frontier size kept per depth and query
    max_nodes: int = 200          # node budget per query, anchors included
    drop_threshold: float = 0.15  # candidates with cos(v, q) below this are not expanded to


@dataclass(frozen=True)
class BeamResult:
    """Visited (query, node) pairs; anchors have parent -1 and relation -1."""

    query: torch.Tensor
    node: torch.Tensor
    score: torch.Tensor
    parent: torch.Tensor
    relation: torch.Tensor
    via: torch.Tensor             # entity node an entity hop went through, else -1
    depth: torch.Tensor


def pair_cosine(embeddings: torch.Tensor, queries: torch.Tensor, q_idx: torch.Tensor, nodes: torch.Tensor,
                dtype: torch.dtype, chunk: int = 1 << 16) -> torch.Tensor:
    """cos(embeddings[nodes[i]], queries[q_idx[i]]) in chunks, so memory stays O(chunk * d)."""
    out = torch.empty(nodes.numel(), dtype=dtype, device=queries.device)
    for start in range(0, nodes.numel(), chunk):
        sl = slice(start, start + chunk)
        out[sl] = (embeddings[nodes[sl]].to(dtype) * queries[q_idx[sl]].to(dtype)).sum(-1)
    return out


def beam_search(graph: GraphSnapshot, embeddings: torch.Tensor, queries: torch.Tensor, intents: torch.Tensor,
                anchors: torch.Tensor, anchor_scores: torch.Tensor, weights: torch.Tensor, cfg: BeamConfig,
                dtype: torch.dtype = torch.float32) -> BeamResult:
    """Expand ``anchors`` [B, K] (-1 padded) for queries [B, d] with intents [B].

    ``weights`` is the [num_intents, num_relations] matrix w[T_q, r]; w = 0 removes relation r
    from intent T_q's traversal.
    """
    device = queries.device
    n = graph.num_events
    b_size = queries.shape[0]
    q = queries.to(dtype)
    w = weights.to(device, dtype)
    lam_w = cfg.lambda1 * w
    valid = anchors >= 0
    a_q = torch.arange(b_size, device=device)[:, None].expand_as(anchors)[valid]
    a_n = anchors[valid]
    a_s = anchor_scores[valid].to(dtype)
    # Anchors count against the node budget in their score order.
    perm = lexsort((a_q, False), (a_s, True), (a_n, False))
    a_q, a_n, a_s = a_q[perm], a_n[perm], a_s[perm]
    keep = rank_in_group(a_q) < cfg.max_nodes
    a_q, a_n, a_s = a_q[keep], a_n[keep], a_s[keep]
    minus = torch.full_like(a_n, -1)
    parts = [(a_q, a_n, a_s, minus, minus, minus, torch.zeros_like(a_n))]
    visited = torch.sort(a_q * n + a_n).values
    count = torch.bincount(a_q, minlength=b_size)
    f_q, f_n, f_s = a_q, a_n, a_s
    for depth in range(1, cfg.max_depth + 1):
        room = cfg.max_nodes - count
        active = room[f_q] > 0
        f_q, f_n, f_s = f_q[active], f_n[active], f_s[active]
        if f_n.numel() == 0:
            break
        seg, nbr, rel = graph.event_adj.gather(f_n)
        via = torch.full_like(nbr, -1)
        seg1, ent, _ = graph.event_entity.gather(f_n)
        seg2, nbr2, rel2 = graph.entity_event.gather(ent)
        seg = torch.cat([seg, seg1[seg2]])
        nbr = torch.cat([nbr, nbr2])
        rel = torch.cat([rel, rel2])
        via = torch.cat([via, ent[seg2]])
        c_q, c_p, c_ps = f_q[seg], f_n[seg], f_s[seg]
        # A relation weighted 0 for the query's intent is removed, not merely down-weighted
        # (exp(0) would still score it): this is how the ablation configs switch a graph off.
        ok = (nbr != c_p) & (nbr < n) & (w[intents[c_q], rel] != 0)
        keys = c_q * n + nbr
        if visited.numel():
            pos = torch.searchsorted(visited, keys).clamp(max=visited.numel() - 1)
            ok &= visited[pos] != keys
        c_q, c_p, c_ps, nbr, rel, via, keys = (t[ok] for t in (c_q, c_p, c_ps, nbr, rel, via, keys))
        # Hubs (a speaker's entity node) reach the same node from many parents: score each
        # (query, node) pair once. pair_keys is sorted, so pair order is (query, node).
        pair_keys, inverse = torch.unique(keys, return_inverse=True)
        pair_cos = pair_cosine(embeddings, q, pair_keys // n, pair_keys % n, dtype)
        ok = pair_cos[inverse] >= cfg.drop_threshold
        c_q, c_p, c_ps, nbr, rel, via, inverse = (t[ok] for t in (c_q, c_p, c_ps, nbr, rel, via, inverse))
        if nbr.numel() == 0:
            break
        score = cfg.gamma * c_ps + torch.exp(lam_w[intents[c_q], rel] + cfg.lambda2 * pair_cos[inverse])
        # Best incoming transition per (query, node): highest score, then lowest parent, then
        # relation, then the first candidate; segmented reductions instead of a 4-key sort.
        best = _segment_argbest(inverse, pair_keys.numel(), score, c_p * len(REL_ID) + rel)
        c_q, c_p, nbr, rel, via, score = (t[best] for t in (c_q, c_p, nbr, rel, via, score))
        # Per-query top beam_width (bounded by the remaining budget); ties to the lower node id,
        # which is the order the pairs are in already.
        perm = lexsort((c_q, False), (score, True))
        c_q, c_p, nbr, rel, via, score = (t[perm] for t in (c_q, c_p, nbr, rel, via, score))
        take = rank_in_group(c_q) < torch.clamp(room[c_q], max=cfg.beam_width)
        c_q, c_p, nbr, rel, via, score = (t[take] for t in (c_q, c_p, nbr, rel, via, score))
        parts.append((c_q, nbr, score, c_p, rel, via, torch.full_like(nbr, depth)))
        visited = torch.sort(torch.cat([visited, c_q * n + nbr])).values
        count = count + torch.bincount(c_q, minlength=b_size)
        f_q, f_n, f_s = c_q, nbr, score
    return BeamResult(*(torch.cat(col) for col in zip(*parts)))


def _segment_argbest(segment: torch.Tensor, num_segments: int, score: torch.Tensor,
                     tie: torch.Tensor) -> torch.Tensor:
    """Index of the best row of each non-empty segment, in segment order: highest score,
    then lowest ``tie``, then lowest index."""
    top = torch.full((num_segments,), -torch.inf, dtype=score.dtype, device=score.device)
    top = top.scatter_reduce(0, segment, score, "amax")
    cand = score == top[segment]
    low = torch.full((num_segments,), torch.iinfo(tie.dtype).max, dtype=tie.dtype, device=tie.device)
    low = low.scatter_reduce(0, segment[cand], tie[cand], "amin")
    cand &= tie == low[segment]
    rows = score.numel()
    first = torch.full((num_segments,), rows, dtype=torch.long, device=score.device)
    first = first.scatter_reduce(0, segment[cand], torch.arange(rows, device=score.device)[cand], "amin")
    return first[first < rows]


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
