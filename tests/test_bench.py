"""magma-bench: synthetic memories, bulk ingest, the batched query path against the
plain-Python reference, and the CLI's JSON contract (DESIGN 3.3)."""
import copy
import json
import math
from dataclasses import fields, replace
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from magma_torch.bench.cli import main
from magma_torch.bench.measure import Bench, QueryPath, load_config, reference_agreement, traffic_per_query
from magma_torch.bench.synthetic import event_rows, synthesize
from magma_torch.hardware import auto_scan_dtype, cpu_flags, cpu_model, scan_probe
from magma_torch.ingest import bulk
from magma_torch.ingest.fast_path import IngestError
from magma_torch.provenance import code_commit
from magma_torch.query.anchors import time_ranking
from magma_torch.query.kernel import resolve_kernel
from magma_torch.config.resolve import settings, typed
from magma_torch.config.schema import RetrievalConfig
from magma_torch.query.retriever import Retriever
from magma_torch.query.similarity import Similarity
from magma_torch.store.store import MemoryStore
from magma_torch.testing import with_package

CONTRACT = ("events", "edges", "ingest_events_per_s", "retrieval_qps", "retrieval_ms_p50", "retrieval_ms_p95",
            "reference_qps", "speedup_vs_reference", "agreement_with_reference", "peak_rss_mb", "gpu_peak_mb")
ROOT = Path(__file__).resolve().parents[1]


def config(**graph):
    cfg = load_config()
    cfg.graph = OmegaConf.merge(cfg.graph, graph)
    return cfg


SHAPES = {
    "default": {},
    # one entity per topic mentioned by every event of it: nodes of very high degree
    "hubs": dict(events_per_topic=400, entities_per_topic=1, mentions_per_event=1),
    # no links at all (every event its own stream): isolated anchors that expand to nothing
    "isolated": dict(streams=100000, semantic_candidates=0, causal_prob=0.0, mentions_per_event=0),
    # one stream, dense semantic links: many cycles
    "cycles": dict(streams=1, semantic_candidates=12, theta_sim=0.0, events_per_topic=100),
}


@pytest.mark.parametrize("kernel", ["torch", pytest.param("numba", marks=with_package("numba", extra="fast"))])
@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_batched_query_path_equals_reference(shape, kernel):
    cfg = config(**SHAPES[shape])
    cfg.queries.window_fraction, cfg.queries.empty_window_fraction = 0.5, 0.2   # empty windows included
    # float64 scores, like the reference: in float32, anchor_scale (1000) leaves ~1e-4 of resolution
    # and near-tied candidates of these dense two-topic graphs can swap at the beam cut.
    cfg.retrieval.score_dtype = "float64"
    cfg.retrieval.kernel = kernel
    bench = Bench.build(cfg, 600, 24, "cpu")
    path = QueryPath(bench.snap, bench.retriever, bench.device)
    q, windows = bench.questions, bench.windows
    sets = {}
    for batch in (24, 5, 1):
        for a in range(0, q.shape[0], batch):
            intents, anchors, res, order = path(q[a:a + batch], windows[a:a + batch])
            if batch == 24:   # other batch sizes are compared with this one below
                agreement, qps = reference_agreement(bench.store, bench.retriever, q, intents, anchors, res, 24)
                assert agreement == 1.0 and qps > 0
            # salience order: queries in order, scores descending within each
            qo, so = res.query[order], res.score[order]
            assert bool((qo[1:] >= qo[:-1]).all())
            assert bool((so[1:] <= so[:-1])[qo[1:] == qo[:-1]].all())
            for b in range(min(batch, q.shape[0] - a)):
                sets.setdefault(a + b, []).append(set(res.node[res.query == b].tolist()))
    assert all(s[0] == s[1] == s[2] for s in sets.values())   # a query's result is independent of its batch
    if kernel == "numba":   # the compiled twins end where the tensor programs do, anchors included
        tensor = copy.copy(bench.retriever)
        tensor.kernel = "torch"
        got, want = path(q, windows), QueryPath(bench.snap, tensor, bench.device)(q, windows)
        assert torch.equal(got[1].ids, want[1].ids) and torch.equal(got[1].scores, want[1].scores)
        assert [sets[i][0] for i in range(q.shape[0])] == [set(want[2].node[want[2].query == i].tolist())
                                                           for i in range(q.shape[0])]
    if shape == "isolated":   # a few temporal edges where two of the 600 events share a stream
        by_rel = bench.built["edges_by_relation"]
        assert by_rel["temporal"] < 20 and by_rel["semantic"] == by_rel["causal"] == by_rel["entity"] == 0


