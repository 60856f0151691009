"""magma_torch.testing's requirement decorators: a missing requirement of the project's set-up
skips under plain pytest and fails under MAGMA_REQUIRE_ALL=1 (make test); CUDA and unshipped data
only ever skip."""
import os
import re
import subprocess
import sys

import pytest

CASES = '''
from magma_torch.testing import unavailable, with_cuda, with_dataset, with_file, with_package

@with_package("no_such_module_xyz", extra="dev")
def test_package():
    pass

@with_file("/no/such/file", "make nothing")
def test_file():
    pass

def test_service():
    unavailable("no such service here")

@with_package("json", extra="dev")
def test_package_present():
    pass

@with_dataset("/no/such/data.json")
def test_dataset():
    pass

@with_cuda
def test_cuda():
    pass
'''


def pytest_in(folder, env_value: str | None, *args: str, unset: tuple[str, ...] = ()) -> str:
    """Run pytest (with ``args``) on ``folder`` with MAGMA_REQUIRE_ALL set to ``env_value``
    (None: unset) and the variables ``unset`` removed; its output."""
    env = {k: v for k, v in os.environ.items() if k not in ("MAGMA_REQUIRE_ALL", *unset)}
    if env_value is not None:
        env["MAGMA_REQUIRE_ALL"] = env_value
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "magma_torch.testing", "-v", "-rA", "-p",
                           "no:cacheprovider", *args, "."], cwd=folder, env=env, capture_output=True, text=True,
                          timeout=300).stdout


def outcomes(tmp_path, require: bool) -> dict[str, str]:
    (tmp_path / "test_cases.py").write_text(CASES)
    out = pytest_in(tmp_path, "1" if require else None)
    return {line.split("::test_")[1].split()[0]: line.split()[1] for line in out.splitlines()
            if line.startswith("test_cases.py::test_")}


def test_a_missing_set_up_requirement_skips_under_pytest_and_fails_under_make_test(tmp_path):
    cuda = "PASSED" if torch_cuda() else "SKIPPED"
    assert outcomes(tmp_path, require=False) == {"package": "SKIPPED", "file": "SKIPPED", "service": "SKIPPED",
                                                 "package_present": "PASSED", "dataset": "SKIPPED", "cuda": cuda}
    # a mark fails at set-up (ERROR, before any fixture is built), unavailable() inside the test (FAILED)
    assert outcomes(tmp_path, require=True) == {"package": "ERROR", "file": "ERROR", "service": "FAILED",
                                                "package_present": "PASSED", "dataset": "SKIPPED", "cuda": cuda}


def torch_cuda() -> bool:
    import torch

    return torch.cuda.is_available()


@pytest.mark.parametrize("require", [False, True])
def test_reasons_say_what_provides_the_requirement(tmp_path, require):
    (tmp_path / "test_one.py").write_text(
        "from magma_torch.testing import with_package\n"
        "@with_package('no_such_module_xyz', extra='tune')\ndef test_it():\n    pass\n")
    out = pytest_in(tmp_path, "1" if require else "0")
    assert "needs no_such_module_xyz: the `tune` extra (make install adds it)" in out
    assert ("MAGMA_REQUIRE_ALL=1: the set-up should have provided it" in out) == require


def test_xdist_workers_share_the_cores(tmp_path):
    """Each of two workers gets half the cores (at least one) for torch and for what it starts."""
    (tmp_path / "test_threads.py").write_text(
        "import os, torch\n"
        "def test_it():\n"
        "    want = max(1, len(os.sched_getaffinity(0)) // 2)\n"
        "    assert os.environ['OMP_NUM_THREADS'] == str(want) and torch.get_num_threads() == want\n")
    out = pytest_in(tmp_path, None, "-n", "2", unset=("OMP_NUM_THREADS",))
    assert re.search(r"=+ 1 passed in [\d.]+s", out), out[-2000:]   # nothing failed, errored or skipped


def test_files_with_slow_tests_run_first_each_file_whole(tmp_path):
    (tmp_path / "test_a.py").write_text("def test_a1():\n    pass\ndef test_a2():\n    pass\n")
    (tmp_path / "test_b.py").write_text("import pytest\ndef test_b1():\n    pass\n"
                                        "@pytest.mark.slow\ndef test_b2():\n    pass\n")
    out = pytest_in(tmp_path, None)
    ran = re.findall(r"^(test_\w+\.py::test_\w+) PASSED", out, re.MULTILINE)
    assert ran == ["test_b.py::test_b1", "test_b.py::test_b2", "test_a.py::test_a1", "test_a.py::test_a2"], out
