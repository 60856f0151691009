"""Test decorators in the style of PyG's ``withCUDA``: GPU cases skip cleanly without CUDA."""
from graphlib import CycleError, TopologicalSorter

import pytest
import torch

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])

onlyCUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


def withDevices(fn):
    """Run the test once per available device, passed as the ``device`` argument."""
    return pytest.mark.parametrize("device", DEVICES)(fn)


def is_acyclic(edges) -> bool:
    """Whether directed (src, dst, ...) edges form a DAG."""
    ts = TopologicalSorter()
    for src, dst, *_ in edges:
        ts.add(dst, src)
    try:
        ts.prepare()
    except CycleError:
        return False
    return True


def abandon(mem) -> None:
    """Drop a ``MagmaMemory`` the way kill -9 would: no checkpoint, no flush beyond what its
    adds fsynced; its folder lock is released, so the same process can reopen the store."""
    mem.close(checkpoint=False)