def test_time_ranking_matches_dense_scan_and_handles_empty_windows():
    g = torch.Generator().manual_seed(3)
    n = 500
    ts = torch.sort(torch.rand(n, generator=g, dtype=torch.float64) * 1000).values
    spans = torch.full((n, 2), math.nan, dtype=torch.float64)
    spans[::7, 0] = torch.rand(len(range(0, n, 7)), generator=g, dtype=torch.float64) * 1000
    spans[::7, 1] = spans[::7, 0] + 5
    emb = torch.nn.functional.normalize(torch.randn(n, 16, generator=g), dim=1)
    q = torch.nn.functional.normalize(torch.randn(6, 16, generator=g), dim=1)
    windows = [(100.0, 300.0), None, (-50.0, -10.0), (990.0, 2000.0), (0.0, 1000.0), (400.0, 401.0)]
    out = time_ranking(windows, ts, spans, Similarity(emb, None, q), top=8, mask_elements=n * 2)   # two questions per step
    for b, w in enumerate(windows):
        if w is None:
            assert out[b].tolist() == [-1] * 8
            continue
        inside = ((ts >= w[0]) & (ts <= w[1])) | ((spans[:, 0] <= w[1]) & (spans[:, 1] >= w[0]))
        sim = torch.where(inside, emb @ q[b], torch.tensor(-math.inf))
        want = [i for i in torch.argsort(sim, descending=True, stable=True).tolist() if inside[i]][:8]
        assert out[b].tolist() == want + [-1] * (8 - len(want))
    assert out[2].tolist() == [-1] * 8                       # an empty window ranks nothing


def test_bulk_ingest_rejects_bad_input_and_leaves_the_store_as_it_was():
    cfg = config()
    mem = synthesize(300, cfg.graph)
    store = MemoryStore(mem.embeddings.shape[1])
    bulk.add_entities(store, mem.entity_names, mem.entity_embeddings)
    ids = bulk.add_events(store, event_rows(mem, 0, 300), mem.embeddings, tokens=[[]] * 300)
    assert list(ids) == list(range(300))
    before = (len(store), store.graph.counts(), len(store.entities))
    with pytest.raises(IngestError, match="causal edge 1 .* earlier event to a later one"):
        bulk.add_links(store, semantic=mem.semantic, causal=(torch.tensor([0, 5]), torch.tensor([3, 2])))
    with pytest.raises(IngestError, match="entity edge 0: target id 999999 is not a stored node"):
        bulk.add_links(store, mentions=(torch.tensor([1]), torch.tensor([999999])))
    with pytest.raises(IngestError, match="event 0: timestamp .* goes backwards"):
        bulk.add_events(store, event_rows(mem, 0, 1), mem.embeddings[:1], tokens=[[]])
    with pytest.raises(IngestError, match=r"event embeddings: expected shape \(2, 384\)"):
        bulk.add_events(store, event_rows(mem, 0, 2), mem.embeddings[:1], tokens=[[]] * 2)
    with pytest.raises(IngestError, match="event embeddings: row 1 has L2 norm 2; the store holds L2-normalised"):
        bulk.add_events(store, event_rows(mem, 0, 2), mem.embeddings[:2] * torch.tensor([[1.0], [2.0]]),
                        tokens=[[]] * 2)
    nan_row = mem.embeddings[:2].clone()
    nan_row[1] = math.nan
    with pytest.raises(IngestError, match="event embeddings: row 1 has L2 norm nan"):
        bulk.add_events(store, event_rows(mem, 0, 2), nan_row, tokens=[[]] * 2)
    later = event_rows(mem, 0, 3)
    later = [replace(r, timestamp=t) for r, t in zip(later, (1e12, math.nan, 1e12 + 1), strict=True)]
    with pytest.raises(IngestError, match="event 1: timestamp nan is not a finite number"):
        bulk.add_events(store, later, mem.embeddings[:3], tokens=[[]] * 3)
    assert list(bulk.add_events(store, [], mem.embeddings[:0], tokens=[])) == []
    with pytest.raises(IngestError, match="entity 0 .* already taken"):
        bulk.add_entities(store, mem.entity_names[:1], mem.entity_embeddings[:1])
    assert (len(store), store.graph.counts(), len(store.entities)) == before
    bulk.add_links(store, semantic=mem.semantic, causal=mem.causal, mentions=mem.mentions)
    counts = store.graph.counts()
    assert counts["semantic"] == mem.semantic[0].numel() and counts["entity"] == mem.mentions[0].numel()


