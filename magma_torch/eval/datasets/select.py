"""Which samples of a dataset one run evaluates: all, the first N, named ones, or one shard.

Shards let a Slurm array run one conversation (or a slice of LongMemEval questions) per task;
`magma-aggregate` merges the shard run folders back into one. Selection is lazy, so a streamed
dataset stays streamed; named samples are checked up front (a streamed file scans its ids).
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


def check_sample_ids(sample_ids) -> None:
    """``dataset.sample_ids``: None (every sample) or a non-empty list of sample ids; a bare string would
    be taken for the list of its characters, and an empty list would make an empty run look finished."""
    if sample_ids is not None and (isinstance(sample_ids, str) or not isinstance(sample_ids, Sequence)
                                   or not sample_ids or not all(isinstance(s, str) for s in sample_ids)):
        raise DatasetError(f"dataset.sample_ids={sample_ids!r}: expected a list of sample ids (strings), "
                           "e.g. dataset.sample_ids=[conv-26]")


def select_samples(samples: Sequence[Sample] | Iterable[Sample], limit: int | None = None,
                   sample_ids: Sequence[str] | None = None, shard: str | None = None) -> Iterator[Sample]:
    """``limit`` first, then ``sample_ids`` (in dataset order), then shard i of n: every n-th
    selected sample starting at i, so shards are disjoint, cover everything and differ in size by
    at most 1. Bad settings and a named sample that the first ``limit`` lack fail here, before
    any sample is handed out; with ``sample_ids``, ``samples`` is a list or has a ``sample_ids()``
    scan (a streamed LongMemEval file)."""
    check_limit(limit)
    check_sample_ids(sample_ids)
    i, n = parse_shard(shard) if shard is not None else (0, 1)
    limited = islice(samples, limit)
    if sample_ids is not None:
        wanted = set(sample_ids)
        _check_present([s.sample_id for s in samples] if isinstance(samples, Sequence) else list(samples.sample_ids()),
                       limit, sample_ids)
        limited = (s for s in limited if s.sample_id in wanted)
    return islice(limited, i, None, n)


def selection_size(available: int | None, limit: int | None = None, sample_ids: Sequence[str] | None = None,
                   shard: str | None = None) -> int | None:
    """How many samples ``select_samples`` hands out of a dataset of ``available`` samples (None:
    streamed, count unknown), for a progress bar's total; None when it cannot be known without
    reading the dataset. Call it after ``select_samples`` has checked the settings."""
    if sample_ids is not None:
        size = len(set(sample_ids))   # each is present within the limit (select_samples checks)
    elif available is None:
        size = limit
    else:
        size = min(available, limit or available)
    if size is None:
        return None
    i, n = parse_shard(shard) if shard is not None else (0, 1)
    return len(range(i, size, n))


def _check_present(ids: list[str], limit: int | None, wanted: Sequence[str]) -> None:
    missing = [w for w in wanted if w not in ids[:limit]]
    if not missing:
        return
    if missing[0] in ids:
        raise DatasetError(f"dataset.sample_ids: sample {missing[0]!r} is beyond dataset.limit={limit} "
                           f"(it is sample {ids.index(missing[0]) + 1} of {len(ids)})")
    raise DatasetError(f"dataset.sample_ids: no sample {missing[0]!r} in the dataset (first ids: {', '.join(ids[:5])})")
