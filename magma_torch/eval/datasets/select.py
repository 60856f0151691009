"""Which samples of a dataset one run evaluates: all, the first N, named ones, or one shard.

Shards let a Slurm array run one conversation (or a slice of LongMemEval questions) per task;
`magma-aggregate` merges the shard run folders back into one.
"""
from __future__ import annotations

import re
from collections.abc import Sequence

from .base import DatasetError, Sample

_SHARD = re.compile(r"^\s*(\d+)\s*/\s*(\d+)\s*$")


def parse_shard(shard: str) -> tuple[int, int]:
    """"i/n" (0 <= i < n) -> (i, n)."""
    m = _SHARD.match(str(shard))
    if not m or not 0 <= int(m[1]) < int(m[2]):
        raise DatasetError(f"dataset.shard={shard!r}: expected 'i/n' with 0 <= i < n, e.g. dataset.shard=0/4")
    return int(m[1]), int(m[2])


def select_samples(samples: Sequence[Sample], limit: int | None = None, sample_ids: Sequence[str] | None = None,
                   shard: str | None = None) -> list[Sample]:
    """``limit`` first, then ``sample_ids`` (in dataset order), then shard i of n: every n-th
    sample starting at i, so shards are disjoint, cover everything and differ in size by at most 1."""
    out = list(samples)[:limit]
    if sample_ids is not None:
        known = {s.sample_id for s in out}
        missing = [i for i in sample_ids if i not in known]
        if missing:
            raise DatasetError(f"dataset.sample_ids: no sample {missing[0]!r} in the dataset "
                               f"(first ids: {', '.join(list(known)[:5])})")
        wanted = set(sample_ids)
        out = [s for s in out if s.sample_id in wanted]
    if shard is not None:
        i, n = parse_shard(shard)
        out = out[i::n]
    return out
