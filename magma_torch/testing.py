"""Test helpers, and the one place where tests declare what they need (in the style of PyG's
``withPackage`` / ``withCUDA``).

Two kinds of need:
- what the project's own set-up provides (``make test``: the extras, chromium, a local Slurm,
  .venv-vllm): ``with_package``, ``with_browser``, ``with_file`` and, inside a test or fixture,
  ``unavailable``. Without it the test skips, saying what provides it; under
  ``MAGMA_REQUIRE_ALL=1``, which ``make test`` sets, it fails instead, because the set-up
  should have provided it;
- what no set-up can give this machine: ``with_cuda`` (a GPU), ``with_fbgemm`` (an x86 build of
  torch) and ``with_dataset`` (data that is not shipped). These always skip, and their reason says
  the skip is expected.

This module is also a pytest plugin (tests/conftest.py loads it): it turns the failing marks
into failures at set-up.
"""
import importlib.util
import os
import shutil
import sys
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

import pytest
import torch

REQUIRE_ALL = "MAGMA_REQUIRE_ALL"     # set to 1 by `make test`
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])

with_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (expected on a CPU-only machine)")


def with_fbgemm() -> pytest.MarkDecorator:
    """Needs FBGEMM's float16 GEMM (store/packed_half.py), which x86 builds of torch have."""
    from magma_torch.store import packed_half   # lazy: keeps this plugin's import light

    return pytest.mark.skipif(not packed_half.available(), reason="needs FBGEMM (expected on a non-x86 torch)")


def experiment_script(path: Path):
    """Import a script of a source checkout's ``experiments/`` as a module (registered in
    ``sys.modules``, which its dataclasses need)."""
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module
    spec.loader.exec_module(module)
    return module


def with_devices(fn):
    """Run the test once per available device, passed as the ``device`` argument."""
    return pytest.mark.parametrize("device", DEVICES)(fn)


def required() -> bool:
    """Whether a missing requirement of the project's set-up fails the test (``MAGMA_REQUIRE_ALL=1``)."""
    return os.environ.get(REQUIRE_ALL) == "1"


def _missing_reason(reason: str) -> str:
    return f"{reason} [{REQUIRE_ALL}=1: the set-up should have provided it]" if required() else reason


def unavailable(reason: str):
    """Inside a test or fixture: skip for a missing requirement of the set-up, or fail under
    ``MAGMA_REQUIRE_ALL=1``."""
    if required():
        pytest.fail(_missing_reason(reason), pytrace=False)
    pytest.skip(reason)


def needs(missing: bool, reason: str) -> pytest.MarkDecorator:
    """A mark for a requirement of the set-up: nothing when present; else skip, or fail under
    ``MAGMA_REQUIRE_ALL=1``."""
    if missing and required():
        return pytest.mark.magma_missing(_missing_reason(reason))
    return pytest.mark.skipif(missing, reason=reason)


def with_package(*modules: str, extra: str) -> pytest.MarkDecorator:
    """Needs importable ``modules``, which the project's ``extra`` (installed by ``make install``) provides."""
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    return needs(bool(missing), f"needs {', '.join(missing)}: the `{extra}` extra (make install adds it)")


def with_browser() -> pytest.MarkDecorator:
    """Needs headless chromium on PATH (``make browser``, run by ``make test``)."""
    from magma_torch.explain.screenshot import BROWSERS   # lazy: only explain's tests need it

    missing = not any(shutil.which(b) for b in BROWSERS)
    return needs(missing, "needs chromium on PATH (`make browser` installs Debian's chromium; make test runs it)")


def with_file(path: Path, made_by: str) -> pytest.MarkDecorator:
    """Needs ``path``, which the make target ``made_by`` creates."""
    return needs(not Path(path).exists(), f"{path} is absent: `{made_by}` creates it (make test runs it)")


def with_dataset(path: Path) -> pytest.MarkDecorator:
    """Needs a data file that is not shipped (licence): always a skip, never a failure."""
    return pytest.mark.skipif(not Path(path).exists(),
                              reason=f"{path} not found: the data is not shipped (expected without it)")


def pytest_configure(config):
    config.addinivalue_line("markers", "magma_missing(reason): fails the test: a requirement the set-up "
                                       "provides is missing under MAGMA_REQUIRE_ALL=1")
    share_cores_between_workers()


