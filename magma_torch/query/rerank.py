"""Anchor re-ranking: a linear score over what fusion and the graph know about each candidate.

RRF (anchors.py) keeps only ranks. The re-ranker rescores the fused top ``pool`` with a
linear function of features that are cheap to read for them:

- per fused signal, its reciprocal rank ``rrf_k / (rrf_k + rank)`` and whether it ranked
  the event at all;
- the fused RRF score relative to the best, the cosine with the question and the log of
  the fused position;
- ``length``, log(1 + the tokens of the event's text, at most ``length_cap``): a turn that
  says something is more likely to hold evidence than "Thanks, you too!", whatever its cosine;
  past a long turn's length the feature stays flat, so a pasted document does not outrank
  every turn by its size alone;
- graph support: how many of the ``support_from`` best fused candidates (the event itself
  aside) reach it in one hop, per relation: a temporal, semantic or causal edge, the same
  episode, and for entities the specificity (beam.entity_specificity) of the rarest entity
  they share. A candidate the strongest candidates point at is more likely to belong.

The weights (``RerankWeights``, one per name in ``FEATURES``) are a logistic regression
fitted offline by experiments/train_rerank.py; only the order they give matters. The fit
estimates how likely a candidate is evidence; a longer turn also takes more of the context's
token budget, so the score the order follows is that estimate less ``token_cost * length``
(``RerankConfig.token_cost``; 0 ranks by the estimate alone). A relation
the configuration removes from every intent's traversal (weight 0: the ablations) gives no
support either, so an ablation removes that graph from the whole query process.
"""
from __future__ import annotations

import dataclasses

import torch

from magma_torch.config.schema import RELATIONS, SIGNALS, RerankConfig
from magma_torch.query.anchors import Anchors
from magma_torch.query.beam import entity_specificity
from magma_torch.query.kernel import compiled
from magma_torch.query.segment import take
from magma_torch.query.similarity import Similarity
from magma_torch.store.graph import REL_ID, GraphSnapshot

FEATURES = (tuple(f"rank_{s}" for s in SIGNALS) + tuple(f"in_{s}" for s in SIGNALS)
            + ("fused", "cosine", "position", "length") + tuple(f"support_{r}" for r in RELATIONS))
_DIRECT = tuple(r for r in RELATIONS if r not in ("entity", "episode"))   # edges of event_adj


def feature_matrix(graph: GraphSnapshot, episode_of: torch.Tensor, text_tokens: torch.Tensor, sim: Similarity,
                   fused: Anchors, rrf_k: int, support_from: int, length_cap: int,
                   removed: frozenset[str] = frozenset(), kernel: str = "torch") -> torch.Tensor:
    """[B, P, len(FEATURES)] features of the fused candidates ``fused`` [B, P] (0 where padded).
    ``text_tokens``: each event's text length in tokens (StoreSnapshot.text_tokens), counted up to
    ``length_cap``; ``removed``:
    relations whose support is left at 0; ``kernel`` (resolved, query/kernel.py): "numba" counts
    the support with the compiled twin (query/rerank_numba.py) on CPU."""
    ids, valid = fused.ids, fused.ids >= 0
    b_size, p = ids.shape
    dev = ids.device
    safe = ids.clamp(min=0)
    ranks = fused.ranks.double()
    recip = torch.where(ranks > 0, rrf_k / (rrf_k + ranks), torch.zeros_like(ranks))
    rows = torch.arange(b_size, device=dev)[:, None].expand_as(ids)
    cos = sim.pairs(rows.reshape(-1), safe.reshape(-1)).double().reshape(b_size, p)
    best = fused.fused_scores[:, :1].clamp(min=1e-12)
    position = torch.log1p(torch.arange(p, device=dev, dtype=torch.float64)).expand(b_size, p)
    tokens = text_tokens.index_select(0, safe.reshape(-1)).clamp(max=length_cap)
    length = torch.log1p(tokens.double()).reshape(b_size, p)
    support = (_compiled_support if compiled(kernel, dev) else _support)(graph, episode_of, ids, support_from, removed)
    out = torch.cat([recip, (ranks > 0).double(), (fused.fused_scores / best)[..., None], cos[..., None],
                     position[..., None], length[..., None], support], dim=2)
    return out * valid[..., None]


