"""The layers import one way (store < text < ingest, query < memory < eval): each import runs in a
fresh interpreter, and the test names the magma_torch modules it loaded that its layer must not."""
import json
import subprocess
import sys

import pytest

# Runs an import statement, or imports every module of a subpackage; then prints the magma_torch
# modules now loaded.
PROBE = """
import importlib, json, pkgutil, sys
name = sys.argv[1]
if name.startswith(("from ", "import ")):
    exec(name)
else:
    pkg = importlib.import_module(name)
    for info in pkgutil.walk_packages(getattr(pkg, "__path__", []), name + "."):
        importlib.import_module(info.name)
print(json.dumps(sorted(m for m in sys.modules if m == "magma_torch" or m.startswith("magma_torch."))))
"""

INGEST, QUERY, EVAL = "magma_torch.ingest", "magma_torch.query", "magma_torch.eval"
MEMORY = "magma_torch.memory"

LAYERS = [
    ("magma_torch.store", [INGEST, QUERY, EVAL, MEMORY, "magma_torch.lifecycle", "magma_torch.text"]),
    ("magma_torch.text", [INGEST, QUERY, EVAL, MEMORY, "magma_torch.store"]),
    ("magma_torch.query", [INGEST, EVAL, MEMORY]),
    ("magma_torch.ingest", [QUERY, EVAL, MEMORY]),
    ("magma_torch.llm", [INGEST, QUERY, EVAL, MEMORY, "magma_torch.store"]),
    ("import magma_torch", [EVAL, MEMORY, INGEST, QUERY, "magma_torch.store"]),
    ("from magma_torch import MagmaMemory", [EVAL]),
    ("from magma_torch import MagmaError, IngestError, CorruptSaveError, StoreInUseError", [EVAL, QUERY]),
]


def loaded_by(target: str) -> list[str]:
    out = subprocess.run([sys.executable, "-c", PROBE, target], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("target, forbidden", LAYERS, ids=[t for t, _ in LAYERS])
def test_an_import_loads_no_module_of_a_higher_layer(target, forbidden):
    loaded = loaded_by(target)
    assert target.startswith(("from ", "import ")) or target in loaded   # the probe did import it
    wrong = [m for m in loaded if any(m == f or m.startswith(f + ".") for f in forbidden)]
    assert not wrong, f"{target} loads {wrong}"


def test_the_probe_sees_a_module_of_a_higher_layer():
    # lifecycle sits above ingest: were it in a layer below, the test above would name it.
    loaded = loaded_by("magma_torch.lifecycle")
    assert "magma_torch.ingest.fast_path" in loaded and "magma_torch.eval" not in loaded
