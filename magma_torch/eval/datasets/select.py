"""Which samples of a dataset one run evaluates: all, the first N, named ones, or one shard.

Shards let a Slurm array run one conversation (or a slice of LongMemEval questions) per task;
`magma-aggregate` merges the shard run folders back into one. Selection is lazy, so a streamed
dataset stays streamed.
"""
from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Sequence
from itertools import islice

from .base import DatasetError, Sample

_SHARD = re.compile(r"^\s*(\d+)\s*/\s*(\d+)\s*$")


def parse_shard(shard: str) -> tuple[int, int]:
    """"i/n" (0 <= i < n) -> (i, n)."""
    m = _SHARD.match(str(shard))
    if not m or not 0 <= int(m[1]) < int(m[2]):
        raise DatasetError(f"dataset.shard={shard!r}: expected 'i/n' with 0 <= i < n, e.g. dataset.shard=0/4")
    return int(m[1]), int(m[2])


def check_limit(limit) -> None:
    """``dataset.limit``: None (everything) or a positive count; 0 would make an empty run look finished."""
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise DatasetError(f"dataset.limit={limit!r}: expected a positive number of samples, or null for all of them")


def select_samples(samples: Iterable[Sample], limit: int | None = None, sample_ids: Sequence[str] | None = None,
                   shard: str | None = None) -> Iterator[Sample]:
    """``limit`` first, then ``sample_ids`` (in dataset order), then shard i of n: every n-th
    selected sample starting at i, so shards are disjoint, cover everything and differ in size by
    at most 1. A bad shard fails here; a named sample the data lacks, when the samples run out."""
    check_limit(limit)
    i, n = parse_shard(shard) if shard is not None else (0, 1)
    return _select(islice(samples, limit), None if sample_ids is None else list(sample_ids), i, n)


def _select(samples: Iterable[Sample], wanted: list[str] | None, i: int, n: int) -> Iterator[Sample]:
    found, first_ids, k = set(), [], 0
    for s in samples:
        if len(first_ids) < 5:
            first_ids.append(s.sample_id)
        if wanted is not None:
            if s.sample_id not in wanted:
                continue
            found.add(s.sample_id)
        if k % n == i:
            yield s
        k += 1
    missing = [w for w in wanted or () if w not in found]
    if missing:
        raise DatasetError(f"dataset.sample_ids: no sample {missing[0]!r} in the dataset "
                           f"(first ids: {', '.join(first_ids)})")
