"""pyproject.toml declares what the tree needs and holds: every third-party package that magma_torch
imports (a dependency or an extra), and every package folder a wheel must ship.

The packages are listed by hand (conf/ ships as magma_torch.conf). A subpackage missing from the
list is not a package to setuptools ("Package would be ignored"); it ships as data files or not at
all, by the state of the build folders: of two wheels built from the same tree, the first lacked
magma_torch.config and magma_torch.text, which the package imports."""
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


def _pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def _declared() -> set[str]:
    project = _pyproject()["project"]
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


def test_pyproject_lists_every_package_of_the_tree():
    setuptools = _pyproject()["tool"]["setuptools"]
    tree = {".".join(init.parent.relative_to(ROOT).parts)
            for top in ("magma_torch", "hydra_plugins") for init in (ROOT / top).rglob("__init__.py")}
    mapped = set(setuptools["package-dir"])
    assert set(setuptools["packages"]) - mapped == tree
    assert all((ROOT / folder).is_dir() for folder in setuptools["package-dir"].values())
