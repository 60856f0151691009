"""The packaged demo dataset: three short conversations in the LoCoMo schema."""

from __future__ import annotations

from importlib.resources import as_file, files

from .base import Sample
from .locomo import load_locomo

DEMO_FILE = files("magma_torch.eval") / "data" / "demo_locomo.json"   # the raw LoCoMo-schema JSON


def load_demo() -> list[Sample]:
    """Load the demo conversations written for this project (original content)."""
    with as_file(DEMO_FILE) as path:
        return load_locomo(path)
