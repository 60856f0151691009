"""The README's "Using the memory" example runs as written and does what its text says."""
import re
from datetime import datetime
from pathlib import Path

from magma_torch.eval.datasets import load_demo
from magma_torch.eval.runner import records

README = Path(__file__).resolve().parents[1] / "README.md"


def example(heading: str = "## Using the memory") -> str:
    section = README.read_text(encoding="utf-8").split(heading + "\n", 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_using_the_memory_example(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)                           # it saves to runs/mem
    # the example's `records`: a small memory (not the example's own D1:3: a known source id is merged)
    scope = {"records": [r for r in records(load_demo()[0])[:21] if r["source_id"] != "D1:3"]}
    exec(compile(example(), "README.md", "exec"), scope)
    r, mem = scope["r"], scope["mem"]
    assert r.intent == "WHEN" and "support group" in r.context
    # query_time resolves "yesterday"-style dates; here the question names none, so no window
    assert r.time_window is None and (tmp_path / "runs" / "mem").is_dir()
    # the text's claim: at most anchor_k events -> every event is an anchor and r.paths is empty
    assert mem.stats()["events"] == 21 <= mem.retriever.cfg.anchor_k
    assert len(r.anchors) == 21 and r.paths == []
    asked = mem.retrieve("What did Caroline do yesterday?", query_time="2023-05-09")
    assert asked.time_window == (datetime(2023, 5, 8), datetime(2023, 5, 8, 23, 59, 59, 999999))
    assert mem.retrieve("What did Caroline do yesterday?").time_window is None
    mem.close()


def test_the_errors_example_catches_magma_error(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    exec(compile(example("### Errors"), "README.md", "exec"), {})
    printed = capsys.readouterr().out
    assert printed.startswith("refused: ") and "empty" in printed     # the IngestError, as one line
    assert printed.count("\n") == 1


def test_the_errors_section_names_every_exported_error():
    import magma_torch

    section = README.read_text(encoding="utf-8").split("### Errors\n", 1)[1].split("\n### ", 1)[0]
    errors = [n for n in magma_torch.__all__ if n not in ("MagmaMemory", "StoredEvent")]
    assert [n for n in errors if not re.search(rf"`(magma_torch\.)?{n}`", section)] == []


def test_the_builtin_bases_list_gives_every_exported_error_its_own_builtin():
    import builtins

    import magma_torch

    text = README.read_text(encoding="utf-8")
    block = text.split("<!-- builtin-bases -->\n", 1)[1].split("<!-- /builtin-bases -->")[0]
    listed = {}
    for item in re.split(r"\n- ", "\n" + block.strip())[1:]:
        base, names = item.split(":", 1)
        listed.update((n, base.strip("` ")) for n in re.findall(r"`(\w+)`", names))
    not_errors = ("MagmaMemory", "StoredEvent", "MagmaError")
    errors = {n: getattr(magma_torch, n) for n in magma_torch.__all__ if n not in not_errors}
    # each under the first builtin of its method resolution order: the most specific one it keeps
    assert listed == {name: next(c.__name__ for c in cls.__mro__ if getattr(builtins, c.__name__, None) is c)
                      for name, cls in errors.items()}


def test_the_resume_section_lists_the_settings_that_may_change():
    from magma_torch.eval.run_folder import RESUMABLE_CHANGES

    text = " ".join(README.read_text(encoding="utf-8").split())
    listed = re.search(r"Only (.*?) may change between attempts", text).group(1)
    assert sorted(re.findall(r"`([^`]+)`", listed)) == sorted(RESUMABLE_CHANGES)
