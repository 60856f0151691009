"""The packaged demo dataset: three short conversations in the LoCoMo schema."""

from __future__ import annotations

from importlib.resources import as_file, files

from .base import Sample
from .locomo import load_locomo


def load_demo() -> list[Sample]:
    """Load the demo conversations written for this project (original content)."""
    with as_file(files("magma_torch.eval") / "data" / "demo_locomo.json") as path:
        return load_locomo(path)
