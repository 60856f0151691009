"""Segmented-tensor helpers: per-group ranks and lexicographic sorts on flat tensors.

A batch of variable-length lists is kept flat (one row per (query, item)); these turn
"sort within each query" and "top-k per query" into whole-tensor operations.
"""
from __future__ import annotations

import torch


def first_in_group(sorted_keys: torch.Tensor) -> torch.Tensor:
    """True at the first element of each run of equal keys."""
    first = torch.ones_like(sorted_keys, dtype=torch.bool)
    first[1:] = sorted_keys[1:] != sorted_keys[:-1]
    return first


def rank_in_group(sorted_groups: torch.Tensor) -> torch.Tensor:
    """0-based position of each element within its run of equal group ids."""
    idx = torch.arange(sorted_groups.numel(), device=sorted_groups.device)
    start = torch.where(first_in_group(sorted_groups), idx, torch.zeros_like(idx))
    return idx - torch.cummax(start, 0).values


def lexsort(*keys_desc_flags: tuple[torch.Tensor, bool]) -> torch.Tensor:
    """Lexicographic order: first key is the most significant (stable sorts, last to first)."""
    perm = None
    for key, descending in reversed(keys_desc_flags):
        k = key if perm is None else key[perm]
        step = torch.sort(k, descending=descending, stable=True).indices
        perm = step if perm is None else perm[step]
    return perm