def rerank(fused: Anchors, features: torch.Tensor, cfg: RerankConfig, rrf_k: int, top: int) -> Anchors:
    """The ``top`` best of ``fused`` by the linear score less ``cfg.token_cost`` times the
    length feature, best first. Their scores are
    1 / (rrf_k + new rank), so the beam's start scores (Retriever.start_scores) fall off as
    fused ones do; ``ranks`` and ``rrf`` keep each signal's rank and the fused score. Ties keep
    the fused order."""
    w = torch.tensor([getattr(cfg.weights, f) for f in FEATURES], dtype=torch.float64, device=features.device)
    w[FEATURES.index("length")] -= cfg.token_cost
    score = torch.where(fused.ids >= 0, features @ w, torch.full_like(features[..., 0], -torch.inf))
    order = torch.sort(score, dim=1, descending=True, stable=True).indices[:, :top]
    ids = fused.ids.gather(1, order)
    new_rank = torch.arange(1, ids.shape[1] + 1, device=ids.device, dtype=torch.float64).expand_as(ids)
    scores = torch.where(ids >= 0, 1.0 / (rrf_k + new_rank), torch.zeros_like(new_rank))
    ranks = fused.ranks.gather(1, order[..., None].expand(-1, -1, fused.ranks.shape[2]))
    return Anchors(ids, scores, ranks, fused.fused_scores.gather(1, order))


def _compiled_support(graph: GraphSnapshot, episode_of: torch.Tensor, ids: torch.Tensor, m: int,
                      removed: frozenset[str]) -> torch.Tensor:
    """``_support`` by query/rerank_numba.py."""
    from magma_torch.query import rerank_numba   # lazy: an optional accelerator

    column = _direct_columns(removed, ids.device)
    kept = {r: RELATIONS.index(r) if r not in removed else -1 for r in ("episode", "entity")}
    return rerank_numba.support(graph, episode_of, ids.contiguous(), m, column, kept["episode"], kept["entity"],
                                len(RELATIONS))


def _direct_columns(removed: frozenset[str], device: torch.device) -> torch.Tensor:
    """The support column of each direct edge's relation id (-1: removed, or not a direct edge)."""
    column = torch.full((len(REL_ID),), -1, dtype=torch.long, device=device)
    for r in _DIRECT:
        if r not in removed:
            column[REL_ID[r]] = RELATIONS.index(r)
    return column


