"""Anchor selection (Algorithm 1, step 2): reciprocal-rank fusion of ranked lists."""
from __future__ import annotations

import math
import re
from dataclasses import dataclass

import torch

from magma_torch.config.schema import ContextConfig, EntitySignalConfig, EpisodeSignalConfig
from magma_torch.query.kernel import compiled
from magma_torch.query.segment import first_in_group, lexsort, rank_in_group, top_ids, top_in_group
from magma_torch.query.similarity import Similarity


@dataclass(frozen=True)
class Anchors:
    ids: torch.Tensor      # [B, K] event ids, -1 padded, best first
    scores: torch.Tensor   # [B, K] fused RRF scores (0 where padded)
    ranks: torch.Tensor    # [B, K, S] 1-based rank of each anchor in each signal, 0 = absent
    rrf: torch.Tensor | None = None   # [B, K] fused RRF scores when re-ranked (scores: 1 / (rrf_k + new rank))

    @property
    def fused_scores(self) -> torch.Tensor:
        return self.scores if self.rrf is None else self.rrf


def rrf_fuse(rankings: list[torch.Tensor], weights: list[float], k: int, top: int, num_nodes: int,
             kernel: str = "torch") -> Anchors:
    """score(v) = sum_s weight_s / (k + rank_s(v)) over the ranked lists [B, K_s] (-1 padded);
    ``kernel`` (resolved, query/kernel.py): "numba" fuses with the compiled twin
    (query/anchors_numba.py) on CPU, with the same result."""
    b_size = rankings[0].shape[0]
    device = rankings[0].device
    if compiled(kernel, device):
        return _compiled_rrf_fuse(rankings, weights, k, top, num_nodes)
    qs, ids, contrib, sig, rank = [], [], [], [], []
    for s, (ranked, w) in enumerate(zip(rankings, weights, strict=True)):
        if ranked.numel() == 0 or w == 0:
            continue
        r = torch.arange(1, ranked.shape[1] + 1, device=device).expand_as(ranked)
        valid = ranked >= 0
        qs.append(torch.arange(b_size, device=device)[:, None].expand_as(ranked)[valid])
        ids.append(ranked[valid])
        contrib.append(w / (k + r[valid].double()))
        sig.append(torch.full_like(ranked[valid], s))
        rank.append(r[valid])
    n_sig = len(rankings)
    out_ids = torch.full((b_size, top), -1, dtype=torch.long, device=device)
    out_scores = torch.zeros((b_size, top), dtype=torch.float64, device=device)
    out_ranks = torch.zeros((b_size, top, n_sig), dtype=torch.long, device=device)
    if not qs:
        return Anchors(out_ids, out_scores, out_ranks)
    qs, ids, contrib, sig, rank = (torch.cat(t) for t in (qs, ids, contrib, sig, rank))
    keys, inv = torch.unique(qs * num_nodes + ids, return_inverse=True)
    fused = torch.zeros(keys.numel(), dtype=torch.float64, device=device).index_add_(0, inv, contrib)
    ranks = torch.zeros((keys.numel(), n_sig), dtype=torch.long, device=device)
    ranks[inv, sig] = rank
    kq, kn = keys // num_nodes, keys % num_nodes    # keys are sorted: (query, node) order
    perm = top_in_group(kq, fused, top, b_size)      # ties: lower node id
    pos = rank_in_group(kq[perm])
    out_ids[kq[perm], pos] = kn[perm]
    out_scores[kq[perm], pos] = fused[perm]
    out_ranks[kq[perm], pos] = ranks[perm]
    return Anchors(out_ids, out_scores, out_ranks)


