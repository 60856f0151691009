"""Where backfilled events go: their place in their stream's chain and their episode.

A backfilled event (``add(..., backfill=True)``) goes right after the last event of its stream
whose timestamp is <= its own (before the stream's first event when there is none); events of
one batch that land in the same gap keep their time and then batch order. Its row follows that
predecessor's (or precedes the successor's), so every stream's rows stay in stream order.

Its episode, walking each stream's chain in order:

- between two events of one episode: that episode (an episode stays a run of its stream);
- else the episode of its predecessor when it continues it (same session or none, gap within
  ``episodes.max_gap_hours``: ``episodes.continues``);
- else the episode of its next stored event when that one continues it;
- else an episode of its own, which later backfilled events of the same gap may join.

The topic-shift cut is not applied to backfilled events (it compares with an episode's running
sum as events arrive, which has no meaning in the middle of an episode).
"""
from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence

from magma_torch.ingest.episodes import EpisodeConfig, continues
from magma_torch.store.compact import Placement
from magma_torch.store.tables import EventRow


def place(stored: Sequence[EventRow], stored_episode: Sequence[int], episodes: int, new: Sequence[EventRow],
          cfg: EpisodeConfig) -> Placement:
    """``new`` events placed among the ``stored`` rows (with their ``stored_episode``; ``episodes``
    episodes in all). Indices past the stored rows name the new events (n + j)."""
    n = len(stored)
    row_of = [*stored, *new]
    episode = {i: e for i, e in enumerate(stored_episode)}
    before: dict[int, list[int]] = {}            # stored row (n: the end) -> new events right before it
    slot_of: dict[int, int] = {}
    opened = 0
    for chain in _merged_chains(stored, new):
        for pos, x in enumerate(chain):
            if x < n:
                continue
            p = chain[pos - 1] if pos else None
            s = next((y for y in chain[pos + 1:] if y < n), None)
            slot_of[x] = (n if s is None else s) if p is None else (p + 1 if p < n else slot_of[p])
            before.setdefault(slot_of[x], []).append(x)
            if p is not None and s is not None and episode[p] == episode[s]:
                episode[x] = episode[p]
            elif p is not None and continues(row_of[p], row_of[x], cfg):
                episode[x] = episode[p]
            elif s is not None and continues(row_of[x], row_of[s], cfg):
                episode[x] = episode[s]
            else:
                episode[x], opened = episodes + opened, opened + 1
    order = [x for i in range(n + 1) for x in (*before.get(i, ()), *((i,) if i < n else ()))]
    return Placement(order, [episode[n + j] for j in range(len(new))], opened)


def _merged_chains(stored: Sequence[EventRow], new: Sequence[EventRow]) -> list[list[int]]:
    """Per stream (in order of first appearance), its stored rows and new events in time order."""
    n = len(stored)
    chains: dict[str, list[int]] = {}
    times: dict[str, list[float]] = {}
    for i, r in enumerate(stored):
        chains.setdefault(r.stream, []).append(i)
        times.setdefault(r.stream, []).append(r.timestamp)
    for j in sorted(range(len(new)), key=lambda j: new[j].timestamp):   # stable: batch order breaks ties
        r = new[j]
        chain, ts = chains.setdefault(r.stream, []), times.setdefault(r.stream, [])
        at = bisect_right(ts, r.timestamp)
        chain.insert(at, n + j)
        ts.insert(at, r.timestamp)
    return list(chains.values())