def _support(graph: GraphSnapshot, episode_of: torch.Tensor, ids: torch.Tensor, m: int,
             removed: frozenset[str]) -> torch.Tensor:
    """[B, P, len(RELATIONS)]: per relation, the share of the first ``m`` candidates of each
    row (the candidate itself aside) that reach the candidate in one hop."""
    b_size, p = ids.shape
    dev, n = ids.device, graph.num_events
    top = ids[:, :m]
    m = top.shape[1]
    out = torch.zeros((b_size, p, len(RELATIONS)), dtype=torch.float64, device=dev)
    if m == 0 or n == 0:
        return out
    t_valid = top >= 0
    t_q = torch.arange(b_size, device=dev)[:, None].expand_as(top)[t_valid]
    t_pos = torch.arange(m, device=dev)[None].expand_as(top)[t_valid]
    t_node = top[t_valid]
    c_valid = ids >= 0
    c_flat = c_valid.reshape(-1).nonzero().squeeze(1)          # candidate rows into [B * P]
    c_q, c_node = c_flat // p, ids.reshape(-1)[c_flat]
    rels = len(REL_ID)
    # Candidates as sorted (query, node) keys; the top anchors' one-hop edges are looked up in
    # them (a few per anchor), not each candidate in the edges.
    cand_key, cand_order = torch.sort(c_q * n + c_node)
    flat = out.view(-1, len(RELATIONS))
    # temporal, semantic, causal: distinct (top anchor, neighbour, relation) edges, counted per candidate
    seg, nbr, rel = graph.event_adj.gather(t_node)
    seg, nbr, rel = take((nbr < n).nonzero().squeeze(1), seg, nbr, rel)   # none to events past the snapshot
    edge = torch.unique(((t_q[seg] * m + t_pos[seg]) * n + nbr) * rels + rel)
    q_of, nbr_of, rel_of = edge // rels // n // m, edge // rels % n, edge % rels
    col = _direct_columns(removed, dev)[rel_of]
    if cand_key.numel():
        key = q_of * n + nbr_of
        pos = torch.searchsorted(cand_key, key).clamp(max=cand_key.numel() - 1)
        hit = ((cand_key[pos] == key) & (col >= 0)).nonzero().squeeze(1)
        flat.index_put_((c_flat[cand_order[pos[hit]]], col[hit]),
                        torch.full((hit.numel(),), 1.0 / m, dtype=torch.float64, device=dev), accumulate=True)
    if "episode" not in removed:
        ep_top = torch.where(t_valid, episode_of[top.clamp(min=0)], torch.full_like(top, -1))
        ep_c = episode_of[ids.clamp(min=0)]
        same = (ep_c[:, :, None] == ep_top[:, None, :]) & (ids[:, :, None] != top[:, None, :]) & t_valid[:, None, :]
        out[..., RELATIONS.index("episode")] = same.sum(2).double() / m
    if "entity" not in removed:
        flat[c_flat, RELATIONS.index("entity")] = _entity_support(graph, t_q, t_pos, t_node, c_q, c_node, m,
                                                                  c_flat.numel()) / m
    return out


def _entity_support(graph: GraphSnapshot, t_q, t_pos, t_node, c_q, c_node, m: int, num_cand: int) -> torch.Tensor:
    """Per candidate: the sum over the top anchors (itself aside) of the specificity of the
    rarest entity it shares with each."""
    dev, n = c_node.device, graph.num_events
    out = torch.zeros(num_cand, dtype=torch.float64, device=dev)
    s_t, ent_t, _ = graph.event_entity.gather(t_node)
    s_c, ent_c, _ = graph.event_entity.gather(c_node)
    if ent_t.numel() == 0 or ent_c.numel() == 0:
        return out
    n_ent = int(torch.maximum(ent_t.max(), ent_c.max())) + 1
    # the top anchors' (query, entity) rows looked up in the candidates' sorted ones
    key_c, order = torch.sort(c_q[s_c] * n_ent + ent_c)
    key_t = t_q[s_t] * n_ent + ent_t
    lo = torch.searchsorted(key_c, key_t)
    count = torch.searchsorted(key_c, key_t, right=True) - lo
    pair = torch.repeat_interleave(torch.arange(key_t.numel(), device=dev), count)
    offset = torch.arange(pair.numel(), device=dev) - torch.repeat_interleave(torch.cumsum(count, 0) - count, count)
    row_c = order[lo[pair] + offset]
    cand, pair_t = s_c[row_c], s_t[pair]
    keep = t_node[pair_t] != c_node[cand]
    cand, pair_t, ent = cand[keep], pair_t[keep], ent_c[row_c[keep]]
    if cand.numel() == 0:
        return out
    spec = entity_specificity(graph, ent, n)
    best = torch.zeros(num_cand * m, dtype=torch.float64, device=dev)
    best.scatter_reduce_(0, cand * m + t_pos[pair_t], spec, reduce="amax")
    return best.view(num_cand, m).sum(1)


def removed_relations(weights: torch.Tensor) -> frozenset[str]:
    """Relations weighted 0 for every intent in the [intent, relation] matrix w."""
    return frozenset(r for r, j in REL_ID.items() if bool((weights[:, j] == 0).all()))


def with_weights(cfg: RerankConfig, values: dict[str, float]) -> RerankConfig:
    """``cfg`` with the weights ``values`` (a name per feature)."""
    return dataclasses.replace(cfg, weights=dataclasses.replace(cfg.weights, **values))