def _compiled_rrf_fuse(rankings: list[torch.Tensor], weights: list[float], k: int, top: int, num_nodes: int) -> Anchors:
    from magma_torch.query import anchors_numba   # lazy: an optional accelerator

    used = [(s, r) for s, r in enumerate(rankings) if r.numel() and weights[s] != 0]
    if not used:
        b_size = rankings[0].shape[0]
        return Anchors(torch.full((b_size, top), -1, dtype=torch.long), torch.zeros((b_size, top), dtype=torch.float64),
                       torch.zeros((b_size, top, len(rankings)), dtype=torch.long))
    ranked = torch.cat([r for _, r in used], dim=1).contiguous()
    signal = torch.cat([torch.full((r.shape[1],), s) for s, r in used])
    rank = torch.cat([torch.arange(1, r.shape[1] + 1) for _, r in used])
    return Anchors(*anchors_numba.rrf_fuse(ranked, torch.tensor(weights, dtype=torch.float64)[signal], signal, rank, k,
                                           top, len(rankings), num_nodes))


def time_ranking(windows: list[tuple[float, float] | None], timestamps: torch.Tensor, date_spans: torch.Tensor,
                 sim: Similarity, top: int, mask_elements: int = 1 << 24) -> torch.Tensor:
    """Events whose timestamp or mentioned dates fall in the question's window, most similar
    first (ties: lower id); [B, top] ids, -1 padded (all -1 for questions without a window).

    Only in-window events are scored: the window test is a cheap elementwise pass over the
    timestamps, made for a few questions at a time so no more than ``mask_elements``
    booleans are alive, and cosines are computed for the (question, event) pairs it finds.
    """
    b_size, n, device = len(windows), timestamps.numel(), sim.queries.device
    out = torch.full((b_size, top), -1, dtype=torch.long, device=device)
    rows = [i for i, w in enumerate(windows) if w is not None]
    if not rows or n == 0 or top == 0:
        return out
    dev = timestamps.device
    lo = torch.tensor([windows[i][0] for i in rows], dtype=torch.float64, device=dev)[:, None]
    hi = torch.tensor([windows[i][1] for i in rows], dtype=torch.float64, device=dev)[:, None]
    start, end = date_spans[:, 0][None], date_spans[:, 1][None]
    step = max(1, mask_elements // n)
    pair_row, pair_event = [], []
    for a in range(0, len(rows), step):
        l, h = lo[a:a + step], hi[a:a + step]
        inside = _in_window(timestamps[None], start, end, l, h)
        r, e = inside.nonzero(as_tuple=True)
        pair_row.append(r + a)
        pair_event.append(e)
    r, e = torch.cat(pair_row).to(device), torch.cat(pair_event).to(device)
    row_ids = torch.tensor(rows, device=device)
    cos = sim.pairs(row_ids[r], e)
    perm = top_in_group(r, cos, top, len(rows))      # pairs are in (row, event) order: ties to the lower id
    r, e = r[perm], e[perm]
    out[row_ids[r], rank_in_group(r)] = e
    return out


def inside_windows(ids: torch.Tensor, windows: list[tuple[float, float] | None], timestamps: torch.Tensor,
                   date_spans: torch.Tensor) -> torch.Tensor:
    """[B, K] bool: event ``ids`` (-1 padded) whose timestamp or mentioned dates fall in their
    question's window (every event, for a question without one; never a pad)."""
    lo = torch.tensor([-math.inf if w is None else w[0] for w in windows], dtype=torch.float64)[:, None]
    hi = torch.tensor([math.inf if w is None else w[1] for w in windows], dtype=torch.float64)[:, None]
    lo, hi, safe = lo.to(timestamps.device), hi.to(timestamps.device), ids.clamp(min=0).to(timestamps.device)
    spans = date_spans[safe]
    return _in_window(timestamps[safe], spans[..., 0], spans[..., 1], lo, hi).to(ids.device) & (ids >= 0)


def _in_window(ts: torch.Tensor, start: torch.Tensor, end: torch.Tensor, lo: torch.Tensor,
               hi: torch.Tensor) -> torch.Tensor:
    """An event's timestamp, or the span of dates it mentions, meets [lo, hi] (NaN spans: no)."""
    return ((ts >= lo) & (ts <= hi)) | ((start <= hi) & (end >= lo))


def keep_inside(ranked: torch.Tensor, inside: torch.Tensor) -> torch.Tensor:
    """A ranked list [B, K] with the events outside their window removed, the rest moved up."""
    order = torch.sort((~inside).to(torch.int8), dim=1, stable=True).indices
    return torch.where(torch.gather(inside, 1, order), torch.gather(ranked, 1, order), torch.full_like(ranked, -1))


def speakers_named(question: str, names: list[str]) -> list[int]:
    """Ids of the speakers whose name (or its first word: "Caroline" for "Caroline Smith") the
    question mentions, as a whole word, any case. A blank name names no one (its pattern would
    match between any two non-word characters)."""
    out = []
    for i, name in enumerate(names):
        if not name.split():
            continue
        forms = {name, name.split()[0]}
        if any(re.search(rf"(?<!\w){re.escape(f)}(?!\w)", question, re.IGNORECASE) for f in forms):
            out.append(i)
    return out


def _named_matrix(named: list[list[int]], device: torch.device) -> torch.Tensor:
    """[B, most named] speaker ids of each question, -2 padded (no speaker id is negative)."""
    wanted = torch.full((len(named), max(map(len, named), default=0) or 1), -2, dtype=torch.long)
    for b, ids in enumerate(named):
        wanted[b, :len(ids)] = torch.tensor(ids, dtype=torch.long)
    return wanted.to(device)


def speaker_ranking(dense: torch.Tensor, named: list[list[int]], speaker_of: torch.Tensor, top: int) -> torch.Tensor:
    """The dense ranking [B, K] restricted to events said by a speaker their question names
    (speakers are event attributes, not entity nodes); [B, top], all -1 where none is named."""
    wanted = _named_matrix(named, dense.device)
    said_by = speaker_of.to(dense.device)[dense.clamp(min=0)]
    inside = (said_by[:, :, None] == wanted[:, None, :]).any(-1) & (dense >= 0)
    return keep_inside(dense, inside)[:, :top]


def _through_nodes(vectors: torch.Tensor, node_embeddings: torch.Tensor, node_event, nodes: int, n: int
                   ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The events reached from each row of ``vectors`` [B, d] through its ``nodes`` most similar
    nodes (``node_embeddings`` [P, d]; ``node_event`` the graph's node -> event view), in the
    order of the nodes' similarity: (row, event, the node's cosine as float64), events of the
    snapshot (< ``n``) only."""
    node_cos = vectors.float() @ node_embeddings.to(vectors.device).float().T             # [B, P]
    t = min(nodes, node_cos.shape[1])
    best_cos, best = torch.topk(node_cos, t, dim=1)
    seg, event, _ = node_event.gather(best.reshape(-1))
    # gather lists the main index's edges before the pending delta's: back to row, then node order
    keep = (event < n).nonzero().squeeze(1)
    keep = keep[torch.sort(seg[keep], stable=True).indices]
    seg, event = seg[keep], event[keep]
    return seg // t, event, best_cos.reshape(-1)[seg].double()


def _ranked(row: torch.Tensor, event: torch.Tensor, score: torch.Tensor, top: int, out: torch.Tensor) -> torch.Tensor:
    """``out`` [B, top] (-1 filled) holding each row's ``top`` best-scored events, best first; the
    pairs come grouped by row (ties keep their order)."""
    perm = top_in_group(row, score, top, out.shape[0])
    row, event = row[perm], event[perm]
    out[row, rank_in_group(row)] = event
    return out


def episode_ranking(episode_embeddings: torch.Tensor, episode_event, sim: Similarity, n: int,
                    cfg: EpisodeSignalConfig, top: int) -> torch.Tensor:
    """[B, top] event ids (-1 padded) ranked by the episode signal; ``episode_event`` is the
    graph's episode -> event view."""
    out = torch.full((sim.batch_size, top), -1, dtype=torch.long, device=sim.queries.device)
    if episode_embeddings.shape[0] == 0 or top == 0:
        return out
    row, event, ep_cos = _through_nodes(sim.queries, episode_embeddings, episode_event, cfg.top, n)
    return _ranked(row, event, sim.pairs(row, event).double() + cfg.weight * ep_cos, top, out)


def asked_phrase(question: str, pattern: re.Pattern | None) -> str | None:
    """What a "what/which X <auxiliary> ..." question asks for instances of (X), or None
    (``EntitySignalConfig.asked_pattern``)."""
    m = None if pattern is None else pattern.match(question)
    return m.group(1).strip() if m else None


def entity_ranking(entity_embeddings: torch.Tensor, entity_event, phrases: torch.Tensor, asks: torch.Tensor,
                   sim: Similarity, n: int, cfg: EntitySignalConfig, top: int,
                   named: list[list[int]] | None = None, speaker_of: torch.Tensor | None = None) -> torch.Tensor:
    """[B, top] event ids (-1 padded) ranked by the entity signal: the events that mention one of
    the ``cfg.top`` entities nearest the question's asked-for phrase (``phrases`` [B, d], unit; a
    row counts only where ``asks``), at a cosine of at least ``cfg.min_cos``, each scored
    cos(q, event) + ``cfg.weight`` * the cosine of its best such entity. ``entity_event`` is the
    graph's entity -> event view; with ``named`` (speaker ids per question) and ``speaker_of``,
    a question that names speakers keeps only the events they said."""
    device = sim.queries.device
    out = torch.full((sim.batch_size, top), -1, dtype=torch.long, device=device)
    if entity_embeddings.shape[0] == 0 or top == 0 or not bool(asks.any()):
        return out
    row, event, ent_cos = _through_nodes(phrases.to(device), entity_embeddings, entity_event, cfg.top, n)
    keep = (ent_cos >= cfg.min_cos) & asks.to(device)[row]
    if named is not None and speaker_of is not None:
        wanted = _named_matrix(named, device)
        said = speaker_of.to(device)[event]
        keep &= (wanted[row] == said[:, None]).any(1) | (wanted[row, 0] == -2)
    row, event = row[keep], event[keep]
    score = sim.pairs(row, event).double() + cfg.weight * ent_cos[keep]
    # an event reached through several entities counts once, at its best score
    key = row * n + event
    order = lexsort((key, False), (score, True))
    first = order[first_in_group(key[order])]
    return _ranked(row[first], event[first], score[first], top, out)


def chain_neighbours(ids: torch.Tensor, prev: torch.Tensor, nxt: torch.Tensor, n: int,
                     ctx: ContextConfig) -> list[tuple[torch.Tensor, float]]:
    """(neighbour ids or -1, weight) for every hop in both directions of the temporal chain."""
    out = []
    for pointer in (prev, nxt):
        cur = ids
        for hop in range(1, ctx.hops + 1):
            cur = torch.where(cur >= 0, pointer[cur.clamp(min=0)], cur)
            cur = torch.where(cur < n, cur, torch.full_like(cur, -1))  # pointers past a snapshot
            out.append((cur, ctx.weight * ctx.decay ** (hop - 1)))
    return out


def context_candidates(hits: list[torch.Tensor], prev, nxt, n: int, ctx: ContextConfig) -> torch.Tensor:
    """The raw hits and their chain neighbours, one row per query, -1 padded, no repeats."""
    base = torch.cat(hits, dim=1)
    cand = torch.cat([base] + [nb for nb, _ in chain_neighbours(base, prev, nxt, n, ctx)], dim=1)
    cand, _ = torch.sort(cand, dim=1)
    dup = torch.zeros_like(cand, dtype=torch.bool)
    dup[:, 1:] = cand[:, 1:] == cand[:, :-1]
    return torch.where(dup, torch.full_like(cand, -1), cand)


def context_scores(cand: torch.Tensor, prev, nxt, n: int, ctx: ContextConfig, dense: Similarity | None = None,
                   chain_dots: torch.Tensor | None = None, keyword: torch.Tensor | None = None) -> torch.Tensor:
    """Score of each candidate's context view, -inf where padded.

    dense: cosine of the query with the (normalised) weighted sum of the window's
    embeddings, i.e. the weighted sum of the window's cosines over the sum's norm
    (``chain_dots``: the store's predecessor cosines, see window_norms).
    keyword=[B, n] BM25 scores: their weighted window sum.
    """
    valid = cand >= 0
    safe = cand.clamp(min=0)
    window = chain_neighbours(cand, prev, nxt, n, ctx)
    if dense is not None:
        members = torch.stack([cand] + [nb for nb, _ in window])            # [1 + 2h, B, C]
        weights = torch.stack([valid.float()] + [w * (nb >= 0) for nb, w in window])
        rows = torch.arange(cand.shape[0], device=cand.device)[:, None].expand_as(members)
        cos = dense.pairs(rows.reshape(-1), members.clamp(min=0).reshape(-1)).view(members.shape).float()
        dot = (weights * cos).sum(0)
        score = dot / window_norms(dense.embeddings, chain_dots, cand, window, ctx.hops)
    else:
        score = torch.gather(keyword, 1, safe)
        for nb, w in window:
            score = score + w * torch.gather(keyword, 1, nb.clamp(min=0)) * (nb >= 0)
        valid &= score > 0  # a window without a single matching term is not a keyword hit
    return torch.where(valid, score, torch.full_like(score, -math.inf))


def context_ranking(cand: torch.Tensor, prev, nxt, n: int, ctx: ContextConfig, dense: Similarity,
                    chain_dots: torch.Tensor | None, top: int) -> torch.Tensor:
    """[B, top] the candidates whose dense temporal-context views score best (``context_scores``,
    then ``top_ids``). Where ``dense`` runs compiled (``Similarity.compiled``: numba on CPU) and the
    norms come from float32 predecessor cosines, compiled loops walk the windows
    (query/anchors_numba.py), the same scores to the bit: a question's few hundred views cost some
    30 tensor operations here."""
    if (dense.compiled and chain_dots is not None and chain_dots.dtype == torch.float32
            and chain_dots.shape[1] >= 2 * ctx.hops):
        from magma_torch.query import anchors_numba   # lazy: an optional accelerator

        weights = [ctx.weight * ctx.decay ** (hop - 1) for hop in range(1, ctx.hops + 1)]   # as chain_neighbours
        return anchors_numba.context_ranking(cand, prev, nxt, n, weights, dense, chain_dots, top)
    return top_ids(cand, context_scores(cand, prev, nxt, n, ctx, dense=dense, chain_dots=chain_dots), top)


def window_norms(embeddings: torch.Tensor, chain_dots: torch.Tensor | None, ids: torch.Tensor,
                 window: list[tuple[torch.Tensor, float]], hops: int) -> torch.Tensor:
    """|e_v + sum_s w_s e_{chain neighbour s of v}| for event ids of any shape (>= 1e-12);
    ``window`` is ``chain_neighbours(ids, ...)``.

    The window is a run of the chain, x_-h .. x_h, so each pair's cosine e_{x_i} . e_{x_j}
    (i < j) is chain_dots[x_j, j-i-1] and the norm needs no embedding rows while the store
    keeps predecessor cosines up to distance 2h; otherwise the rows are gathered.
    """
    if chain_dots is not None and chain_dots.shape[1] >= 2 * hops:
        before, after = window[:hops][::-1], window[hops:]     # x_-h .. x_-1 and x_1 .. x_h
        members = [nb for nb, _ in before] + [ids] + [nb for nb, _ in after]
        weights = [w * (nb >= 0) for nb, w in before] + [torch.ones_like(ids, dtype=chain_dots.dtype)] + [
            w * (nb >= 0) for nb, w in after]
        sq = sum(w * w for w in weights)
        for j in range(1, 2 * hops + 1):
            dots = chain_dots[members[j].clamp(min=0)]           # [*, span]: x_j with x_j-1, x_j-2, ...
            for i in range(j):
                sq = sq + 2 * weights[i] * weights[j] * dots[..., j - i - 1]
        return sq.clamp(min=0).sqrt().clamp(min=1e-12)

    def rows(v: torch.Tensor) -> torch.Tensor:
        return embeddings.index_select(0, v.clamp(min=0).reshape(-1)).view(*v.shape, -1).float()

    acc = rows(ids)
    for nb, w in window:
        acc.addcmul_(rows(nb), (w * (nb >= 0)).unsqueeze(-1).to(acc.dtype))
    return torch.linalg.vector_norm(acc, dim=-1).clamp(min=1e-12)
