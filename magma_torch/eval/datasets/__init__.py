"""Evaluation datasets, all loaded into the records of ``base``."""

from __future__ import annotations

from collections.abc import Iterable

from .base import DatasetError, Question, Sample, Turn
from .demo import load_demo
from .locomo import load_locomo
from .longmemeval import QUESTION_TYPES, load_longmemeval
from .select import check_limit, check_sample_ids, parse_shard, select_samples, selection_size

__all__ = ["Turn", "Question", "Sample", "DatasetError", "load_locomo", "load_demo", "load_longmemeval",
           "load_dataset", "dataset_categories", "has_session_evidence", "select_samples", "check_limit",
           "check_sample_ids", "parse_shard", "selection_size"]

LONGMEMEVAL = ("longmemeval_s", "longmemeval_m", "longmemeval_oracle")
DATASETS = ("locomo", "demo", *LONGMEMEVAL)
# LoCoMo (and the demo, in its schema): the order of the paper's tables
_LOCOMO_ORDER = ("single-hop", "multi-hop", "temporal", "open-domain", "adversarial")


def load_dataset(name: str, path: str | None = None) -> Iterable[Sample]:
    """Load a dataset by name: "locomo" and the LongMemEval splits need ``path`` (LongMemEval
    is streamed: its samples are produced one at a time); "demo" ignores it."""
    if name == "demo":
        return load_demo()
    if name not in DATASETS:
        raise DatasetError(f"unknown dataset {name!r}; known: {', '.join(DATASETS)}")
    if not path:
        raise DatasetError(f"dataset {name!r} needs a file: set dataset.path to its JSON file")
    return load_locomo(path) if name == "locomo" else load_longmemeval(path)


def dataset_categories(name: str) -> tuple[str, ...]:
    """The categories a dataset's questions fall in (the keys of metrics.json ``by_category``)."""
    if name in LONGMEMEVAL:
        return QUESTION_TYPES
    return _LOCOMO_ORDER


def has_session_evidence(name: str) -> bool:
    """Whether a dataset's questions name the sessions that hold their answers (LongMemEval's do),
    so that its runs have session-level recall columns."""
    return name in LONGMEMEVAL
