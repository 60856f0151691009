"""Every table README.md and BENCHMARKS.md publish equals what its committed result files give
(experiments/published.py, `make results`), so a figure edited by hand or a stale table fails."""
from pathlib import Path

import pytest

from magma_torch.testing import experiment_script

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def published():
    return experiment_script(ROOT / "experiments" / "published.py")


def test_every_published_table_equals_its_files(published):
    assert published.stale() == []


def test_every_renderer_fills_exactly_one_block(published):
    names = [m["name"] for doc in published.DOCS for m in published.BLOCK.finditer((ROOT / doc).read_text())]
    assert sorted(names) == sorted(published.BLOCKS)


def test_a_figure_edited_by_hand_is_found_and_restored(published):
    text = (ROOT / "README.md").read_text()
    block = next(m for m in published.BLOCK.finditer(text) if m["name"] == "locomo_recall")[0]
    row = next(line for line in block.splitlines() if line.startswith("| magma |"))
    cells = row.split(" | ")
    cells[1] = "0.999 / 0.999"
    edited = text.replace(row, " | ".join(cells))
    assert edited != text
    assert published.render(edited, "README.md") == text


def test_an_unknown_block_is_named(published):
    with pytest.raises(published.PublishedError, match=r"README.md: unknown results block 'nope'"):
        published.render("<!-- results:nope -->\nx\n<!-- /results:nope -->", "README.md")


def test_a_bench_record_without_the_reference_is_named(published, tmp_path, monkeypatch):
    record = tmp_path / "bench.json"
    record.write_text('{"agreement_with_reference": null, "speedup_vs_reference": null, "reference_queries": 0}')
    monkeypatch.setattr(published, "BENCH", tmp_path)
    monkeypatch.setattr(published, "ROOT", tmp_path)
    with pytest.raises(published.PublishedError, match=r"bench.json: measured without the reference"):
        published.bench_run("bench.json")


def test_check_exits_zero_on_the_committed_files(published):
    with pytest.raises(SystemExit) as stop:
        published.main(["--check"])
    assert stop.value.code == 0
