"""Selecting samples for one shard, and merging shard run folders back (magma-aggregate)."""
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_module
from omegaconf import OmegaConf

from magma_torch.eval.aggregate import AggregateError, aggregate
from magma_torch.eval.aggregate import main as aggregate_main
from magma_torch.eval.compare import paired_difference
from magma_torch.eval.datasets import DatasetError, load_demo, load_longmemeval, select_samples, selection_size
from magma_torch.eval.runner import summarise_run
from magma_torch.testing import assert_no_run

DATA = Path(__file__).parent / "data"


def test_shards_are_disjoint_and_cover_every_sample():
    samples = load_demo()
    for n in (1, 2, 3, 5):
        parts = [list(select_samples(iter(samples), shard=f"{i}/{n}")) for i in range(n)]
        ids = [s.sample_id for part in parts for s in part]
        assert sorted(ids) == sorted(s.sample_id for s in samples)
        assert max(map(len, parts)) - min(map(len, parts)) <= 1


def test_sample_ids_and_limit():
    samples = load_demo()
    last = samples[-1].sample_id
    assert [s.sample_id for s in select_samples(samples, sample_ids=[last])] == [last]
    assert len(list(select_samples(samples, limit=2))) == 2
    with pytest.raises(DatasetError, match="no sample 'conv-404'"):
        list(select_samples(samples, sample_ids=["conv-404"]))


@pytest.mark.parametrize("limit, sample_ids, shard", [
    (None, None, None), (2, None, None), (None, None, "1/2"), (None, None, "2/3"), (None, None, "0/5"),
    (None, ["demo-3", "demo-1"], None), (None, ["demo-3", "demo-1", "demo-2"], "1/2"), (2, ["demo-2"], "0/2"),
    (2, None, "1/2")])
def test_the_size_of_a_selection_is_the_count_it_hands_out(limit, sample_ids, shard):
    # the progress bar's total: a run with sample_ids or a shard showed none
    samples = load_demo()
    handed_out = list(select_samples(samples, limit, sample_ids, shard))
    assert selection_size(len(samples), limit, sample_ids, shard) == len(handed_out)
    assert selection_size(None, limit, sample_ids, shard) == (None if limit is None and sample_ids is None
                                                              else len(handed_out))


def test_named_samples_are_checked_before_any_sample_is_handed_out():
    with pytest.raises(DatasetError, match="no sample 'demo-9' in the dataset"):
        select_samples(load_demo(), sample_ids=["demo-1", "demo-9"])
    with pytest.raises(DatasetError, match=r"sample 'demo-2' is beyond dataset.limit=1 \(it is sample 2 of 3\)"):
        select_samples(load_demo(), 1, ["demo-2"])
    for bare in ("demo-1", 7, ["demo-1", 2]):
        with pytest.raises(DatasetError, match=r"dataset.sample_ids=.*: expected a list of sample ids"):
            select_samples(load_demo(), sample_ids=bare)


def test_named_samples_of_a_streamed_file_are_checked_by_a_scan_of_its_ids(tmp_path):
    raw = json.loads((DATA / "longmemeval_fixture.json").read_text())
    broken = [*raw, {"question_id": "late", "question_type": "trivia"}]   # a record the stream would reject
    path = tmp_path / "lme.json"
    path.write_text(json.dumps(broken))
    first = raw[0]["question_id"]
    with pytest.raises(DatasetError, match="no sample 'nope' in the dataset"):
        select_samples(load_longmemeval(path), sample_ids=[first, "nope"])
    with pytest.raises(DatasetError, match=r"sample 'late' is beyond dataset.limit=2"):
        select_samples(load_longmemeval(path), 2, ["late"])
    assert [s.sample_id for s in select_samples(load_longmemeval(path), 2, [first])] == [first]


@pytest.mark.parametrize("ids, message", [("demo-1", "dataset.sample_ids='demo-1': expected a list"),
                                          ("[]", "dataset.sample_ids=[]: expected a list of sample ids"),
                                          ("[demo-1,demo-9]", "dataset.sample_ids: no sample 'demo-9'")])
def test_bad_sample_ids_stop_magma_run_before_any_work(tmp_path, ids, message):
    out = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-m", "magma_torch.eval.cli", "dataset=demo", f"dataset.sample_ids={ids}",
                           f"out_dir={out}"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines()[-1].startswith(f"magma-run: error: {message}")
    assert_no_run(out)


@pytest.mark.parametrize("bad", ["3/3", "1", "a/b", "-1/2", "0/0"])
def test_bad_shard_names_the_setting(bad):
    with pytest.raises(DatasetError, match="dataset.shard"):
        select_samples(load_demo(), shard=bad)


