"""Linearisation (Algorithm 1, step 4): retrieved events -> a compact, dated context.

Which events fit is decided by salience (most salient first, until the token budget);
the order they are shown in follows the intent: WHEN chronological, WHY causes before
effects, otherwise salience. Events are shown under the episode they belong to: one dated
header per episode, then its events in time order (WHY: causes first), each with its
reference id and speaker, and its own time only where it differs from the episode's
start. Runs of retrieved events that did not fit are collapsed to a brevity code so the
reader still sees that something happened in between (not when one event alone is shown).

A block's ``tokens`` include its episode's header when it is the most salient event of
that episode: summed in salience order, they are the context's size, brevity codes aside.
The most salient block is always shown; when it alone is over the budget, its text is cut
to fit and marked "…[cut]" (``Block.cut``), so the budget holds for any event.
"""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from graphlib import TopologicalSorter

from magma_torch.store.tables import EventRow
from magma_torch.tokens import count_tokens, first_tokens


@dataclass(frozen=True)
class Block:
    event: int
    text: str
    tokens: int
    episode: int = -1                  # -1: shown on its own, fully dated
    cut: bool = False                  # its text was cut to fit the budget


def format_time(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, timezone.utc).strftime("%Y-%m-%d %H:%M")


def render_block(event: int, row: EventRow, episode_start: float | None = None, note: str = "") -> str:
    """One event as the reader sees it: time (unless it is its episode's start time),
    reference id, speaker, text, resolved dates (but for those that name the event's own
    day, "today", which its shown time already gives), and ``note`` (e.g. that a later
    event superseded it)."""
    ref = row.source_id or f"E{event}"
    who = f"{row.speaker}: " if row.speaker else ""
    own_day = format_time(row.timestamp)[:10]
    dates = "; ".join(f"{d['expression']} = {d['label']}" for d in row.dates if d["label"] != own_day)
    when = "" if episode_start == row.timestamp else f"[{format_time(row.timestamp)}] "
    return f"{when}({ref}) {who}{row.text}" + (f" (dates: {dates})" if dates else "") + (f" {note}" if note else "")


def episode_header(start: float) -> str:
    return f"## {format_time(start)}"


def render_blocks(events: list[int], rows: list[EventRow], episodes: list[int] | None = None,
                  starts: dict[int, float] | None = None, ids: Sequence[int] | None = None,
                  notes: dict[int, str] | None = None) -> list[Block]:
    """Blocks of ``events`` (rows) in salience order; with ``episodes`` (each event's episode) and
    ``starts`` (each episode's start time) the first block of an episode carries its header's
    tokens. ``ids``: each row's stable event id, shown as its reference (default: the row);
    ``notes``: a mark per event, counted in its block's tokens."""
    ref = (lambda e: e) if ids is None else ids.__getitem__
    notes = notes or {}
    if episodes is None:
        return [Block(e, text, count_tokens(text)) for e in events
                for text in [render_block(ref(e), rows[e], note=notes.get(e, ""))]]
    out, headed = [], set()
    for e, ep in zip(events, episodes, strict=True):
        text = render_block(ref(e), rows[e], starts[ep], notes.get(e, ""))
        extra = 0 if ep in headed else count_tokens(episode_header(starts[ep]))
        headed.add(ep)
        out.append(Block(e, text, count_tokens(text) + extra, ep))
    return out


def select_within_budget(blocks: list[Block], budget_tokens: int | None) -> list[Block]:
    """Blocks in salience order until the budget is spent (always at least the first)."""
    if budget_tokens is None:
        return list(blocks)
    out, used = [], 0
    for b in blocks:
        if out and used + b.tokens > budget_tokens:
            break
        out.append(b)
        used += b.tokens
    return out


def cut_block(b: Block, room: int) -> Block:
    """``b`` cut to ``room`` tokens, its own episode header's share included, with the cut
    marked; ``b`` itself when it fits. A room too small for the mark leaves just the mark."""
    if b.tokens <= room:
        return b
    header = b.tokens - count_tokens(b.text)
    kept = first_tokens(b.text, room - header - _CUT_TOKENS)
    text = f"{kept} {CUT_MARK}" if kept else CUT_MARK
    return Block(b.event, text, header + count_tokens(text), b.episode, cut=True)


def display_order(events: list[int], intent: str, rows: list[EventRow], causal: list[tuple[int, int]],
                  episodes: list[int] | None = None, follows: dict[int, int] | None = None) -> list[int]:
    """The order events are shown in: by time for WHEN, causes first for WHY, else as given
    (salience). With ``episodes``, each episode's events are shown together, in time order
    (WHY: causes first), the episodes by time (WHEN, WHY) or by their most salient event.
    ``follows`` (event -> the event that superseded it): such an event, with its episode, is
    moved behind that one when the order put it ahead; facts moved behind one current fact are
    shown newest first."""
    if follows:   # oldest first: each goes right behind its current fact, ahead of those moved before it
        follows = dict(sorted(follows.items(), key=lambda item: (rows[item[0]].timestamp, item[0])))
    if episodes is None:
        return _behind([[e] for e in _order(events, intent, rows, causal)], follows)
    members: dict[int, list[int]] = defaultdict(list)
    for e, ep in zip(events, episodes, strict=True):
        members[ep].append(e)
    groups = list(members.values())                       # episodes by their most salient event
    if intent in ("WHEN", "WHY"):
        groups.sort(key=lambda g: min((rows[e].timestamp, e) for e in g))
    inner = "WHY" if intent == "WHY" else "WHEN"
    return _behind([_order(g, inner, rows, causal) for g in groups], follows)


