"""Test decorators in the style of PyG's ``withCUDA``: GPU cases skip cleanly without CUDA."""
import pytest
import torch

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])

onlyCUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


def withDevices(fn):
    """Run the test once per available device, passed as the ``device`` argument."""
    return pytest.mark.parametrize("device", DEVICES)(fn)
