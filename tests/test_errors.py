"""Every public error is a MagmaError and keeps its builtin base, so a caller may catch either."""
import pytest

import magma_torch
from magma_torch import MagmaError, MagmaMemory

BUILTIN_BASE = {
    "IngestError": ValueError, "QueryError": ValueError, "AnswerError": RuntimeError, "UnknownEventError": KeyError,
    "IntegrityError": RuntimeError, "MissingNLPModel": ImportError, "CorruptSaveError": ValueError,
    "NamespaceError": ValueError, "UnknownNamespaceError": FileNotFoundError,
    "NamespaceNotEmptyError": FileExistsError, "StoreInUseError": RuntimeError, "StoreMismatchError": ValueError,
    "ReadOnlyError": RuntimeError, "NoStoreDirError": ValueError, "LLMUnavailable": RuntimeError, "LLMInterfaceError": RuntimeError,
    "UnknownPromptError": ValueError,
    "OutputError": ValueError, "ModelError": RuntimeError, "ExplainError": ValueError, "ScreenshotError": RuntimeError,
    "DatasetError": ValueError, "ConfigError": ValueError, "CompareError": ValueError, "RunFolderError": ValueError,
    "AggregateError": ValueError, "OverrideError": ValueError, "TrackerError": RuntimeError,
    "ForgetError": ValueError,
}


def test_magma_torch_exports_every_public_error():
    exported = {n for n in magma_torch.__all__ if n not in ("MagmaError", "MagmaMemory", "StoredEvent")}
    assert exported == set(BUILTIN_BASE)


@pytest.mark.parametrize("name", sorted(BUILTIN_BASE))
def test_each_public_error_is_a_magma_error_and_keeps_its_builtin_base(name):
    cls = getattr(magma_torch, name)
    assert issubclass(cls, MagmaError) and issubclass(cls, BUILTIN_BASE[name])


def test_internal_control_flow_exceptions_are_not_public_errors():
    from magma_torch.eval.runner import Terminated
    from magma_torch.llm.openai_backend import _Unreachable

    assert not issubclass(Terminated, MagmaError) and not issubclass(_Unreachable, MagmaError)


def test_the_facades_bad_input_raises_its_specific_error(tmp_path):
    # each refused before any part is built or any file written
    with pytest.raises(magma_torch.NoStoreDirError, match="durable=True needs a store_dir"):
        MagmaMemory(durable=True)
    with pytest.raises(magma_torch.NamespaceError, match=r"namespace '\.\./x'"):
        MagmaMemory(store_dir=tmp_path, namespace="../x")
    with pytest.raises(magma_torch.UnknownNamespaceError, match="no such store_dir"):
        MagmaMemory.namespaces(tmp_path / "missing")
    with pytest.raises(magma_torch.UnknownNamespaceError, match="no namespace 'bob'"):
        MagmaMemory.forget_namespace(tmp_path, "bob")
    assert list(tmp_path.iterdir()) == []


def test_forget_update_and_open_readonly_refusals_are_magma_errors(tmp_path):
    # README's `except MagmaError` is to catch these too: each refusal of the Python API names what to fix
    from magma_torch.text.embedder import Embedder

    mem = MagmaMemory(consolidation="none", embedder=Embedder(device="cpu"), device="cpu")
    first = mem.add("Dana went hiking.", "2023-06-05 10:00", speaker="Dana")
    for bad, named in (({}, "needs ids"), ({"speaker": "Bob"}, "'Bob'"), ({"entity": "violin"}, "'violin'"),
                       ({"entity": 3}, "entity must be a name"), ({"before": "not a date"}, "before: cannot parse")):
        with pytest.raises(magma_torch.ForgetError, match=named) as err:
            mem.forget(**bad)
        assert isinstance(err.value, ValueError) and "\n" not in str(err.value)
    with pytest.raises(magma_torch.IngestError, match=f"event {first}: update\\(\\) needs a new text or timestamp"):
        mem.update(first)
    assert [e.text for e in mem.events()] == ["Dana went hiking."]
    with pytest.raises(magma_torch.UnknownNamespaceError, match="no namespace 'nobody'") as err:
        MagmaMemory.open_readonly(tmp_path, "nobody")   # the memory is named, as forget_namespace names it
    assert isinstance(err.value, FileNotFoundError)
