"""Valid time from the ``supersedes`` relation: an event's fact holds from its timestamp until
the first later event that updates it (``valid_to``); one never superseded is still current."""
from __future__ import annotations

import torch


def superseders(src: torch.Tensor, dst: torch.Tensor, timestamps: torch.Tensor,
                num_events: int) -> dict[int, list[int]]:
    """Earlier event -> the events of ``0..num_events-1`` that supersede it, first (by
    timestamp, then id) first; ``src``/``dst`` are the relation's (later, earlier) edge lists.
    Edges that reach past ``num_events`` (a snapshot taken before a later write) are ignored."""
    keep = (src < num_events) & (dst < num_events)
    src, dst = src[keep], dst[keep]
    out: dict[int, list[tuple[float, int]]] = {}
    for later, earlier, t in zip(src.tolist(), dst.tolist(), timestamps[src].tolist(), strict=True):
        out.setdefault(earlier, []).append((t, later))
    return {earlier: [later for _, later in sorted(found)] for earlier, found in out.items()}