def test_bad_shard_stops_magma_run_before_any_work(tmp_path):
    out = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-m", "magma_torch.eval.cli", "dataset=demo", "dataset.shard=3/3",
                           f"out_dir={out}"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines()[-1].startswith("magma-run: error: dataset.shard='3/3'")
    assert_no_run(out)


def write_shard(folder, i, rows, cfg, edges=3, commit="abc1234"):
    rows = [{"sample_id": f"s{i}", **r} for r in rows]
    folder.mkdir(parents=True)
    OmegaConf.save(OmegaConf.merge(cfg, {"dataset": {"shard": f"{i}/2"}, "out_dir": str(folder)}),
                   folder / "config.yaml")
    (folder / "predictions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    build = {"sample_id": f"s{i}", "events": 10, "entities": 2, "fast_path_s": 1.5, "consolidation_s": 0.5,
             "edges": {"temporal": edges, "semantic": 1, "causal": 0, "entity": 4},
             "llm_calls": 0, "llm_prompt_tokens": 0, "llm_completion_tokens": 0}
    (folder / "samples.jsonl").write_text(json.dumps(build) + "\n")
    metrics = summarise_run(cfg, rows, [build], None, None, commit)
    (folder / "metrics.json").write_text(json.dumps(metrics))


def row(qid, hit):
    return {"question_id": qid, "category": "temporal", "context_tokens": 100, "retrieval_ms": 2.0,
            "recall_all@5": hit, "recall_all@10": hit, "recall_any@10": 1.0, "recall_all@1000tok": hit,
            "recall_all@2000tok": hit}


@pytest.fixture
def cfg():
    with initialize_config_module("magma_torch.conf", version_base=None):
        return compose("config", overrides=["dataset=demo", "progress=false"])


def test_merge_recomputes_metrics_from_rows(tmp_path, cfg):
    a, b = tmp_path / "shard_0", tmp_path / "shard_1"
    write_shard(a, 0, [row("s0/q0", 1.0)], cfg)
    write_shard(b, 1, [row("s1/q0", 0.0), row("s1/q1", 0.0), row("s1/q2", 1.0)], cfg, edges=5)
    m = aggregate([a, b], tmp_path / "merged")
    assert m["n_questions"] == 4
    assert m["overall"]["recall_all@10"] == pytest.approx(0.5)        # 2 of 4, not the mean of 1.0 and 1/3
    assert m["by_category"]["temporal"]["n"] == 4
    assert m["build"]["events"] == 20 and m["build"]["edges"]["temporal"] == 8
    assert m["build"]["fast_path_s"] == pytest.approx(3.0)
    merged = tmp_path / "merged"
    assert len((merged / "predictions.jsonl").read_text().splitlines()) == 4
    assert [json.loads(x)["question_id"] for x in (merged / "scores.jsonl").read_text().splitlines()] == [
        json.loads(x)["question_id"] for x in (merged / "predictions.jsonl").read_text().splitlines()]
    assert json.loads((merged / "metrics.json").read_text()) == m
    assert (merged / "recall_by_category.png").stat().st_size > 1000


def test_merged_metrics_name_the_shards_commit_only_when_they_share_it(tmp_path, cfg):
    a, b, c = tmp_path / "shard_0", tmp_path / "shard_1", tmp_path / "shard_1b"
    write_shard(a, 0, [row("s0/q0", 1.0)], cfg)
    write_shard(b, 1, [row("s1/q0", 1.0)], cfg)
    write_shard(c, 1, [row("s1/q0", 1.0)], cfg, commit="def5678+dirty")
    assert aggregate([a, b], tmp_path / "same")["commit"] == "abc1234"
    assert aggregate([a, c], tmp_path / "mixed")["commit"] is None


def test_a_merge_needs_every_shard_once(tmp_path, cfg):
    a, b = tmp_path / "shard_0", tmp_path / "shard_1"
    write_shard(a, 0, [row("s0/q0", 1.0)], cfg)
    write_shard(b, 1, [row("s1/q0", 1.0)], cfg)
    with pytest.raises(AggregateError, match=r"missing shard\(s\) 1/2: .* 1 of 2 shards"):
        aggregate([a], tmp_path / "m1")
    with pytest.raises(AggregateError, match=r"shard_0: shard 0/2 again \(also .*shard_0\)"):
        aggregate([a, b, a], tmp_path / "m2")
    c = tmp_path / "shard_3"
    write_shard(c, 0, [row("s3/q0", 1.0)], cfg)
    OmegaConf.save(OmegaConf.merge(cfg, {"dataset": {"shard": "2/3"}}), c / "config.yaml")
    with pytest.raises(AggregateError, match=r"shards of different splits \(n = 2, 3\)"):
        aggregate([a, b, c], tmp_path / "m3")
    OmegaConf.save(cfg, c / "config.yaml")                     # dataset.shard: null
    with pytest.raises(AggregateError, match=r"shard_3: no dataset.shard, unlike the other folders"):
        aggregate([a, b, c], tmp_path / "m4")
    assert not any((tmp_path / f"m{i}").exists() for i in range(1, 5))


