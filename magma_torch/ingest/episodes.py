"""Episode segmentation on the fast path (paper Sec. 3.2: "higher-level episodic groupings").

Each stream's events are cut into episodes, runs of consecutive events: a new episode
opens at a new session, after a time gap longer than ``max_gap_hours``, or at a topic
shift (the event's cosine with the open episode's embedding below ``topic_shift``, once
the episode holds ``min_events`` events). It reads only what the fast path already has
(stream order, session ids, timestamps, embeddings), so replaying the write-ahead log
gives the same episodes.
"""
from __future__ import annotations

from collections import defaultdict

import torch

from magma_torch.config.schema import EpisodeConfig
from magma_torch.store.store import MemoryStore


def assign_episodes(store: MemoryStore, ids: list[int] | range, embeddings: torch.Tensor, cfg: EpisodeConfig,
                    tokens: list[list[str]]) -> None:
    """Put each new event (appended, in id order) into its stream's open episode or a new one,
    and write the event -> episode edges, the episode chain and the episodes' keyword
    documents. The caller holds ``store.lock``."""
    ev, ep = store.events, store.episodes
    first_new = len(ep)
    open_of = dict(ep.last_of_stream)
    size = {e: int(ep.size.data[e]) for e in open_of.values()}
    sums: dict[int, torch.Tensor] = {}           # running sums, read by the topic test only
    streams, firsts, members, chain = [], [], [], []
    prev = ev.prev.data[ids[0]:ids[0] + len(ids)].tolist()
    for offset, i in enumerate(ids):
        row, p = ev.rows[i], prev[offset]
        cur = open_of.get(row.stream, -1)
        if p < 0 or cur < 0 or _starts_episode(ev.rows[p], row, cur, size, sums, ep, first_new, embeddings[offset],
                                               cfg):
            new = first_new + len(streams)
            streams.append(row.stream)
            firsts.append(i)
            if cur >= 0:
                chain.append((cur, new))
            open_of[row.stream], size[new], cur = new, 0, new
        members.append(cur)
        size[cur] += 1
        if cfg.topic_shift > 0:
            sums[cur] = _running_sum(sums, ep, cur, first_new) + embeddings[offset]
    event_ids = torch.as_tensor(list(ids), dtype=torch.long)
    member_ids = torch.tensor(members, dtype=torch.long)
    ep.add(streams, firsts, event_ids, member_ids, embeddings)
    ev.episode.data[event_ids.to(ev.episode.data.device)] = member_ids.to(ev.episode.data.device)
    docs = defaultdict(list)
    for e, t in zip(members, tokens, strict=True):
        docs[e].extend(t)
    for e in sorted(docs):
        if e < first_new:
            store.episode_keywords.extend_doc(e, docs[e])
        else:
            store.episode_keywords.add([docs[e]])
    store.graph.add_edges("episode", event_ids, member_ids)
    if chain:
        s, d = (torch.tensor(c, dtype=torch.long) for c in zip(*chain, strict=True))
        store.graph.add_edges("episode_chain", s, d)


def _running_sum(sums: dict, episodes, ep: int, first_new: int) -> torch.Tensor | int:
    """Episode ``ep``'s summed embedding so far: this batch's running sum, else the stored one
    (0 for an episode this batch opened and has not added to yet)."""
    if ep in sums:
        return sums[ep]
    return episodes.sums.data[ep] if ep < first_new else 0


def continues(prev_row, row, cfg: EpisodeConfig) -> bool:
    """Whether ``row`` may follow ``prev_row`` (its stream predecessor) in one episode as far as
    sessions and time go: not another session, no gap longer than ``max_gap_hours``."""
    if prev_row.session_id is not None and row.session_id is not None and prev_row.session_id != row.session_id:
        return False
    return row.timestamp - prev_row.timestamp <= cfg.max_gap_hours * 3600


def _starts_episode(prev_row, row, current: int, size: dict, sums: dict, episodes, first_new: int,
                    embedding: torch.Tensor, cfg: EpisodeConfig) -> bool:
    if not continues(prev_row, row, cfg):
        return True
    if cfg.topic_shift <= 0 or size[current] < cfg.min_events:
        return False
    s = _running_sum(sums, episodes, current, first_new).float()
    cos = float(s @ embedding.float() / torch.linalg.vector_norm(s).clamp(min=1e-12))
    return cos < cfg.topic_shift
