"""Plain-Python reference implementation of Algorithm 1's beam search: the test oracle.

It reads the graph as adjacency lists and follows the paper step by step, one query
and one neighbour at a time, so that the batched tensor version can be checked
against something obviously right. Same tie rules: higher score first, then lower id.
"""
from __future__ import annotations

import math
from collections.abc import Sequence

from magma_torch.query.beam import BeamConfig
from magma_torch.store.graph import NODE_HOPS, TRAVERSED


def adjacency_lists(edges: dict[str, Sequence[tuple[int, int]]]) -> tuple[dict, dict]:
    """From stored edges (relation -> [(src, dst)]) to undirected traversal lists:
    event -> [(neighbour, relation)], and for each node-mediated hop (entity, episode)
    event -> [node] / node -> [event]. The episode chain joins episodes, not events: not walked."""
    event_adj: dict[int, list[tuple[int, str]]] = {}
    hubs: dict[str, tuple[dict[int, list[int]], dict[int, list[int]]]] = {rel: ({}, {}) for rel in NODE_HOPS}
    for rel, pairs in edges.items():
        for s, d in pairs:
            if rel in hubs:
                hubs[rel][0].setdefault(s, []).append(d)
                hubs[rel][1].setdefault(d, []).append(s)
            elif rel in TRAVERSED:
                event_adj.setdefault(s, []).append((d, rel))
                event_adj.setdefault(d, []).append((s, rel))
    return event_adj, hubs


def reference_beam_search(event_adj, hub_lists, embeddings: Sequence[Sequence[float]], query: Sequence[float],
                          intent_weights: dict[str, float], anchors: Sequence[tuple[int, float]],
                          cfg: BeamConfig) -> dict[int, float]:
    """One query: returns {event id: salience score} for every node the search keeps."""
    mentions, mentioned_by = hub_lists["entity"]
    in_episode, episode_events = hub_lists["episode"]
    n = len(embeddings)

    def cos(v: int) -> float:
        return sum(a * b for a, b in zip(embeddings[v], query, strict=True))

    def specificity(entity: int) -> float:
        """log(N / df) / log(N): an entity mentioned by every event carries nothing."""
        if n < 2:
            return 1.0
        return min(max(math.log(n / max(len(mentioned_by.get(entity, [])), 1)) / math.log(n), 0.0), 1.0)

    ranked = sorted(anchors, key=lambda a: (-a[1], a[0]))[: cfg.max_nodes]
    visited = {node: score for node, score in ranked}
    frontier = list(ranked)
    for _ in range(cfg.max_depth):
        room = cfg.max_nodes - len(visited)
        if room <= 0 or not frontier:
            break
        candidates: dict[int, float] = {}
        for u, score_u in frontier:
            neighbours = [(v, rel, 1.0) for v, rel in event_adj.get(u, [])]
            neighbours += [(v, "entity", specificity(e)) for e in mentions.get(u, []) for v in mentioned_by.get(e, [])]
            neighbours += [(v, "episode", 1.0) for p in in_episode.get(u, []) for v in episode_events.get(p, [])]
            for v, rel, spec in neighbours:
                if v == u or v in visited or intent_weights[rel] == 0:  # weight 0: relation removed
                    continue
                c = cos(v)
                if c < cfg.drop_threshold:
                    continue
                s_uv = math.exp(cfg.lambda1 * intent_weights[rel] * spec + cfg.lambda2 * c)
                score_v = cfg.gamma * score_u + s_uv
                if score_v > candidates.get(v, -math.inf):
                    candidates[v] = score_v
        if not candidates:
            break
        best = sorted(candidates.items(), key=lambda kv: (-kv[1], kv[0]))[: min(cfg.beam_width, room)]
        visited.update(best)
        frontier = best
    return visited