def test_a_damaged_line_of_a_shard_is_named(tmp_path, cfg):
    a, b = tmp_path / "shard_0", tmp_path / "shard_1"
    write_shard(a, 0, [row("s0/q0", 1.0)], cfg)
    write_shard(b, 1, [row("s1/q0", 1.0)], cfg)
    with open(b / "predictions.jsonl", "a") as f:
        f.write("garbage\n")
    with pytest.raises(AggregateError, match=r"shard_1/predictions.jsonl line 2: not JSON"):
        aggregate([a, b], tmp_path / "merged")
    assert not (tmp_path / "merged").exists()


@pytest.mark.parametrize("text, said", [("{\"n_questions\": 1", "not JSON"), ("[1, 2]", "expected a JSON object")])
def test_a_damaged_metrics_json_of_a_shard_is_named(tmp_path, cfg, text, said):
    a, b = tmp_path / "shard_0", tmp_path / "shard_1"
    write_shard(a, 0, [row("s0/q0", 1.0)], cfg)
    write_shard(b, 1, [row("s1/q0", 1.0)], cfg)
    (b / "metrics.json").write_text(text)
    with pytest.raises(AggregateError, match=rf"shard_1/metrics.json: {said}"):
        aggregate([a, b], tmp_path / "merged")
    assert not (tmp_path / "merged").exists()


@pytest.mark.parametrize("damage, said", [
    (shutil.rmtree, r"shard_1: no such folder"),                           # a typo in its name, say
    (lambda b: (b / "config.yaml").unlink(), r"shard_1: no config.yaml \(the shard did not finish\)"),
    (lambda b: (b / "config.yaml").write_text("dataset: [unclosed\n"), r"shard_1/config.yaml: not YAML \(expected"),
    (lambda b: (b / "config.yaml").write_text("- 1\n"), r"shard_1/config.yaml: not a run's config"),
    (lambda b: (b / "metrics.json").write_text("{}"), r"shard_1/metrics.json: no whole number 'n_questions'"),
], ids=["no folder", "no config.yaml", "config.yaml not YAML", "config.yaml a list", "no n_questions"])
def test_a_missing_or_unreadable_shard_is_named(tmp_path, cfg, damage, said):
    # before: a FileNotFoundError for config.yaml (read before the "did not finish" check), a yaml ParserError,
    # a ListConfig error, or a KeyError 'n_questions': tracebacks, not AggregateErrors magma-aggregate reports
    a, b = tmp_path / "shard_0", tmp_path / "shard_1"
    write_shard(a, 0, [row("s0/q0", 1.0)], cfg)
    write_shard(b, 1, [row("s1/q0", 1.0)], cfg)
    damage(b)
    with pytest.raises(AggregateError, match=said):
        aggregate([a, b], tmp_path / "merged")
    assert not (tmp_path / "merged").exists()


@pytest.mark.parametrize("out, said", [
    ("taken", r"--out .*/taken: is a file, not a folder$"),
    ("taken/merged", r"--out .*/taken/merged: .*/taken is a file, not a folder; cannot make a folder below it$"),
], ids=["a file", "below a file"])
def test_an_out_that_cannot_be_a_folder_is_refused_before_any_shard_is_read(tmp_path, capsys, out, said):
    # before: the shards were read first (here: 'shard_0: no such folder'); with finished shards, out.mkdir's raw
    # FileExistsError or NotADirectoryError escaped main after every shard was read
    (tmp_path / "taken").write_text("a file where the merged folder should go")
    with pytest.raises(SystemExit) as stop:     # the shard is not there: --out is refused first
        aggregate_main(["--out", str(tmp_path / out), str(tmp_path / "shard_0")])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and len(err.splitlines()) == 1
    assert re.match(rf"magma-aggregate: error: {said}", err.strip())
    assert (tmp_path / "taken").read_text() == "a file where the merged folder should go"


