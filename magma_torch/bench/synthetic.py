"""Synthetic memories with the shape of real ones, and questions to ask them.

Events are unit vectors clustered around random topic centres (so a question about a
topic finds that topic's events by cosine), spread over conversations (streams) that
each form a temporal chain. Links follow the paper's relations without comparing all
pairs: semantic edges to earlier same-topic events whose cosine clears the threshold,
causal edges to recent events of the same stream, and entity mentions drawn from a
per-topic pool. Every knob is in ``conf/bench/default.yaml``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timezone

import torch

from magma_torch.config.schema import COSINE, MISSING, Checked, at_least, between, setting
from magma_torch.store.tables import EventRow, row_dots

_CHUNK = 1 << 16   # rows per generation step: peak memory stays a few chunks, not [N, d] temporaries


# What the ``graph`` and ``queries`` blocks allow (load_config checks them before any work); the
# values are conf/bench/default.yaml's alone, so none is given here.
@dataclass
class SyntheticGraphConfig(Checked):
    dim: int = MISSING
    events_per_topic: int = setting(MISSING, at_least(1))
    topic_noise: float = setting(MISSING, at_least(0))
    streams: int = setting(MISSING, at_least(1))
    events_per_session: int = setting(MISSING, at_least(1))
    start_epoch: float = MISSING
    seconds_per_event: float = setting(MISSING, at_least(0))
    semantic_candidates: int = setting(MISSING, at_least(0))
    theta_sim: float = setting(MISSING, COSINE)
    causal_candidates: int = setting(MISSING, at_least(0))
    causal_prob: float = setting(MISSING, between(0, 1))
    causal_max_lag: int = setting(MISSING, at_least(0))
    entities_per_topic: int = setting(MISSING, at_least(1))
    mentions_per_event: int = setting(MISSING, at_least(0))
    date_fraction: float = setting(MISSING, between(0, 1))
    date_max_days_back: int = setting(MISSING, at_least(0))


@dataclass
class SyntheticQueriesConfig(Checked):
    query_noise: float = setting(MISSING, at_least(0))
    window_fraction: float = setting(MISSING, between(0, 1))
    window_events: int = setting(MISSING, at_least(0))
    empty_window_fraction: float = setting(MISSING, between(0, 1))


@dataclass(frozen=True)
class SyntheticMemory:
    embeddings: torch.Tensor          # [N, d] unit rows
    topics: torch.Tensor              # [N] topic of each event
    streams: torch.Tensor             # [N] conversation of each event
    sessions: torch.Tensor            # [N] session of each event within its conversation (its episodes)
    timestamps: torch.Tensor          # [N] float64 epoch seconds, increasing with id
    date_days_back: torch.Tensor      # [N] days before the event of the date it mentions, -1 for none
    centres: torch.Tensor             # [T, d] topic centres
    semantic: tuple[torch.Tensor, torch.Tensor, torch.Tensor]   # (newer, older, cosine), by newer
    causal: tuple[torch.Tensor, torch.Tensor]                    # (cause, effect), by effect
    mentions: tuple[torch.Tensor, torch.Tensor]                  # (event, entity), by event
    entity_names: list[str]
    entity_embeddings: torch.Tensor   # [M, d]

    @property
    def num_events(self) -> int:
        return self.embeddings.shape[0]


def _around(centres: torch.Tensor, which: torch.Tensor, noise: float, g: torch.Generator) -> torch.Tensor:
    """Unit vectors centre + noise * z / sqrt(d): cosine to the centre ~ 1 / sqrt(1 + noise^2)."""
    d = centres.shape[1]
    out = torch.empty(which.numel(), d)
    for a in range(0, which.numel(), _CHUNK):
        sl = slice(a, a + _CHUNK)
        z = torch.randn(out[sl].shape, generator=g) * (noise / math.sqrt(d))
        out[sl] = torch.nn.functional.normalize(centres[which[sl]] + z, dim=1)
    return out


def _earlier_in_group(group: torch.Tensor, draws: int, max_back: int | None, g: torch.Generator):
    """For each id and each of ``draws`` draws, a random earlier id of the same group, at most
    ``max_back`` members back (None: any): (id, earlier id), invalid draws removed."""
    n = group.numel()
    order = torch.argsort(group * n + torch.arange(n))           # by group, then id
    pos = torch.arange(n)
    first = torch.ones(n, dtype=torch.bool)
    first[1:] = group[order][1:] != group[order][:-1]
    start = torch.cummax(torch.where(first, pos, torch.zeros_like(pos)), 0).values
    rank = torch.empty(n, dtype=torch.long)
    rank[order] = pos - start                                    # members before it in its group
    reach = rank if max_back is None else rank.clamp(max=max_back)
    back = (torch.rand(n, draws, generator=g) * reach[:, None]).long() + 1
    ok = back <= rank[:, None]
    where = torch.empty(n, dtype=torch.long)
    where[order] = pos                                           # position of each id in `order`
    ids = torch.arange(n)[:, None].expand(n, draws)
    earlier = order[(where[:, None] - back).clamp(min=0)]
    return ids[ok], earlier[ok]


def _unique_pairs(a: torch.Tensor, b: torch.Tensor, n_b: int) -> tuple[torch.Tensor, torch.Tensor]:
    keys = torch.unique(a * n_b + b)                             # sorted: grouped by `a`
    return keys // n_b, keys % n_b


def synthesize(n: int, cfg, seed: int = 0) -> SyntheticMemory:
    """A memory of ``n`` events; ``cfg`` is the ``graph`` block of conf/bench/default.yaml."""
    if n < 1:
        raise ValueError(f"--events must be at least 1, got {n}")
    g = torch.Generator().manual_seed(seed)
    n_topics = max(1, math.ceil(n / cfg.events_per_topic))
    centres = torch.nn.functional.normalize(torch.randn(n_topics, cfg.dim, generator=g), dim=1)
    topics = torch.randint(0, n_topics, (n,), generator=g)
    emb = _around(centres, topics, cfg.topic_noise, g)
    streams = torch.randint(0, cfg.streams, (n,), generator=g)
    order = torch.argsort(streams, stable=True)            # position of each event within its stream
    position = torch.empty_like(order)
    position[order] = torch.arange(n) - torch.searchsorted(streams[order], streams[order])
    sessions = position // cfg.events_per_session
    timestamps = cfg.start_epoch + torch.arange(n, dtype=torch.float64) * cfg.seconds_per_event
    dated = torch.rand(n, generator=g) < cfg.date_fraction
    days = torch.randint(0, cfg.date_max_days_back + 1, (n,), generator=g)
    date_days_back = torch.where(dated, days, torch.full_like(days, -1))

    new, old = _earlier_in_group(topics, cfg.semantic_candidates, None, g)
    new, old = _unique_pairs(new, old, n)
    cos = row_dots(emb, new, emb, old, torch.float32)
    keep = cos > cfg.theta_sim
    semantic = (new[keep], old[keep], cos[keep])

    effect, cause = _earlier_in_group(streams, cfg.causal_candidates, cfg.causal_max_lag, g)
    kept = torch.rand(effect.numel(), generator=g) < cfg.causal_prob
    effect, cause = _unique_pairs(effect[kept], cause[kept], n)
    causal = (cause, effect)

    pool = cfg.entities_per_topic
    picks = torch.randint(0, pool, (n, cfg.mentions_per_event), generator=g)
    entity = topics[:, None] * pool + picks
    event = torch.arange(n)[:, None].expand_as(entity)
    mentions = _unique_pairs(event.reshape(-1), entity.reshape(-1), n_topics * pool)
    entity_topic = torch.arange(n_topics).repeat_interleave(pool)
    names = [f"topic{t}-entity{j}" for t in range(n_topics) for j in range(pool)]
    return SyntheticMemory(emb, topics, streams, sessions, timestamps, date_days_back, centres, semantic, causal,
                           mentions, names, _around(centres, entity_topic, cfg.topic_noise, g))


def event_rows(mem: SyntheticMemory, lo: int, hi: int) -> list[EventRow]:
    """Store rows of events lo..hi-1 (the text names the event; nothing reads it)."""
    rows = []
    for i, ts, stream, session, back in zip(range(lo, hi), mem.timestamps[lo:hi].tolist(), mem.streams[lo:hi].tolist(),
                                            mem.sessions[lo:hi].tolist(), mem.date_days_back[lo:hi].tolist(),
                                            strict=True):
        dates = []
        if back >= 0:
            day = datetime.fromtimestamp(ts - back * 86400, timezone.utc).date().isoformat()
            dates = [{"expression": f"{back} days ago", "start": day, "end": day, "granularity": "day",
                      "label": day}]
        rows.append(EventRow(text=f"synthetic event {i}", timestamp=ts, stream=f"stream{stream}",
                             session_id=f"session{session}", dates=dates))
    return rows


def make_queries(mem: SyntheticMemory, n_queries: int, graph_cfg, cfg, seed: int = 0):
    """Question embeddings [Q, d] around random topics and their time windows (epoch
    seconds, None for no window); ``cfg`` is the ``queries`` block."""
    g = torch.Generator().manual_seed(seed + 1)
    n = mem.num_events
    topics = torch.randint(0, mem.centres.shape[0], (n_queries,), generator=g)
    q = _around(mem.centres, topics, cfg.query_noise, g)
    draw = torch.rand(n_queries, generator=g).tolist()
    around = torch.randint(0, n, (n_queries,), generator=g).tolist()
    half = cfg.window_events * graph_cfg.seconds_per_event / 2
    # An empty window ends before the earliest date any event can mention.
    empty_end = graph_cfg.start_epoch - (graph_cfg.date_max_days_back + 2) * 86400
    windows = []
    for u, e in zip(draw, around, strict=True):
        if u < cfg.empty_window_fraction:
            windows.append((empty_end - 2 * half, empty_end))
        elif u < cfg.window_fraction:
            t = float(mem.timestamps[e])
            windows.append((t - half, t + half))
        else:
            windows.append(None)
    return q, windows
