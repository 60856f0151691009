"""Every public error is a MagmaError and keeps its builtin base, so a caller may catch either."""
import functools
import json
import re
import sys
from types import SimpleNamespace

import pytest

import magma_torch
from magma_torch import MagmaError, MagmaMemory
from magma_torch.text.embedder import Embedder


@pytest.fixture(scope="module")
def emb():
    return Embedder(device="cpu")

BUILTIN_BASE = {
    "IngestError": ValueError, "QueryError": ValueError, "AnswerError": RuntimeError, "MemoryClosedError": RuntimeError,
    "UnknownEventError": KeyError,
    "IntegrityError": RuntimeError, "MissingNLPModel": ImportError, "CorruptSaveError": ValueError,
    "NamespaceError": ValueError, "UnknownNamespaceError": FileNotFoundError,
    "NamespaceNotEmptyError": FileExistsError, "StoreInUseError": RuntimeError, "StoreMismatchError": ValueError,
    "ReadOnlyError": RuntimeError, "NoStoreDirError": ValueError, "LLMUnavailable": RuntimeError,
    "LLMInterfaceError": RuntimeError, "UnknownPromptError": ValueError,
    "OutputError": ValueError, "ModelError": RuntimeError, "ExplainError": ValueError, "ScreenshotError": RuntimeError,
    "DatasetError": ValueError, "ConfigError": ValueError, "CompareError": ValueError, "RunFolderError": ValueError,
    "AggregateError": ValueError, "OverrideError": ValueError, "TrackerError": RuntimeError,
    "ForgetError": ValueError, "SaveNotFoundError": FileNotFoundError, "SaveWouldOverwriteError": FileExistsError,
    "LiveReadTimeoutError": TimeoutError, "UnknownDateStyleError": ValueError, "GGUFNotFoundError": FileNotFoundError,
    "CacheModelError": ValueError,
    "DamagedFileError": ValueError, "MissingDependencyError": ImportError,
    "StoreDirNotAFolderError": NotADirectoryError,
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


def test_forget_update_and_open_readonly_refusals_are_magma_errors(emb, tmp_path):
    # README's `except MagmaError` is to catch these too: each refusal of the Python API names what to fix
    mem = MagmaMemory(consolidation="none", embedder=emb, device="cpu")
    first = mem.add("Dana went hiking.", "2023-06-05 10:00", speaker="Dana")
    for bad, named in (({}, "needs ids"), ({"speaker": "Bob"}, "'Bob'"), ({"entity": "violin"}, "'violin'"),
                       ({"entity": 3}, "entity must be a name"), ({"before": "not a date"}, "before: cannot parse"),
                       ({"speaker": ["Dana"]}, "speaker must be a name")):
        with pytest.raises(magma_torch.ForgetError, match=named) as err:
            mem.forget(**bad)
        assert isinstance(err.value, ValueError) and "\n" not in str(err.value)
    with pytest.raises(magma_torch.IngestError, match=f"event {first}: update\\(\\) needs a new text or timestamp"):
        mem.update(first)
    assert [e.text for e in mem.events()] == ["Dana went hiking."]
    with pytest.raises(magma_torch.UnknownNamespaceError, match="no namespace 'nobody'") as err:
        MagmaMemory.open_readonly(tmp_path, "nobody")   # the memory is named, as forget_namespace names it
    assert isinstance(err.value, FileNotFoundError)



def refused(err: Exception, error: str, builtin: type) -> None:
    """A refusal that is both the MagmaError ``error`` and ``builtin`` (an ``except FileNotFoundError``
    caller keeps working), in one line."""
    assert isinstance(err, MagmaError) and isinstance(err, builtin) and type(err) is getattr(magma_torch, error)
    assert "\n" not in str(err)


def test_load_of_a_missing_folder_is_a_magma_error_and_a_file_not_found_error(tmp_path):
    missing = tmp_path / "missing-folder"
    with pytest.raises(FileNotFoundError, match=f"^{re.escape(str(missing))}: no such save folder$") as err:
        MagmaMemory.load(missing)
    refused(err.value, "SaveNotFoundError", FileNotFoundError)
    export = tmp_path / "memory.jsonl"   # an export handed to load() instead of import_jsonl
    export.write_text("{}\n")
    with pytest.raises(FileNotFoundError, match=f"^{re.escape(str(export))}: a file, not a save folder$"):
        MagmaMemory.load(export)


def test_save_over_a_folder_that_is_not_a_save_is_a_magma_error_and_a_file_exists_error(emb, tmp_path):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    with MagmaMemory(consolidation="none", embedder=emb, device="cpu") as mem:
        with pytest.raises(FileExistsError, match=f"^{re.escape(str(mine))}: exists and is not a save folder") as err:
            mem.save(mine)
    refused(err.value, "SaveWouldOverwriteError", FileExistsError)
    assert [p.name for p in tmp_path.iterdir()] == ["mine"] and (mine / "notes.txt").read_text() == "keep me"


def test_save_below_a_file_is_a_magma_error_naming_the_file(emb, tmp_path):
    # before: path.parent.mkdir's raw FileExistsError (the parent a file) or NotADirectoryError (one further up)
    (tmp_path / "afile").write_text("keep me")
    with MagmaMemory(consolidation="none", embedder=emb, device="cpu") as mem:
        for target in (tmp_path / "afile" / "save", tmp_path / "afile" / "sub" / "save"):
            with pytest.raises(FileExistsError, match=f"^{re.escape(str(target))}: {re.escape(str(tmp_path))}/afile "
                                                      "is a file, not a folder; cannot save below it$") as err:
                mem.save(target)
            refused(err.value, "SaveWouldOverwriteError", FileExistsError)
    assert [p.name for p in tmp_path.iterdir()] == ["afile"] and (tmp_path / "afile").read_text() == "keep me"


def test_an_export_to_a_folder_or_below_a_file_and_an_import_of_no_file_are_magma_errors(emb, tmp_path):
    # before: IsADirectoryError, NotADirectoryError and FileNotFoundError from open
    (tmp_path / "afile").write_text("keep me")
    (tmp_path / "folder").mkdir()
    with MagmaMemory(consolidation="none", embedder=emb, device="cpu") as mem:
        for target, why in ((tmp_path / "folder", "a folder; an export is one file"),
                            (tmp_path / "afile" / "x.jsonl", f"{tmp_path}/afile is a file, not a folder; cannot "
                                                             "export below it")):
            with pytest.raises(FileExistsError, match=f"^{re.escape(str(target))}: {re.escape(why)}$") as err:
                mem.export_jsonl(target)
            refused(err.value, "SaveWouldOverwriteError", FileExistsError)
        mem.export_jsonl(tmp_path / "new" / "x.jsonl")                       # a missing folder is made
    for source, why in ((tmp_path / "folder", "a folder, not an export file"),
                        (tmp_path / "missing.jsonl", "no such export file")):
        with pytest.raises(FileNotFoundError, match=f"^{re.escape(str(source))}: {why}$") as err:
            MagmaMemory.import_jsonl(source, embedder=emb)
        refused(err.value, "SaveNotFoundError", FileNotFoundError)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile", "folder", "new"]
    assert (tmp_path / "afile").read_text() == "keep me" and list((tmp_path / "folder").iterdir()) == []


def test_a_live_read_of_a_folder_without_a_checkpoint_is_a_magma_error_and_a_file_not_found_error(tmp_path):
    from magma_torch.store import live_read

    folder = tmp_path / "not-a-memory"
    with pytest.raises(FileNotFoundError, match=f"^{re.escape(str(folder))}: no checkpoint/ "
                                                r"\(not the folder of a persistent memory\)$") as err:
        live_read.read_checkpoint_and_log(folder / "checkpoint", folder / "wal.jsonl")
    refused(err.value, "SaveNotFoundError", FileNotFoundError)
    with pytest.raises(magma_torch.UnknownNamespaceError, match="no namespace 'not-a-memory'"):
        MagmaMemory.open_readonly(tmp_path, "not-a-memory")      # open_readonly names the namespace, as before


def test_open_readonly_while_every_read_meets_a_new_checkpoint_is_a_magma_error_and_a_timeout_error(
        tmp_path, monkeypatch):
    from magma_torch.store import live_read

    manifests = iter(range(1000))     # the writer checkpoints during every read: the manifest never holds still
    monkeypatch.setattr(live_read, "_manifest", lambda checkpoint: str(next(manifests)).encode())
    monkeypatch.setattr(live_read, "FIRST_WAIT_S", 0.0)
    busy = tmp_path / "busy"
    with pytest.raises(TimeoutError, match=f"^{re.escape(str(busy))}: its writer put a new checkpoint in place "
                                           f"during each of {live_read.ATTEMPTS} reads; try again$") as err:
        MagmaMemory.open_readonly(tmp_path, "busy")
    refused(err.value, "LiveReadTimeoutError", TimeoutError)


def test_answer_with_an_unknown_date_style_is_a_magma_error_and_a_value_error(emb):
    class Never:
        def generate(self, prompts, **kw):
            raise AssertionError("the reader ran")
    with MagmaMemory(consolidation="none", embedder=emb, device="cpu") as mem:
        mem.add("Dana went hiking.", "2023-06-05 10:00", speaker="Dana")
        with pytest.raises(ValueError, match=r"^unknown answer date style 'bad' \(dates, task\.answer_dates; "
                                             r"known: words, as_written\)$") as err:
            mem.answer("Where did Dana go?", Never(), dates="bad")
    refused(err.value, "UnknownDateStyleError", ValueError)


def test_a_gguf_export_of_a_missing_file_is_a_magma_error_and_a_file_not_found_error(tmp_path, capsys):
    from magma_torch.llm import gguf_export

    missing = tmp_path / "missing.gguf"
    with pytest.raises(FileNotFoundError, match=f"^gguf_export: no GGUF file at {re.escape(str(missing))}$") as err:
        gguf_export.export_gguf(tmp_path / "out", missing)
    refused(err.value, "GGUFNotFoundError", FileNotFoundError)
    with pytest.raises(SystemExit) as stop:         # python -m magma_torch.llm.gguf_export: one line, status 2
        gguf_export.main(["--out", str(tmp_path / "out"), "--gguf", str(missing)])
    assert stop.value.code == 2 and capsys.readouterr().err == f"error: gguf_export: no GGUF file at {missing}\n"
    assert list(tmp_path.iterdir()) == []


def test_a_gguf_export_dtype_torch_lacks_is_refused_before_the_model_is_loaded(tmp_path, capsys, monkeypatch):
    # before: an AttributeError from getattr(torch, dtype) after both minutes-long loads
    import transformers

    from magma_torch.llm import gguf_export

    loads = []
    monkeypatch.setattr(transformers, "AutoTokenizer", SimpleNamespace(from_pretrained=lambda *a, **k: loads.append(a)))
    with pytest.raises(SystemExit) as stop:
        gguf_export.main(["--out", str(tmp_path / "out"), "--gguf", str(fake_gguf(tmp_path)), "--dtype", "bf16"])
    assert stop.value.code == 2 and capsys.readouterr().err == (
        "error: gguf_export: --dtype 'bf16' is not a torch dtype (bfloat16, float16 or float32)\n")
    assert loads == [] and not (tmp_path / "out").exists()


# a whole line of a consolidation.cache file
WHOLE = {"key": "a", "text": "x", "parsed": None, "prompt_tokens": 1, "completion_tokens": 1, "seconds": 0.5}


@pytest.mark.parametrize("line, why", [("not json", "not JSON"),
                                       ('{"text": "x"}', "no 'key'"),     # before: a bare KeyError
                                       # before: reused as it was, a str for the Generation's int
                                       (json.dumps({**WHOLE, "key": "b", "completion_tokens": "7"}),
                                        r"""'completion_tokens' is not a number \("7"\)$"""),
                                       # a key without the rest: before, a KeyError once the line was reused
                                       ('{"key": "b", "text": "x"}', "no 'parsed'"),
                                       # before: a raw TypeError (unhashable list), or a number handed on as text
                                       (json.dumps({**WHOLE, "key": ["b"]}), r"""'key' is not a string \(\["b"\]\)$"""),
                                       (json.dumps({**WHOLE, "key": "b", "text": 7}),
                                        r"'text' is not a string \(7\)$")])
def test_a_damaged_generation_cache_is_a_magma_error_and_a_value_error_naming_file_and_line(tmp_path, line, why):
    # DamagedFileError is what a run folder's or a consolidation.cache's JSON-lines file raises for a damaged line
    from magma_torch.llm.cache import CachedLLM

    cache = tmp_path / "consolidation_cache.jsonl"
    cache.write_text(json.dumps(WHOLE) + "\n" + line + "\n")
    with pytest.raises(ValueError, match=f"^{re.escape(str(cache))} line 2: {why}") as err:
        CachedLLM(type("Reader", (), {"name": "reader"})(), cache)
    refused(err.value, "DamagedFileError", ValueError)


@pytest.mark.parametrize("line, why", [("not json", "not JSON"),
                                       ('{"key": "b", "text": "x", "parsed": null}', "no 'prompt_tokens'"),
                                       # before: a TypeError from sum() (a str), or a bool counted as 1
                                       (json.dumps({**WHOLE, "key": "b", "seconds": "0.5"}),
                                        r"""'seconds' is not a number \("0\.5"\)$"""),
                                       (json.dumps({**WHOLE, "key": "b", "prompt_tokens": None}),
                                        r"'prompt_tokens' is not a number \(null\)$"),
                                       (json.dumps({**WHOLE, "key": "b", "completion_tokens": True}),
                                        r"'completion_tokens' is not a number \(true\)$")])
def test_the_cost_of_a_damaged_generation_cache_is_refused_naming_file_and_line(tmp_path, line, why):
    # llm.cache.cost (llm_graph_audit) sums every line's tokens and seconds: before, a KeyError or a JSON error
    from magma_torch.llm.cache import cost

    cache = tmp_path / "consolidation_cache.jsonl"
    cache.write_text(json.dumps(WHOLE) + "\n" + line + "\n")
    with pytest.raises(ValueError, match=f"^{re.escape(str(cache))} line 2: {why}") as err:
        cost(cache)
    refused(err.value, "DamagedFileError", ValueError)


def test_a_memory_opened_with_an_embedder_of_another_width_is_a_magma_error_and_a_value_error(emb, tmp_path):
    class Narrow:          # an 8-dimensional embedder; the memory was written with the 384-dimensional default
        dim, device = 8, "cpu"
    # (the bundled question map refuses another width itself: without it the store is the first to see it)
    no_map = {"retrieval": {"question_adapter": None}}
    tenants, saved, export = tmp_path / "tenants", tmp_path / "saved", tmp_path / "export.jsonl"
    with MagmaMemory(no_map, consolidation="none", embedder=emb, device="cpu", store_dir=tenants, namespace="u") as mem:
        mem.add("Dana went hiking.", "2023-06-05 10:00", speaker="Dana")
        mem.save(saved)
        mem.export_jsonl(export)
    for path, reopen in ((saved, lambda: MagmaMemory.load(saved, embedder=Narrow())),
                         (saved, lambda: MagmaMemory.load(saved, embedder=Narrow(), read_only=True)),
                         (export, lambda: MagmaMemory.import_jsonl(export, embedder=Narrow())),
                         (tenants / "u" / "checkpoint",
                          lambda: MagmaMemory(store_dir=tenants, namespace="u", embedder=Narrow(), device="cpu")),
                         (tenants / "u" / "checkpoint",
                          lambda: MagmaMemory.open_readonly(tenants, "u", embedder=Narrow()))):
        with pytest.raises(ValueError, match=f"^{re.escape(str(path))}: saved with 384-dim embeddings, the "
                                             r"embedder gives 8; open it with the embedder it was saved with "
                                             r"\(memory\.embedder\)$") as err:
            reopen()
        refused(err.value, "StoreMismatchError", ValueError)
    with MagmaMemory(store_dir=tenants, namespace="u", embedder=emb, device="cpu") as mem:   # the refusals kept it
        assert [e.text for e in mem.events()] == ["Dana went hiking."]


LLM_CONSOLIDATION = "magma_torch.ingest.llm_consolidator.LLMConsolidator"


class Reader:
    name = "reader"

    def generate(self, prompts, **kw):
        raise AssertionError("the reader ran")


def test_a_consolidators_refusal_is_raised_as_it_is_not_wrapped_by_hydra(emb, tmp_path):
    # Hydra wraps what a _target_'s constructor raises in an InstantiationException, neither a MagmaError nor a
    # ValueError: MagmaMemory re-raises the consolidator's own error, here the DamagedFileError of its cache
    cache = tmp_path / "consolidation_cache.jsonl"
    cache.write_text(json.dumps(WHOLE) + "\n[1, 2]\n")
    with pytest.raises(ValueError, match=f"^{re.escape(str(cache))} line 2: expected a JSON object, got list$") as err:
        MagmaMemory(consolidation={"_target_": LLM_CONSOLIDATION, "cache": str(cache)}, llm=Reader(), embedder=emb,
                    device="cpu")
    refused(err.value, "DamagedFileError", ValueError)


def test_unknown_or_broken_supersession_rules_are_a_config_error_naming_the_setting(emb):
    from magma_torch.ingest.supersession import load_rules

    with pytest.raises(ValueError, match=r"^consolidation\.supersession: unknown rules 'nosuch', no conf/supersession/"
                                         r"nosuch\.yaml \(known: default; null turns it off\)$") as err:
        MagmaMemory(consolidation={"supersession": "nosuch"}, embedder=emb, device="cpu")
    refused(err.value, "ConfigError", ValueError)
    broken = load_rules("default")
    kind = next(iter(broken["kinds"]))
    broken["kinds"][kind]["patterns"][0]["pattern"] = "(unclosed"
    with pytest.raises(ValueError, match=rf"^consolidation\.supersession: kinds\.{kind}: bad pattern "
                                         r"'\(unclosed': missing \)") as err:
        MagmaMemory(consolidation={"supersession": broken}, embedder=emb, device="cpu")
    refused(err.value, "ConfigError", ValueError)


def test_a_keyed_supersession_kind_whose_pattern_has_no_key_group_is_a_config_error_naming_it(emb):
    # before: accepted, then an IndexError ("no such group") at the first event the pattern matched
    from magma_torch.ingest.supersession import load_rules

    rules = load_rules("default")
    kind = next(k for k, spec in rules["kinds"].items() if spec.get("key"))
    rules["kinds"][kind]["patterns"][0]["pattern"] = r"\bi have (?P<value>\d+) pets?\b"
    with pytest.raises(ValueError, match=rf"^consolidation\.supersession: kinds\.{kind}: key: true, but pattern "
                                         r"'.*' has no named group \(\?P<key>\.\.\.\) to take the key from$") as err:
        MagmaMemory(consolidation={"supersession": rules}, embedder=emb, device="cpu")
    refused(err.value, "ConfigError", ValueError)


def default_rules_at(path):
    """The default supersession rules, their first kind's name, and the mapping (or list) that holds the last step of
    ``path`` (KIND: that first kind) with that step."""
    from magma_torch.ingest.supersession import load_rules

    rules = load_rules("default")
    kind = next(iter(rules["kinds"]))
    *steps, last = [kind if step == "KIND" else step for step in path]
    inner = rules
    for step in steps:
        inner = inner[step]
    return rules, kind, inner, last


@pytest.mark.parametrize("drop, named", [
    (("hedges",), r"no 'hedges'"),
    (("confidence", "cue"), r"confidence: no 'cue'"),            # before: a KeyError at the first add it read
    (("kinds", "KIND", "patterns"), r"kinds\.{kind}: no 'patterns'"),
    (("kinds", "KIND", "patterns", 0, "pattern"), r"kinds\.{kind}\.patterns\[0\]: no 'pattern'")])
def test_a_supersession_rules_mapping_without_a_required_key_is_a_config_error_naming_it(emb, drop, named):
    # consolidation.supersession given as a mapping is used as it is: before, a missing key was a bare KeyError
    # that Hydra wrapped in an InstantiationException
    rules, kind, inner, last = default_rules_at(drop)
    del inner[last]
    with pytest.raises(ValueError, match="^consolidation\\.supersession: " + named.format(kind=kind)) as err:
        MagmaMemory(consolidation={"supersession": rules}, embedder=emb, device="cpu")
    refused(err.value, "ConfigError", ValueError)


@pytest.mark.parametrize("path, value, named", [
    (("kinds",), None, r"kinds: expected a mapping, got None"),
    (("kinds", "KIND"), None, r"kinds\.{kind}: expected a mapping, got None"),       # a kind left empty in YAML
    (("kinds", "KIND", "patterns"), None, r"kinds\.{kind}\.patterns: expected a list, got None"),
    (("kinds", "KIND", "patterns", 0), "a pattern", r"kinds\.{kind}\.patterns\[0\]: expected a mapping, got 'a"),
    (("confidence",), 0.9, r"confidence: expected a mapping, got 0\.9"),
    (("hedges",), "maybe", r"hedges: expected a list, got 'maybe'")])
def test_a_supersession_rules_part_of_the_wrong_shape_is_a_config_error_naming_it(emb, path, value, named):
    # before: a TypeError or AttributeError ("argument of type 'NoneType' is not iterable") from the first read
    rules, kind, inner, last = default_rules_at(path)
    inner[last] = value
    with pytest.raises(ValueError, match="^consolidation\\.supersession: " + named.format(kind=kind)) as err:
        MagmaMemory(consolidation={"supersession": rules}, embedder=emb, device="cpu")
    refused(err.value, "ConfigError", ValueError)


@pytest.mark.parametrize("target, why", [
    ("nosuch.module.Consolidator", r"Error loading 'nosuch\.module\.Consolidator': ModuleNotFoundError\(\"No module "
                                   r"named 'nosuch'\"\); Are you sure that module 'nosuch' is installed\?"),
    ("magma_torch.ingest.heuristic.NoSuch", r"Error loading 'magma_torch\.ingest\.heuristic\.NoSuch': .*; Are you "
                                            r"sure that 'NoSuch' is importable from module "
                                            r"'magma_torch\.ingest\.heuristic'\?"),
    ("magma_torch.ingest.heuristic", r"Expected a callable target, got '<module 'magma_torch\.ingest\.heuristic' "
                                     r".*' of type 'module'")])
def test_a_consolidation_target_that_is_not_there_is_a_config_error_naming_it(emb, target, why):
    # before: Hydra's InstantiationException ("Error locating target ..."), neither a MagmaError nor a ValueError;
    # the ConfigError keeps what Hydra said, in one line
    named = rf"^consolidation\._target_: cannot build {re.escape(repr(target))}: {why}$"
    with pytest.raises(ValueError, match=named) as err:
        MagmaMemory(consolidation={"_target_": target}, embedder=emb, device="cpu")
    refused(err.value, "ConfigError", ValueError)


def test_a_magma_error_raised_importing_the_consolidation_target_is_raised_as_it_is(emb, tmp_path, monkeypatch):
    # Hydra wraps it twice (an ImportError of its own, then an InstantiationException): the MagmaError comes out
    (tmp_path / "needs_an_extra.py").write_text(
        "from magma_torch.errors import MissingDependencyError\n"
        "raise MissingDependencyError('consolidation._target_ needs somepkg: pip install magma-torch[some]')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ImportError, match=r"^consolidation\._target_ needs somepkg: pip install magma-torch\[some\]$") \
            as err:
        MagmaMemory(consolidation={"_target_": "needs_an_extra.Consolidator"}, embedder=emb, device="cpu")
    refused(err.value, "MissingDependencyError", ImportError)


def test_a_keyword_a_consolidator_does_not_take_is_a_config_error_naming_the_setting(emb, tmp_path, monkeypatch):
    # a consolidator of your own is built with its config as given: before, a misspelt setting was Hydra's
    # InstantiationException around the TypeError, neither a MagmaError nor a ValueError
    (tmp_path / "own_consolidator.py").write_text(
        "def helper():\n    pass\n\n\n"
        "class Consolidator:\n    def __init__(self, window: int = 4):\n        self.window = window\n\n\n"
        "class Broken:\n    def __init__(self):\n        helper(window=1)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ValueError, match=r"^consolidation\.windw: not a setting of 'own_consolidator\.Consolidator'$") \
            as err:
        MagmaMemory(consolidation={"_target_": "own_consolidator.Consolidator", "windw": 3}, embedder=emb, device="cpu")
    refused(err.value, "ConfigError", ValueError)
    # the same TypeError raised by code the constructor runs is a bug there, not a setting: it stays as it is
    with pytest.raises(Exception, match=r"helper\(\) got an unexpected keyword argument 'window'") as err:
        MagmaMemory(consolidation={"_target_": "own_consolidator.Broken"}, embedder=emb, device="cpu")
    assert not isinstance(err.value, MagmaError)


def test_an_unknown_consolidation_prompt_is_a_config_error_naming_the_setting(emb):
    from magma_torch.config.resolve import consolidation_config
    from magma_torch.config.schema import CONSOLIDATION_PROMPTS
    from magma_torch.ingest.llm_consolidator import SYSTEM_PROMPTS, LLMConsolidator

    assert CONSOLIDATION_PROMPTS == tuple(SYSTEM_PROMPTS)     # the schema's choices are the prompts there are
    named = r"^consolidation\.prompt_version: must be one of v1, v2, v3, got 'v9'$"
    bad = {"_target_": LLM_CONSOLIDATION, "prompt_version": "v9"}
    for refuse in (lambda: consolidation_config(bad),        # what magma-run checks before any work
                   lambda: MagmaMemory(consolidation=bad, llm=Reader(), embedder=emb, device="cpu"),
                   lambda: LLMConsolidator(Reader(), prompt_version="v9")):
        with pytest.raises(ValueError, match=named) as err:
            refuse()
        refused(err.value, "ConfigError", ValueError)


def test_an_unknown_openai_response_format_is_a_config_error_naming_the_setting():
    # magma-run llm=openai llm.response_format=xml builds the backend through build_llm (Hydra's instantiate)
    from magma_torch.llm import build_llm

    named = r"^llm\.response_format must be json_schema or json_object, got 'xml'$"
    with pytest.raises(ValueError, match=named) as err:
        build_llm({"_target_": "magma_torch.llm.openai_backend.OpenAIBackend", "response_format": "xml",
                   "require_key": False})
    refused(err.value, "ConfigError", ValueError)


@pytest.mark.parametrize("target, why", [
    ("magma_torch.llm.nosuch_backend.Backend", r"Error loading 'magma_torch\.llm\.nosuch_backend\.Backend': "
                                               r"ModuleNotFoundError\(.*\); Are you sure that 'nosuch_backend' is "
                                               r"importable from module 'magma_torch\.llm'\?"),
    ("magma_torch.llm.openai_backend", r"Expected a callable target, got '<module 'magma_torch\.llm\.openai_backend' "
                                       r".*' of type 'module'")])
def test_an_llm_target_that_is_not_there_is_a_config_error_naming_it(target, why):
    # magma-run llm._target_=...: before, the bare ImportError of Hydra's _locate (outside `except MagmaError`),
    # or Hydra's InstantiationException for a target that is not callable
    from magma_torch.llm import build_llm

    with pytest.raises(ValueError, match=rf"^llm\._target_: cannot build {re.escape(repr(target))}: {why}$") as err:
        build_llm({"_target_": target})
    refused(err.value, "ConfigError", ValueError)


def test_a_keyword_an_llm_backend_does_not_take_is_a_config_error_naming_the_setting():
    # magma-run llm=openai +llm.temprature=0: before, Hydra's InstantiationException around the TypeError
    from magma_torch.llm import build_llm

    named = r"^llm\.temprature: not a setting of 'magma_torch\.llm\.openai_backend\.OpenAIBackend'$"
    with pytest.raises(ValueError, match=named) as err:
        build_llm({"_target_": "magma_torch.llm.openai_backend.OpenAIBackend", "require_key": False, "temprature": 0})
    refused(err.value, "ConfigError", ValueError)


@pytest.mark.parametrize("setting", ["judge", "consolidation.llm"])
def test_a_judges_or_consolidators_llm_settings_are_named_where_they_sit(setting):
    # magma-run +judge.temprature=0 said "llm.temprature", a setting the command never gave
    from magma_torch.llm import build_llm

    backend = "magma_torch.llm.openai_backend.OpenAIBackend"
    with pytest.raises(ValueError, match=rf"^{re.escape(setting)}\.temprature: not a setting of '{backend}'$"):
        build_llm({"_target_": backend, "require_key": False, "temprature": 0}, setting)
    with pytest.raises(ValueError, match=rf"^{re.escape(setting)}\.response_format must be json_schema"):
        build_llm({"_target_": backend, "require_key": False, "response_format": "xml"}, setting)


def hidden(monkeypatch, *modules: str) -> None:
    """As if ``modules`` were not installed: ``import`` raises ImportError and find_spec finds none."""
    from magma_torch.query import kernel

    for module in modules:
        monkeypatch.setitem(sys.modules, module, None)
    # kernel caches whether numba is there: a fresh cache for this test, the old one back after it
    monkeypatch.setattr(kernel, "_numba_installed", functools.cache(kernel._numba_installed.__wrapped__))


def fake_gguf(tmp_path):
    gguf = tmp_path / "model.gguf"
    gguf.write_bytes(b"GGUF")
    return gguf


def export_gguf(out, gguf):
    from magma_torch.llm import gguf_export      # python -m magma_torch.llm.gguf_export

    return gguf_export.export_gguf(out, gguf)


def build(target: str, **kw):
    """A backend as magma-run builds it (build_llm, Hydra's instantiate)."""
    from magma_torch.llm import build_llm

    return build_llm({"_target_": f"magma_torch.llm.{target}", **kw})


# (what is missing, the setting that needs it and the install command its refusal names, what asks for it);
# before: a bare ImportError (outside `except MagmaError`), or a ModuleNotFoundError from deep in gguf_export
MISSING = {
    "vllm": (("vllm",), ("llm=vllm", "pip install 'magma-torch[vllm]'"),
             lambda emb, tmp: build("vllm_backend.VLLMBackend", model="x")),
    "transformers": (("transformers",), ("llm=transformers", "pip install 'magma-torch[transformers]'"),
                     lambda emb, tmp: build("transformers_backend.TransformersBackend")),
    "gguf": (("gguf",), ("llm=transformers with a GGUF file", "needs gguf", "pip install 'magma-torch[transformers]'"),
             lambda emb, tmp: build("transformers_backend.TransformersBackend", model=str(fake_gguf(tmp)))),
    "httpx": (("httpx",), ("llm=openai", "pip install 'httpx>=0.27'"),
              lambda emb, tmp: build("openai_backend.OpenAIBackend", require_key=False, check=False)),
    "llama_cpp": (("llama_cpp",), ("llm=llamacpp", "(llama_cpp is missing)", "pip install 'magma-torch[llamacpp]'"),
                  lambda emb, tmp: build("llamacpp_backend.LlamaCppBackend", model_path=str(fake_gguf(tmp)))),
    "gguf_export": (("transformers",), ("gguf_export needs transformers", "pip install 'magma-torch[transformers]'"),
                    lambda emb, tmp: export_gguf(tmp / "out", fake_gguf(tmp))),
    "numba": (("numba",), ("retrieval.kernel=numba", "pip install 'magma-torch[fast]'"),
              lambda emb, tmp: MagmaMemory({"retrieval": {"kernel": "numba"}}, consolidation="none", embedder=emb,
                                           device="cpu")),
    "faiss": (("faiss",), ("vector_backend=faiss", "pip install 'magma-torch[faiss]'"),
              lambda emb, tmp: MagmaMemory({"vector_backend": "faiss"}, consolidation="none", embedder=emb,
                                           device="cpu")),
}


@pytest.mark.parametrize("missing", sorted(MISSING))
def test_a_missing_optional_package_is_a_magma_error_and_an_import_error_naming_setting_and_extra(
        missing, emb, tmp_path, monkeypatch):
    modules, named, ask = MISSING[missing]
    hidden(monkeypatch, *modules)
    with pytest.raises(ImportError) as err:
        ask(emb, tmp_path)
    refused(err.value, "MissingDependencyError", ImportError)
    for part in named:
        assert part in str(err.value)


def test_a_missing_spacy_pipeline_is_a_missing_dependency_too():
    assert issubclass(magma_torch.MissingNLPModel, magma_torch.MissingDependencyError)


@pytest.mark.parametrize("device", ["bogus", "cuda:x"])
def test_a_device_torch_cannot_parse_is_a_config_error_naming_the_setting(emb, device):
    # before: torch's RuntimeError ("Expected one of cpu, cuda, ... device type at start of device string")
    named = f"^device must be auto, cpu, cuda, cuda:N or another torch device, got {re.escape(repr(device))}$"
    for refuse in (lambda: MagmaMemory(consolidation="none", embedder=emb, device=device),
                   lambda: MagmaMemory({"device": device}, consolidation="none", embedder=emb)):
        with pytest.raises(ValueError, match=named) as err:
            refuse()
        refused(err.value, "ConfigError", ValueError)


def test_a_store_dir_that_is_a_file_is_a_magma_error_and_a_not_a_directory_error(emb, tmp_path):
    # before: pathlib's bare NotADirectoryError (or FileExistsError for a namespace folder that is a file)
    notes = tmp_path / "notes.txt"
    notes.write_text("keep me")
    for store_dir, namespace, what in (
            (notes, "default", f"store_dir {notes}: a file, not a folder"),
            (notes / "sub", "default", f"store_dir {notes / 'sub'}: {notes} is a file, not a folder"),
            (tmp_path, "notes.txt", f"store_dir {tmp_path}: {notes} is a file, not the folder of namespace "
                                    "'notes.txt'")):
        with pytest.raises(NotADirectoryError, match=f"^{re.escape(what)}$") as err:
            MagmaMemory(store_dir=store_dir, namespace=namespace, consolidation="none", embedder=emb, device="cpu")
        refused(err.value, "StoreDirNotAFolderError", NotADirectoryError)
    assert [p.name for p in tmp_path.iterdir()] == ["notes.txt"] and notes.read_text() == "keep me"