def share_cores_between_workers() -> None:
    """Under pytest-xdist, give each worker its share of the cores: torch's threads here, and
    OMP_NUM_THREADS for what it starts (torch in subprocesses, the llama.cpp server's threads).
    torch's OpenMP and ggml's threads spin at each barrier, so one more thread than cores stalls
    every thread of both (measured in README, "Tests"). An OMP_NUM_THREADS already set wins."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if workers <= 1:
        return
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, len(os.sched_getaffinity(0)) // workers)))
    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))


def pytest_collection_modifyitems(config, items):
    """Files holding a ``slow`` test first, each file's tests kept together and in order. Under
    ``-n`` with ``--no-loadscope-reorder`` (make test) the workers take files in this order, so
    the few long end-to-end files start at once instead of one of them running alone at the
    end while the other worker idles (longest-first scheduling)."""
    slow = {item.path for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.path not in slow)     # stable: the rest keep their order


def pytest_runtest_setup(item):
    for mark in item.iter_markers("magma_missing"):
        pytest.fail(mark.args[0], pytrace=False)


def assert_no_run(out) -> None:
    """A refused magma-run left nothing of a run in ``out``: at most what Hydra writes before the
    app starts, its log (there because out_dir is the run dir)."""
    from pathlib import Path

    out = Path(out)
    assert not out.exists() or {p.name for p in out.iterdir()} <= {"runner.log"}, sorted(out.iterdir())


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
    adds fsynced, and no consolidation after the batch in flight (queued events stay pending); its
    folder lock is released, so the same process can reopen the store."""
    mem.close(checkpoint=False, finish_queue=False)   # a killed process consolidates nothing more


def store_tensors(mem) -> dict:
    """Every tensor column of a memory's store: events, entities, episodes and each relation's edges."""
    ev, en, ep = mem.store.events, mem.store.entities, mem.store.episodes
    out = {f"graph.{k}": v for k, v in mem.store.graph.state().items()}
    columns = ("embeddings", "scan_embeddings", "chain_dots", "timestamps", "date_spans", "text_tokens", "prev", "next",
               "episode", "speaker")
    out.update({f"events.{c}": getattr(ev, c).data for c in columns})
    if ev.scan_packed:   # FBGEMM's blocks are opaque: compare the values they hold
        out["events.scan_embeddings"] = ev.scan_embeddings.data.unpacked()
    out.update({f"episodes.{c}": getattr(ep, c).data for c in ("sums", "first", "last", "size")})
    out["entities.embeddings"] = en.embeddings.data
    return out


def assert_same_store(a, b) -> None:
    """Two memories hold the same store, indexes, slow-path queue and statuses, and consolidator
    state (tensors bit for bit; their namespaces may differ)."""
    sa, sb = a.stats(), b.stats()
    assert {**sa, "namespace": None} == {**sb, "namespace": None}
    ta, tb = store_tensors(a), store_tensors(b)
    assert ta.keys() == tb.keys()
    for k in ta:
        assert ta[k].dtype == tb[k].dtype and torch.equal(ta[k].nan_to_num(-1.0), tb[k].nan_to_num(-1.0)), k
    ea, eb = a.store.events, b.store.events
    assert ea.rows == eb.rows and ea.by_source == eb.by_source and ea.by_content == eb.by_content
    assert ea.last_of_stream == eb.last_of_stream
    assert (ea.ids, ea.row_of, ea.next_id) == (eb.ids, eb.row_of, eb.next_id)
    assert ea.speaker_names == eb.speaker_names
    na, nb = a.store.entities, b.store.entities
    assert (na.names, na.kinds, na.surfaces, na.by_name) == (nb.names, nb.kinds, nb.surfaces, nb.by_name)
    assert (a.store.episodes.streams, a.store.episodes.last_of_stream) == (
        b.store.episodes.streams, b.store.episodes.last_of_stream)
    assert a.store.keyword_index._docs == b.store.keyword_index._docs
    assert a.store.episode_keywords._docs == b.store.episode_keywords._docs
    assert len(a.store.vector_index) == len(b.store.vector_index) == len(ea)
    assert list(a.worker.queue) == list(b.worker.queue) and a.worker.status == b.worker.status
    assert a.consolidator.state_dict() == b.consolidator.state_dict()


def assert_same_retrieval(a, b) -> None:
    """Every seventh demo question (every category and intent) retrieves the same from both:
    intent, window, nodes and scores, paths, anchors and context."""
    from magma_torch.eval.datasets import load_demo   # lazy: the tensor tests do without the datasets

    qs = [q for s in load_demo() for q in s.questions][::7]
    texts, times = [q.question for q in qs], [q.query_time for q in qs]
    results = list(zip(a.retrieve_batch(texts, times), b.retrieve_batch(texts, times), strict=True))
    assert {ra.intent for ra, _ in results} == {"WHY", "WHEN", "ENTITY"}
    for ra, rb in results:
        assert ra.intent == rb.intent and ra.time_window == rb.time_window
        assert ra.nodes == rb.nodes and ra.paths == rb.paths and ra.anchors == rb.anchors
        assert (ra.context, ra.context_tokens, ra.context_ids, ra.truncated) == (
            rb.context, rb.context_tokens, rb.context_ids, rb.truncated)
        assert ra.nodes
