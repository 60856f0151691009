"""code_commit: the commit a figure was measured on, dirty only when the code or configs changed."""
import shutil
import subprocess

import pytest

from magma_torch.provenance import code_commit
from magma_torch.testing import needs

pytestmark = needs(shutil.which("git") is None, "needs git on PATH")


def _git(root, *args):
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=root, check=True,
                          capture_output=True, text=True).stdout.strip()


@pytest.fixture
def checkout(tmp_path):
    for name in ("magma_torch/core.py", "conf/memory/magma.yaml", "experiments/script.py"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("x = 1\n")
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "add", ".")
    _git(tmp_path, "commit", "-qm", "first")
    return tmp_path


def test_a_clean_checkout_gives_its_short_hash(checkout):
    assert code_commit(checkout) == _git(checkout, "rev-parse", "--short", "HEAD")


@pytest.mark.parametrize("edited", ["magma_torch/core.py", "conf/memory/magma.yaml"])
def test_an_edit_to_the_code_or_configs_marks_it_dirty(checkout, edited):
    (checkout / edited).write_text("x = 2\n")
    assert code_commit(checkout) == _git(checkout, "rev-parse", "--short", "HEAD") + "+dirty"


def test_scripts_and_new_files_do_not_count(checkout):
    (checkout / "experiments/script.py").write_text("x = 2\n")
    (checkout / "magma_torch/new.py").write_text("y = 1\n")     # untracked
    assert code_commit(checkout) == _git(checkout, "rev-parse", "--short", "HEAD")


def test_a_folder_inside_a_checkout_is_not_the_checkout(checkout):
    """An installed package inside another project's checkout (a venv in a repository) has no commit
    of its own: the surrounding repository's would be a wrong attribution."""
    assert code_commit(checkout / "magma_torch") is None


def test_no_checkout_gives_none(tmp_path):
    assert code_commit(tmp_path) is None
