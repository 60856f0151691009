"""Every third-party package that magma_torch imports is declared in pyproject.toml (a dependency or an extra)."""
from __future__ import annotations

import ast
import importlib.metadata
import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Import names of optional packages that may not be installed here, by distribution.
NOT_INSTALLED = {"vllm": ["vllm"], "faiss": ["faiss-cpu"], "llama_cpp": ["llama-cpp-python"]}


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _declared() -> set[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    specs = project["dependencies"] + [s for extra in project["optional-dependencies"].values() for s in extra]
    return {_norm(re.match(r"[A-Za-z0-9_.-]+", s).group()) for s in specs} | {_norm(project["name"])}


def _imported() -> dict[str, set[str]]:
    """Top-level names of absolute imports in magma_torch/, with the files that import them."""
    out: dict[str, set[str]] = {}
    for path in (ROOT / "magma_torch").rglob("*.py"):
        if "conf" in path.relative_to(ROOT).parts:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module] if isinstance(node, ast.ImportFrom) and node.level == 0 else [])
            for name in names:
                out.setdefault(name.split(".")[0], set()).add(str(path.relative_to(ROOT)))
    return out


def test_every_third_party_import_is_declared():
    declared, dists = _declared(), importlib.metadata.packages_distributions()
    third_party = {m: files for m, files in _imported().items()
                   if m not in sys.stdlib_module_names and m != "magma_torch"}
    assert {"torch", "torch_geometric", "psutil"} <= set(third_party)      # the scan sees the imports
    missing = {}
    for module, files in sorted(third_party.items()):
        candidates = dists.get(module) or NOT_INSTALLED.get(module)
        assert candidates, f"{module} (imported by {sorted(files)}) is neither installed nor in NOT_INSTALLED"
        if not {_norm(c) for c in candidates} & declared:
            missing[module] = (candidates, sorted(files))
    assert not missing, f"imported but not declared in pyproject.toml: {missing}"
