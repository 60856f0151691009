"""Linearisation (Algorithm 1, step 4): retrieved events -> a compact, dated context.

Which events fit is decided by salience (most salient first, until the token budget);
the order they are shown in follows the intent: WHEN chronological, WHY causes before
effects, otherwise salience. Runs of retrieved events that did not fit are collapsed to
a brevity code so the reader still sees that something happened in between.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timezone
from graphlib import TopologicalSorter

from magma_torch.store.tables import EventRow
from magma_torch.text import count_tokens


@dataclass(frozen=True)
class Block:
    event: int
    text: str
    tokens: int


def format_time(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, timezone.utc).strftime("%Y-%m-%d %H:%M")


def render_block(event: int, row: EventRow) -> str:
    """One event as the reader sees it: time, reference id, speaker, text, resolved dates."""
    ref = row.source_id or f"E{event}"
    who = f"{row.speaker}: " if row.speaker else ""
    dates = "; ".join(f"{d['expression']} = {d['label']}" for d in row.dates)
    return f"[{format_time(row.timestamp)}] ({ref}) {who}{row.text}" + (f" (dates: {dates})" if dates else "")


def render_blocks(events: list[int], rows: list[EventRow]) -> list[Block]:
    return [Block(e, text, count_tokens(text)) for e in events for text in [render_block(e, rows[e])]]


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


def display_order(events: list[int], intent: str, rows: list[EventRow], causal: list[tuple[int, int]]) -> list[int]:
    """The order events are shown in: by time for WHEN, causes first for WHY, else as given."""
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
              budget_tokens: int | None, header: str = "") -> tuple[str, list[Block]]:
    """Returns (context, blocks of every ranked event in salience order with the first
    ``k`` of them in the context); the context never exceeds ``budget_tokens`` unless a
    single block alone does."""
    blocks = render_blocks(ranked, rows)
    fixed = count_tokens(header)
    kept = select_within_budget(blocks, None if budget_tokens is None else budget_tokens - fixed)
    order = display_order(ranked, intent, rows, causal)
    # Brevity codes cost tokens too: give up the least salient block until everything fits.
    while budget_tokens is not None and len(kept) > 1:
        ids = {b.event for b in kept}
        used = fixed + sum(b.tokens for b in kept) + _BREVITY_TOKENS * _gaps(order, ids)
        if used <= budget_tokens:
            break
        kept = kept[:-1]
    return _assemble(order, kept, header), blocks[: len(kept)], blocks


def _gaps(order: list[int], kept: set[int]) -> int:
    """Runs of consecutive left-out events in display order (one brevity code each)."""
    runs, inside = 0, False
    for e in order:
        out = e not in kept
        runs += out and not inside
        inside = out
    return runs


def _assemble(order: list[int], kept: list[Block], header: str) -> str:
    text_of = {b.event: b.text for b in kept}
    lines, skipped = [header] if header else [], 0
    for e in order:
        if e in text_of:
            if skipped:
                lines.append(_brevity(skipped))
                skipped = 0
            lines.append(text_of[e])
        else:
            skipped += 1
    if skipped:
        lines.append(_brevity(skipped))
    return "\n".join(lines)


def _brevity(n: int) -> str:
    return f"…{n} intermediate event{'s' if n != 1 else ''}…"


_BREVITY_TOKENS = count_tokens(_brevity(2))
