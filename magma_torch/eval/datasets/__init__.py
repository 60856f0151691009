"""Evaluation datasets, all loaded into the records of ``base``."""

from __future__ import annotations

from .base import DatasetError, Question, Sample, Turn
from .demo import load_demo
from .locomo import load_locomo
from .select import select_samples

__all__ = ["Turn", "Question", "Sample", "DatasetError", "load_locomo", "load_demo", "load_dataset", "select_samples"]

DATASETS = ("locomo", "demo")


def load_dataset(name: str, path: str | None = None) -> list[Sample]:
    """Load a dataset by name: "locomo" needs ``path``; "demo" ignores it."""
    if name == "locomo":
        if not path:
            raise DatasetError("dataset 'locomo' needs a file: set dataset.path to the LoCoMo JSON file")
        return load_locomo(path)
    if name == "demo":
        return load_demo()
    raise DatasetError(f"unknown dataset {name!r}; known: {', '.join(DATASETS)}")
