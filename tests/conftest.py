"""The suite's hooks: a missing set-up requirement fails its test under MAGMA_REQUIRE_ALL=1
(magma_torch/testing.py, which is also usable as a plugin: ``pytest -p magma_torch.testing``)."""
from magma_torch.testing import pytest_configure, pytest_runtest_setup

__all__ = ["pytest_configure", "pytest_runtest_setup"]   # pytest finds its hooks here
