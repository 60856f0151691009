"""The query process prefers what holds now: a superseded event (an earlier fact a later event
updated, the store's ``supersedes`` relation) is shown right behind the event that holds now.

``prefer_current`` regroups a retrieval's salience order: every event superseded by another
joins the group of its current version (the last of its chain of updates; of several updates
of one event, the chain of the most salient one), the group takes the place of its most
salient member, and inside it the current version comes first, then the older facts, newest
first. With ``pull_current`` the current version joins the retrieval when
the beam did not reach it. A question about the past (a ``past_cues`` word: "before",
"previous", "used to"...; or a time window that ends before the update) keeps the salience
order: the reader sees the earlier fact where it ranks, dated and marked.
"""
from __future__ import annotations

from collections.abc import Sequence

from magma_torch.config.schema import SupersessionConfig
from magma_torch.query.linearize import format_time
from magma_torch.store.tables import EventRow


def current_version(event: int, later_of: dict[int, list[int]], rank: dict[int, int], rows: list[EventRow],
                    window_end: float | None = None) -> int:
    """The last event of ``event``'s chain of updates (itself when never superseded), each step
    to the best-ranked of its updates (``rank``; unranked ones by time) at or before ``window_end``
    (epoch seconds; None: any)."""
    while True:                     # updates are later events: the chain ends
        updates = [s for s in later_of.get(event, ())
                   if window_end is None or rows[s].timestamp <= window_end]
        if not updates:
            return event
        event = min(updates, key=lambda s: rank.get(s, len(rank)))


def prefer_current(ranked: list[tuple[int, float]], later_of: dict[int, list[int]], rows: list[EventRow],
                   cfg: SupersessionConfig, past: bool,
                   window_end: float | None = None) -> tuple[list[tuple[int, float]], dict[int, int]]:
    """(event, score) in salience order, regrouped so each current fact precedes the facts it
    superseded (see the module docstring), and each regrouped superseded event's current
    version (the display order keeps it behind that one). ``window_end``: the end of the
    question's time window (epoch seconds); an update after it is ignored (the question asks
    about before)."""
    if not cfg.current_first or past or not ranked:
        return ranked, {}
    rank = {e: k for k, (e, _) in enumerate(ranked)}
    groups: dict[int, list[tuple[int, float]]] = {}
    for e, score in ranked:
        groups.setdefault(current_version(e, later_of, rank, rows, window_end), []).append((e, score))
    out = []
    for h, members in groups.items():       # dicts keep insertion order: the best member's rank
        present = {e for e, _ in members}
        if h not in present and cfg.pull_current:
            members.append((h, members[0][1]))
        out += sorted(members, key=lambda m: (m[0] != h, -rows[m[0]].timestamp, -m[0]))
    shown = {e for e, _ in out}
    return out, {e: h for h, members in groups.items() if h in shown for e, _ in members if e != h}


def notes(events: list[int], later_of: dict[int, list[int]], rows: list[EventRow],
          ids: Sequence[int]) -> dict[int, str]:
    """The mark each superseded event (a row) carries in the context: when and by which events, each
    named by its source id or else its stable event id ``ids[row]``, as the context names events (rows
    are renumbered by a forget: a row's number could name another event, or the marked one itself)."""
    def by(s: int) -> str:
        return f"{format_time(rows[s].timestamp)[:10]} by ({rows[s].source_id or f'E{ids[s]}'})"
    return {e: f"[superseded {'; '.join(by(s) for s in later_of[e])}]" for e in events if e in later_of}