def test_magma_bench_writes_every_contract_key(tmp_path):
    out = tmp_path / "out.json"
    main(["--events", "1000", "--queries", "24", "--batch", "8", "--threads", "1", "--json", str(out)])
    record = json.loads(out.read_text())
    assert set(CONTRACT) <= set(record)
    assert record["events"] == 1000 and record["edges"] > 5000
    assert record["memory"] == "magma" and Path(record["bench_config"]).parts[-3:] == ("conf", "bench", "default.yaml")
    assert record["agreement_with_reference"] >= 0.9    # float32 scores: a near tie may swap (see above)
    assert record["gpu_peak_mb"] is None and record["peak_rss_mb"] > 0
    # RSS deltas: page-granular and, at 10^3 events, at the allocator's mercy (they can go below 0)
    assert math.isfinite(record["bytes_per_event"]) and record["retrieval_qps"] > 0
    # the machine, as far as it decides the figures: CPU model, half-precision flags, torch's kernels, load
    assert record["machine"].startswith(cpu_model()) and record["cpu_flags"] == cpu_flags()
    assert record["commit"] == code_commit()              # the code measured (None outside a checkout)
    assert record["torch_cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert record["scan_dtype"] == str(auto_scan_dtype(torch.device("cpu"))) and len(record["load_average_1_5_15"]) == 3
    assert record["scan_probe_ms"] == scan_probe()        # the times auto decided on
    # the beam search each batch size ran: compiled on CPU wherever numba is installed (retrieval.kernel auto)
    assert record["beam_kernel"] == dict.fromkeys(("batch", "batch_1"), resolve_kernel("auto"))
    # the question adapter's step, outside the timed path like the embedding (the bundled map is 384-d)
    assert record["question_adapter_ms_p50"] > 0


def test_magma_bench_prints_json_then_a_summary_and_takes_the_extra_query_counts(capsys):
    main(["--events", "600", "--queries", "16", "--batch", "8", "--threads", "1", "--single-queries", "3",
          "--reference-queries", "0"])
    out, err = capsys.readouterr()
    record = json.loads(out)                               # stdout is the JSON record alone
    assert record["single_queries"] == 3 and record["reference_queries"] == 0
    assert record["agreement_with_reference"] is None and record["reference_qps"] is None   # not measured
    assert "measure 600 events" in err                    # the progress bar, on stderr
    summary = err[err.index("magma-bench: 600 events"):].splitlines()
    assert summary[0].startswith(f"magma-bench: 600 events, {record['edges']:,} edges on cpu")
    assert f"p50 {record['retrieval_ms_p50']:.2f} ms" in summary[3] and "over 3 questions" in summary[3]
    assert "agreement – over 0 questions" in summary[4]
    main(["--events", "600", "--queries", "8", "--batch", "8", "--threads", "1", "--single-queries", "2",
          "--reference-queries", "2", "--no-progress"])
    out, err = capsys.readouterr()
    assert "measure" not in err and json.loads(out)["agreement_with_reference"] is not None
    with pytest.raises(SystemExit):
        main(["--events", "600", "--single-queries", "0"])
    assert "--single-queries must be at least 1" in capsys.readouterr().err


@pytest.mark.parametrize(("argv", "message"), [
    (["--events", "0"], "--events must be at least 1, got 0"),          # 0 is a value, not "the default"
    (["--queries", "0"], "--queries must be at least 1, got 0"),
    (["--batch", "0"], "--batch must be at least 1, got 0"),
    (["--threads", "-1"], "--threads must be at least 1, got -1"),
    (["--sweep", "--sweep-events", "1000", "0"], "--sweep-events must be at least 1 each, got [1000, 0]"),
    (["--device", "bogus"], "--device bogus:"),
    (["--config", "/nonexistent/bench.yaml"], "--config:"),
    (["--json", "{tmp}"], "is a folder"),
    (["--json", "/proc/no/such/x.json"], "cannot make its folder"),
    # before: a FileExistsError traceback from sweep's mkdir
    (["--sweep", "--out-dir", "/dev/null"], "--out-dir /dev/null: cannot make the folder: File exists"),
])
def test_a_bad_setting_fails_in_one_line_before_the_memory_is_built(argv, message, capsys, tmp_path, monkeypatch):
    monkeypatch.setattr(Bench, "build", lambda *a, **k: pytest.fail("built a memory before checking the settings"))
    with pytest.raises(SystemExit) as stop:
        main([a.format(tmp=tmp_path) for a in argv])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and message in err and "Traceback" not in err


@pytest.mark.parametrize(("setting", "message"), [
    ({"run": {"events": 0}}, "--config: run.events must be at least 1, got 0"),   # before: a traceback in synthesize
    ({"run": {"batch": "ten"}}, "--config: run.batch must be at least 1, got 'ten'"),
    ({"sweep": {"events": [1000, 0]}}, "--config: sweep.events must be at least 1 each, got [1000, 0]"),
    # before: a ConfigError traceback from MemoryStore, after the synthesis
    ({"run": {"vector_backend": "bogus"}},
     "--config: run.vector_backend: must be one of auto, faiss, torch, got 'bogus'"),
    # before: "range() arg 3 must not be zero" in ingest
    ({"run": {"ingest_batch": 0}}, "--config: run.ingest_batch must be at least 1, got 0"),
    # before: a shape mismatch in the intent head, after the whole ingest
    ({"graph": {"dim": 768}}, "--config: graph.dim must be the intent head's width 384, got 768"),
    # before: a ValueError once the memory was built, at the first query
    ({"retrieval": {"signal_weights": {"keyword": 1.0, "speaker": 0.5}}},
     "retrieval.signal_weights.keyword, retrieval.signal_weights.speaker above 0, but the synthetic questions"),
    # before: a ZeroDivisionError, a RuntimeError from torch, after the config was taken
    ({"graph": {"events_per_topic": 0}}, "--config: graph.events_per_topic: must be >= 1, got 0"),
    ({"graph": {"streams": 0}}, "--config: graph.streams: must be >= 1, got 0"),
    ({"graph": {"events_per_session": 0}}, "--config: graph.events_per_session: must be >= 1, got 0"),
    ({"queries": {"window_fraction": 2.0}}, "--config: queries.window_fraction: must be between 0 and 1, got 2.0"),
    ({"run": {"seed": "x"}}, "--config: run.seed must be at least 0, got 'x'"),
    # before: a bare RuntimeError after the whole timing run (-1), meaningless figures (0)
    ({"vector_rag_k": 0}, "--config: vector_rag_k must be at least 1, got 0"),
    # before: a ConfigError traceback after the synthesis and the ingest
    ({"retrieval": {"question_adapter": "/nonexistent/map.safetensors"}},
     "--config: retrieval.question_adapter: no file /nonexistent/map.safetensors"),
    # before: measured, with nothing retrieved and agreement 1.0 (empty == empty)
    ({"memory": "bm25"}, "memory bm25 leaves no retrieval signal on the synthetic questions"),
    # before: measured, timing magma's graph path under full_context's name
    ({"memory": "full_context"}, "memory full_context has retrieval.mode 'full_context', but magma-bench times"),
])
def test_a_bad_setting_of_the_config_file_fails_in_one_line_before_the_memory_is_built(
        setting, message, capsys, tmp_path, monkeypatch):
    monkeypatch.setattr(Bench, "build", lambda *a, **k: pytest.fail("built a memory before checking the settings"))
    (tmp_path / "bench").mkdir()
    mine = tmp_path / "bench" / "mine.yaml"     # its memory: conf/memory/<memory>.yaml beside its folder
    OmegaConf.save(OmegaConf.merge(OmegaConf.load(ROOT / "conf" / "bench" / "default.yaml"), setting), mine)
    (tmp_path / "memory").symlink_to(ROOT / "conf" / "memory")
    with pytest.raises(SystemExit) as stop:
        main(["--config", str(mine), "--sweep", "--no-progress"] if "sweep" in setting else ["--config", str(mine)])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and message in err and "Traceback" not in err


def test_gpu_script_runs_without_faiss_hydra_or_text_stack(tmp_path):
    """experiments/gpu_bench.py on CPU, with the packages a bare torch + PyG node lacks hidden."""
    hidden = ["faiss", "hydra", "wandb", "bm25s", "Stemmer", "dateparser", "sentence_transformers", "matplotlib",
              "vllm", "llama_cpp"]
    blocker = (
        "import sys, importlib.abc\n"
        "class Hide(importlib.abc.MetaPathFinder):\n"
        f"    def find_spec(self, name, path=None, target=None):\n"
        f"        if name.split('.')[0] in {hidden!r}: raise ImportError(f'hidden: {{name}}')\n"
        "sys.meta_path.insert(0, Hide())\n"
        "sys.argv = sys.argv[1:]\n"
        "import runpy; runpy.run_path(sys.argv[0], run_name='__main__')\n")
    out = tmp_path / "gpu.json"
    subprocess.run([sys.executable, "-c", blocker, str(ROOT / "experiments" / "gpu_bench.py"), "--device", "cpu",
                    "--events", "2000", "--queries", "64", "--batches", "1", "16", "64", "--json", str(out)],
                   check=True, cwd=tmp_path, timeout=600)
    record = json.loads(out.read_text())
    assert [r["batch"] for r in record["runs"]] == [1, 16, 64]
    assert record["runs"][-1]["agreement_with_reference"] == 1.0
    assert record["runs"][0]["vector_backend"] == "torch" and record["bytes_per_query"] > 0


def test_batches_past_the_matrix_limit_run_in_passes_with_the_same_result():
    cfg = config()
    cfg.retrieval.score_dtype = "float64"
    bench = Bench.build(cfg, 600, 24, "cpu")
    q, windows = bench.questions, bench.windows
    whole = QueryPath(bench.snap, bench.retriever, bench.device)(q, windows)
    cfg.retrieval.similarity.matrix_max_bytes = 600 * 8 * 7           # 7 questions' float64 rows per pass
    bench.retriever = Retriever(None, bench.retriever.intent, settings(typed(RetrievalConfig, cfg.retrieval, "retrieval")))
    assert [p.start for p in bench.retriever.passes(bench.snap, 24)] == [0, 7, 14, 21]
    parts = QueryPath(bench.snap, bench.retriever, bench.device)(q, windows)
    for f in fields(whole[1]):                                          # anchors
        assert torch.equal(getattr(whole[1], f.name), getattr(parts[1], f.name)), f.name
    for f in fields(whole[2]):        # beam results, row for row in salience order (rows are per depth)
        a, b = getattr(whole[2], f.name)[whole[3]], getattr(parts[2], f.name)[parts[3]]
        # passes of 7 take the scan's row dot products, the whole batch its matrix: equal to rounding
        assert torch.allclose(a, b, rtol=1e-12, atol=0) if f.name == "score" else torch.equal(a, b), f.name


def test_similarity_mode_names_the_way_a_batch_of_the_run_took():
    cfg = config()
    cfg.scan_dtype = "float16"             # a half-precision copy: fewer questions than matrix_min_batch scan it
    bench = Bench.build(cfg, 300, 3, "cpu")
    record = bench.measure(8, reference=False, embed_question=False)   # 3 questions: every batch holds 3
    # before: "matrix", the way of a batch of 8 that the run never had
    assert record["similarity_mode"] == {"batch": "scan", "batch_1": "scan"}


def test_traffic_counts_every_candidate_the_beam_gathers():
    bench = Bench.build(config(), 600, 16, "cpu")
    _, _, res, _ = QueryPath(bench.snap, bench.retriever, bench.device)(bench.questions, bench.windows)
    g = bench.snap.graph
    frontier = res.node[res.depth < bench.retriever.cfg.beam.max_depth]
    _, entities, _ = g.event_entity.gather(frontier)
    _, episodes, _ = g.event_episode.gather(frontier)
    direct = int(g.event_adj.degree(frontier).sum())
    via_entities = int(g.entity_event.degree(entities).sum()) + entities.numel()
    via_episodes = int(g.episode_event.degree(episodes).sum()) + episodes.numel()   # before: left out
    assert via_episodes > 0
    traffic = traffic_per_query(bench, 16)
    assert traffic["candidates_per_query"] * 16 == direct + via_entities + via_episodes


def test_batch1_latency_counts_questions_not_batches(tmp_path):
    out = tmp_path / "b1.json"
    subprocess.run([sys.executable, str(ROOT / "experiments" / "batch1_latency.py"), "--events", "300", "--queries",
                    "3", "--warmup", "1", "--batch", "4", "--threads", "1", "--json", str(out)],
                   check=True, cwd=tmp_path, timeout=600, capture_output=True)
    # 3 batches of 4: the configured way matches itself on 12 questions (before: 3, the batches)
    assert json.loads(out.read_text())["runs"]["as configured"]["same_node_sets_as_configured"] == 12


def test_scan_kernels_records_the_command_it_ran(tmp_path):
    out = tmp_path / "scan.json"
    script = ROOT / "experiments" / "scan_kernels.py"
    args = ["--events", "2000", "--threads", "1", "--batches", "1", "--repeats", "2", "--json", str(out)]
    subprocess.run([sys.executable, str(script), *args], check=True, cwd=tmp_path, timeout=600, capture_output=True)
    # before: "python experiments/scan_kernels.py --json <path>", its other arguments dropped
    assert json.loads(out.read_text())["command"] == " ".join(["python", str(script), *args])