@pytest.mark.parametrize("blocks, said", [
    ({"answering": {"llm": "reader"}}, r"'answering' but no 'judging' \(a task=qa run writes both\)"),
    ({"judging": {"llm": "judge"}}, r"'judging' but no 'answering'"),
    ({"answering": {"llm": "reader"}, "judging": None}, r"'judging' is not a JSON object"),
], ids=["no judging", "no answering", "judging null"])
def test_a_shard_with_one_llm_block_is_named(tmp_path, cfg, blocks, said):
    # before: KeyError 'judging' (or AttributeError on None) after every shard was read; with no 'answering', the
    # merge dropped the judging block without a word
    a, b = tmp_path / "shard_0", tmp_path / "shard_1"
    write_shard(a, 0, [row("s0/q0", 1.0)], cfg)
    write_shard(b, 1, [row("s1/q0", 1.0)], cfg)
    metrics = json.loads((a / "metrics.json").read_text())
    (a / "metrics.json").write_text(json.dumps({**metrics, **blocks}))
    with pytest.raises(AggregateError, match=rf"shard_0/metrics.json: {said}"):
        aggregate([a, b], tmp_path / "merged")
    assert not (tmp_path / "merged").exists()


def test_compare_and_merge_count_what_metrics_json_counts_after_a_resume_with_a_smaller_limit(tmp_path, cfg):
    a, b, fresh = tmp_path / "shard_0", tmp_path / "shard_1", tmp_path / "fresh"
    write_shard(a, 0, [row("s0/q0", 1.0)], cfg)
    write_shard(b, 1, [row("s1/q0", 0.0)], cfg)
    write_shard(fresh, 0, [row("s0/q0", 0.0)], cfg)
    # shard_0 first ran a second sample, then was resumed with dataset.limit=1: its lines stay, uncounted
    kept = {**row("s9/q0", 1.0), "sample_id": "s9"}
    for name, line in (("predictions", kept), ("samples", {"sample_id": "s9", "events": 99})):
        with (a / f"{name}.jsonl").open("a") as f:
            f.write(json.dumps(line) + "\n")
    for folder in (a, fresh):
        (folder / "scores.jsonl").write_text((folder / "predictions.jsonl").read_text())
    assert json.loads((a / "metrics.json").read_text())["sample_ids"] == ["s0"]
    assert paired_difference(a, fresh, "recall_all@10", resamples=100)["n"] == 1
    m = aggregate([a, b], tmp_path / "merged")
    assert m["n_questions"] == 2 and m["build"]["events"] == 20 and m["sample_ids"] == ["s0", "s1"]


def test_unfinished_overlapping_or_foreign_shards_are_refused(tmp_path, cfg):
    a, b = tmp_path / "shard_0", tmp_path / "shard_1"
    write_shard(a, 0, [row("s0/q0", 1.0)], cfg)
    write_shard(b, 1, [row("s0/q0", 1.0)], cfg)
    with pytest.raises(AggregateError, match="more than one shard"):
        aggregate([a, b], tmp_path / "m1")
    (b / "metrics.json").unlink()
    with pytest.raises(AggregateError, match="shard_1: no metrics.json"):
        aggregate([a, b], tmp_path / "m2")
    c = tmp_path / "shard_2"
    write_shard(c, 1, [row("s2/q0", 1.0)], OmegaConf.merge(cfg, {"memory": {"name": "bm25"}}))
    with pytest.raises(AggregateError, match=r"shard_2: its config.yaml differs from .*shard_0's: memory.name: "):
        aggregate([a, c], tmp_path / "m3")
    assert not (tmp_path / "m1").exists() and not (tmp_path / "m3").exists()
    proc = subprocess.run([sys.executable, "-m", "magma_torch.eval.aggregate", "--out", str(tmp_path / "m4"),
                           str(a), str(b)], capture_output=True, text=True)
    assert proc.returncode == 2 and proc.stderr.startswith("magma-aggregate: error:")
    assert len(proc.stderr.strip().splitlines()) == 1


def test_shards_that_differ_only_in_settings_that_do_not_change_results_merge(tmp_path, cfg):
    # A shard resumed with progress, logger or objective changed rewrites its config.yaml; before, the
    # merge refused it as another experiment, without saying which setting differed.
    a, b = tmp_path / "shard_0", tmp_path / "shard_1"
    write_shard(a, 0, [row("s0/q0", 1.0)], cfg)
    write_shard(b, 1, [row("s1/q0", 0.0)], OmegaConf.merge(cfg, {"progress": True, "objective": "recall_all@10"}))
    merged = aggregate([a, b], tmp_path / "merged")
    assert merged["n_questions"] == 2
    c = tmp_path / "shard_2"
    write_shard(c, 1, [row("s2/q0", 1.0)], OmegaConf.merge(cfg, {"dataset": {"limit": 1}}))
    with pytest.raises(AggregateError, match=r"dataset.limit: None -> 1\. Only out_dir, .*progress"):
        aggregate([a, c], tmp_path / "m2")
