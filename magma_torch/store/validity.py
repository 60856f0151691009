"""Valid time from the ``supersedes`` relation: an event's fact holds from its timestamp
until the first later event that updates it (``valid_to``); one never superseded is open."""
from __future__ import annotations

import torch


def superseders(src: torch.Tensor, dst: torch.Tensor, timestamps: list[float] | torch.Tensor,
                num_events: int) -> dict[int, int]:
    """Earlier event -> the first (by timestamp, then id) event of ``0..num_events-1`` that
    supersedes it; ``src``/``dst`` are the relation's (later, earlier) edge lists. Edges that
    reach past ``num_events`` (a snapshot taken before a later write) are ignored."""
    first: dict[int, int] = {}
    ts = timestamps.tolist() if isinstance(timestamps, torch.Tensor) else timestamps
    for later, earlier in zip(src.tolist(), dst.tolist()):
        if later >= num_events or earlier >= num_events:
            continue
        best = first.get(earlier)
        if best is None or (ts[later], later) < (ts[best], best):
            first[earlier] = later
    return first