def _behind(groups: list[list[int]], follows: dict[int, int] | None) -> list[int]:
    """The groups in order, each one holding an event of ``follows`` moved right behind the
    group of the event it follows when it came before it (groups move, so an episode stays whole)."""
    for e, later in (follows or {}).items():
        at = {x: k for k, g in enumerate(groups) for x in g}
        if e in at and later in at and at[e] < at[later]:
            g = groups.pop(at[e])
            groups.insert(at[later], g)          # at[later] is one less after the pop: right behind it
    return [e for g in groups for e in g]


def _order(events: list[int], intent: str, rows: list[EventRow], causal: list[tuple[int, int]]) -> list[int]:
    if intent == "WHEN":
        return sorted(events, key=lambda e: (rows[e].timestamp, e))
    if intent == "WHY":
        chosen = set(events)
        preds = defaultdict(set)
        for c, e in causal:
            if c in chosen and e in chosen:
                preds[e].add(c)
        ts = TopologicalSorter({e: preds.get(e, set()) for e in events})
        ts.prepare()
        out = []
        while ts.is_active():
            ready = sorted(ts.get_ready(), key=lambda e: (rows[e].timestamp, e))  # ties: chronological
            out.extend(ready)
            ts.done(*ready)
        return out
    return list(events)


def linearize(ranked: list[int], intent: str, rows: list[EventRow], causal: list[tuple[int, int]],
              budget_tokens: int | None, header: str = "", episodes: list[int] | None = None,
              starts: dict[int, float] | None = None, ids: Sequence[int] | None = None,
              notes: dict[int, str] | None = None, follows: dict[int, int] | None = None
              ) -> tuple[str, list[Block], list[Block]]:
    """Returns (context, the blocks in the context in salience order, the blocks of every
    ranked event in salience order, a cut one as it is shown); the context never exceeds
    ``budget_tokens`` unless the budget cannot hold ``header``, the most salient event's episode
    header and the cut mark. ``episodes``/``starts``/``ids``/``notes``: see ``render_blocks``; ``follows``:
    ``display_order``."""
    blocks = render_blocks(ranked, rows, episodes, starts, ids, notes)
    fixed = count_tokens(header)
    kept = select_within_budget(blocks, None if budget_tokens is None else budget_tokens - fixed)
    order = display_order(ranked, intent, rows, causal, episodes, follows)
    # Brevity codes cost tokens too: give up the least salient block until everything fits.
    while budget_tokens is not None and len(kept) > 1:
        ids = {b.event for b in kept}
        used = fixed + sum(b.tokens for b in kept) + _BREVITY_TOKENS * _gaps(order, ids)
        if used <= budget_tokens:
            break
        kept = kept[:-1]
    # One event alone is shown without brevity codes: with nothing shown around it they say nothing,
    # and they took the room of its text (a budget of 20 showed a header, "…[cut]" and a code).
    alone = budget_tokens is not None and len(kept) == 1
    if alone:
        # Only the most salient block alone can still be over the budget: cut its text.
        kept = [cut_block(kept[0], budget_tokens - fixed)]
        blocks = kept + blocks[1:]
    return _assemble(order, kept, header, starts, codes=not alone), kept, blocks


def _gaps(order: list[int], kept: set[int]) -> int:
    """Runs of consecutive left-out events in display order (one brevity code each)."""
    runs, inside = 0, False
    for e in order:
        out = e not in kept
        runs += out and not inside
        inside = out
    return runs


def _assemble(order: list[int], kept: list[Block], header: str, starts: dict[int, float] | None,
              codes: bool = True) -> str:
    """The context: ``header``, then the ``kept`` blocks in display ``order`` under their episode headers,
    with (``codes``) a brevity code for each run of left-out events."""
    by_event = {b.event: b for b in kept}
    lines, skipped, shown_episode = [header] if header else [], 0, None
    for e in order:
        if e in by_event:
            if skipped and codes:
                lines.append(_brevity(skipped))
                skipped = 0
            b = by_event[e]
            if b.episode >= 0 and b.episode != shown_episode:
                lines.append(episode_header(starts[b.episode]))
                shown_episode = b.episode
            lines.append(b.text)
        else:
            skipped += 1
    if skipped and codes:
        lines.append(_brevity(skipped))
    return "\n".join(lines)


def _brevity(n: int) -> str:
    return f"…{n} intermediate event{'s' if n != 1 else ''}…"


_BREVITY_TOKENS = count_tokens(_brevity(2))
CUT_MARK = "…[cut]"
_CUT_TOKENS = count_tokens(CUT_MARK)
