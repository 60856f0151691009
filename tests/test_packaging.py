"""What a wheel ships: pyproject lists its packages by hand (conf/ ships as magma_torch.conf). A
subpackage missing from the list is not a package to setuptools ("Package would be ignored"); it
ships as data files or not at all, by the state of the build folders: of two wheels built from the
same tree, the first lacked magma_torch.config and magma_torch.text, which the package imports."""
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_pyproject_lists_every_package_of_the_tree():
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    tree = {".".join(init.parent.relative_to(ROOT).parts)
            for top in ("magma_torch", "hydra_plugins") for init in (ROOT / top).rglob("__init__.py")}
    mapped = set(setuptools["package-dir"])
    assert set(setuptools["packages"]) - mapped == tree
    assert all((ROOT / folder).is_dir() for folder in setuptools["package-dir"].values())
