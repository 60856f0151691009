"""magma-explain: intent, anchors with per-signal RRF ranks, beam paths and context, as terminal
text, a self-contained HTML page whose event text is data, and a PNG rendered by headless chromium."""
import hashlib
import subprocess
import sys
import xml.etree.ElementTree as ET
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from magma_torch import MagmaMemory
from magma_torch.config import load_group
from magma_torch.config.resolve import settings
from magma_torch.config.schema import SIGNALS, RetrievalConfig, SignalTopK, SignalWeights
from magma_torch.eval.datasets import load_demo
from magma_torch.eval.runner import records
from magma_torch.explain import explain
from magma_torch.explain import screenshot as screenshot_module
from magma_torch.explain.cli import main
from magma_torch.explain.graph_svg import ANCHOR_FILL, RELATION_COLOURS, graph_svg
from magma_torch.explain.html_view import END_RULE, render_html
from magma_torch.explain.printable import printable
from magma_torch.explain.screenshot import BOTTOM_PX, ScreenshotError, screenshot
from magma_torch.explain.subgraph import entity_names
from magma_torch.explain.terminal import format_text
from magma_torch.ingest.consolidator import Unasked
from magma_torch.query.intent import INTENTS
from magma_torch.query.retriever import Anchor, PathEdge, RetrievedNode, Retrieval
from magma_torch.store.durable import WAL, ReadOnlyError
from magma_torch.testing import abandon
from magma_torch.testing import with_browser
from scripted_llm import ScriptedLLM

HOSTILE = "Tomás pasted <script>alert('x')</script> into the canoe log \x1b[31mred\x1b[0m\x07 \u202eevil"
QUESTION = "What did Tomás paste into the canoe log?"


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """The first demo conversation plus an event with markup and control characters, saved."""
    path = tmp_path_factory.mktemp("explain") / "mem"
    with MagmaMemory() as mem:
        mem.add_many(records(load_demo()[0]))
        mem.add(HOSTILE, "2023-06-01 10:00", speaker="Tomás <b>", source_id="X:1")
        mem.consolidate()
        mem.save(path)
        r = mem.retrieve(QUESTION)
        with MagmaMemory(embedder=mem.embedder) as empty:
            empty.save(path.parent / "empty")
    return path, r


def magma_explain(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "magma_torch.explain.cli", *map(str, args)],
                          capture_output=True, text=True, timeout=300, cwd=cwd)


def digest(folder: Path) -> dict:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def explained(saved, tmp_path_factory):
    """One magma-explain run with --html: (completed process, html text), and the save folder untouched."""
    path, _ = saved
    html = tmp_path_factory.mktemp("html") / "view.html"
    before = digest(path)
    done = magma_explain(path, QUESTION, "--html", html)
    assert done.returncode == 0, done.stderr
    assert digest(path) == before, "explaining must not write the saved memory"
    return done, html.read_text(encoding="utf-8")


def test_retrieval_carries_intent_probabilities(saved):
    _, r = saved
    assert set(r.intent_probs) == set(INTENTS)
    assert sum(r.intent_probs.values()) == pytest.approx(1.0, abs=1e-5)
    assert max(r.intent_probs, key=r.intent_probs.get) == r.intent


def test_text_names_intent_anchor_ranks_paths_and_context(saved, explained):
    _, r = saved
    out = explained[0].stdout
    assert f"intent: {r.intent}" in out and all(f"{k} {v:.2f}" in out for k, v in r.intent_probs.items())
    header = next(line for line in out.splitlines() if line.strip().startswith("#   event"))
    fused = settings(load_group("memory", "magma")).retrieval.active_signals
    assert all(s in header for s in fused) and not any(s in header for s in set(SIGNALS) - set(fused))
    best = r.anchors[0]
    first = next(line for line in out.splitlines() if line.startswith("  1 "))
    assert f"{best.rrf:.4f}" in first
    assert first.split()[3:3 + len(fused)] == [str(best.ranks.get(s, "-")) for s in fused]
    assert r.paths, "the demo memory's beam search expands its anchors"
    assert "-->" in out and "edge" in out and "from " in out
    assert f"context ({r.context_tokens} tokens):" in out
    # event text is data: no escape sequence or bidi override reaches the terminal
    assert "\x1b" not in out and "\x07" not in out and "\u202e" not in out
    assert "\\x1b[31mred" in out and "\\u202eevil" in out


def test_html_is_self_contained_and_shows_event_markup_as_text(explained):
    page = explained[1]
    assert "<script" not in page.lower(), "no script at all: neither ours nor one from event text"
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;" in page
    assert "Tomás &lt;b&gt;" in page and "Tomás <b>" not in page
    assert "\x1b" not in page and "\\x1b[31mred" in page
    assert "default-src 'none'" in page                      # the page may fetch nothing
    assert "src=" not in page and "url(http" not in page and "<link" not in page
    assert page.count("<circle") >= 10 and "marker-end" in page


def rgb(colour: str) -> tuple[int, int, int]:
    return tuple(int(colour[i:i + 2], 16) for i in (1, 3, 5))


@with_browser()
def test_png_is_the_whole_rendered_page(saved, tmp_path):
    path, _ = saved
    png, html = tmp_path / "view.png", tmp_path / "view.html"
    done = magma_explain(path, QUESTION, "--png", png, "--html", html)
    assert done.returncode == 0, done.stderr
    with Image.open(png) as img:
        assert img.format == "PNG"
        shot = img.convert("RGB")
    w, h = shot.size
    assert w >= 1000 and h >= 600
    colours = shot.getcolors(maxcolors=w * h)
    assert len(colours) > 200, "anti-aliased text and a coloured graph have many colours"
    white = max(count for count, c in colours if c == (255, 255, 255))
    assert white < 0.95 * w * h, "not a blank page"
    assert sum(count for count, c in colours if c == rgb(ANCHOR_FILL)) > 2000, "anchor nodes of the graph are drawn"
    # the whole page: its closing rule, below the context block, ends the picture
    rule = [y for y in range(h) if shot.getpixel((40, y)) == rgb(END_RULE)]
    assert rule and rule[-1] == h - 1 - BOTTOM_PX
    assert shot.getpixel((40, rule[0] - 20)) == rgb("#f6f7f9"), "the context block sits just above the rule"
    # a first window far too short grows until the page ends: the same picture
    again = tmp_path / "short.png"
    screenshot(html, again, w, 200)
    with Image.open(again) as img:
        assert img.size == (w, h)


@with_browser()
def test_the_page_fits_its_window(saved, tmp_path):
    # the anchor table (a column per fused signal, text up to 460 px) ran past the 1100 px window, cut in the PNG
    _, r = saved
    page = render_html(explain(r, 15, 10))
    html, png = tmp_path / "view.html", tmp_path / "view.png"
    html.write_text(page.html, encoding="utf-8")
    screenshot(html, png, page.width, page.height)
    with Image.open(png) as img:
        ink = np.flatnonzero((np.abs(np.asarray(img.convert("RGB"), dtype=int) - 255).sum(axis=2) > 30).any(axis=0))
    assert ink.max() < page.width - 20, "the page's right margin is blank"


def test_svg_figure_stands_alone_and_names_entities_as_written(saved, tmp_path):
    """--svg: a complete SVG file (XML, its own legend, no links into a page); entity hops are named
    as the memory's text wrote the entity, not by its key."""
    path, _ = saved
    svg = tmp_path / "graph.svg"
    done = magma_explain(path, QUESTION, "--svg", svg)
    assert done.returncode == 0, done.stderr
    text = svg.read_text(encoding="utf-8")
    root = ET.fromstring(text.split("\n", 1)[1])             # after the XML declaration: well-formed
    assert text.startswith('<?xml version="1.0"') and root.tag.endswith("svg") and root.get("viewBox")
    assert "<a " not in text and "<script" not in text.lower() and "salience rank" in text
    assert text.count("<circle") >= 10
    with MagmaMemory.load(path) as mem:
        key = next(k for k, s in zip(mem.store.entities.names, mem.store.entities.surfaces, strict=True)
                   if s.lower() != k)
        surface = mem.store.entities.surfaces[mem.store.entity_id(key)]
        r = Retrieval("q", "ENTITY", None, [Anchor(0, 0.03, {"vector": 1})], [_node(0), _node(1)],
                      [PathEdge(0, 1, f"entity:{key}", 5.0)], "ctx", 1, [0, 1], 1.0)
        names = entity_names(mem.store, r)
    assert names == {key: surface}
    ex = explain(r, top=2, expansions=1, entity_names=names)
    text, page = format_text(ex), render_html(ex).html
    assert f"via entity {surface} from D:0" in text and f"--entity [{surface}]--> D:1" in text
    assert f">{surface}</text>" in graph_svg(ex).svg and f"entity:{key}" not in page


def test_the_anchor_lists_say_the_order_is_the_beams_not_the_fused_scores():
    # the re-ranker orders them (0.0617 was listed above 0.0623): before, the views called it RRF order
    r = Retrieval("q", "ENTITY", None, [Anchor(1, 0.02, {"vector": 2}), Anchor(0, 0.03, {"vector": 1})],
                  [_node(1), _node(0)], [], "ctx", 1, [1, 0], 1.0)
    ex = explain(r, top=2, expansions=0)
    assert "in the order handed to the beam search" in format_text(ex)
    assert "in the order handed to the beam search" in render_html(ex).html


def test_legend_lists_the_drawn_edge_types_only():
    paths = [PathEdge(0, 2, "entity:ana", 5.0), PathEdge(2, 3, "temporal", 4.0)]
    r = Retrieval("q", "ENTITY", None, [Anchor(0, 0.03, {"vector": 1})], [_node(i) for i in range(4)], paths,
                  "ctx", 1, [0, 2], 1.0)
    ex = explain(r, top=1, expansions=2)
    page, figure = render_html(ex).html, graph_svg(ex, standalone=True).svg
    for drawn in (page, figure):
        assert [k for k in RELATION_COLOURS if f"{k} edge<" in drawn] == ["temporal", "entity"]
    alone = explain(Retrieval("q", "WHY", None, [Anchor(0, 0.03, {"vector": 1})], [_node(0)], [], "ctx", 1, [0],
                              1.0), top=1, expansions=0)
    assert not any(f"{k} edge<" in render_html(alone).html for k in RELATION_COLOURS)


def test_printable_escapes_active_characters_only():
    assert printable("a\x1b[0mb\x00\u2028\u202e\u2066") == "a\\x1b[0mb\\x00\\u2028\\u202e\\u2066"
    assert printable("café 😀 ok\n") == "café 😀 ok\\x0a"
    assert printable("line\nnext\t", keep_newlines=True) == "line\nnext\\x09"
    assert printable("\ud800") == "\\ud800"
    assert printable("a\u061cb\ufdd0\uffff\U0010fffe") == "a\\u061cb\\ufdd0\\uffff\\U0010fffe"
    assert printable("\ufdcf\ufdf0\ufffd") == "\ufdcf\ufdf0\ufffd"       # ordinary characters beside them


def _node(i):
    return RetrievedNode(i, f"event {i}", datetime(2023, 1, 1 + i, tzinfo=timezone.utc), [f"D:{i}"], 10.0 - i,
                         None, 3)


def test_explain_keeps_paths_back_to_their_anchor():
    # anchors 0 and 1; 2 <- 0 (entity), 3 <- 2 (temporal), 4 <- 1 (semantic); salience = id order
    paths = [PathEdge(0, 2, "entity:ana", 5.0), PathEdge(2, 3, "temporal", 4.0), PathEdge(1, 4, "semantic", 3.0)]
    anchors = [Anchor(0, 0.03, {"vector": 1}), Anchor(1, 0.02, {"keyword": 1, "time": 2})]
    r = Retrieval("q", "ENTITY", None, anchors, [_node(i) for i in range(5)], paths, "ctx", 1, [0, 2], 1.0)
    ex = explain(r, top=1, expansions=1)
    # the top event (0) and the best expansion (2) with its path back to anchor 0
    assert [n.node.id for n in ex.nodes] == [0, 2]
    assert [(n.depth, n.anchor_rank, n.in_context) for n in ex.nodes] == [(0, 1, True), (1, None, True)]
    assert ex.edges == [paths[0]] and ex.hidden_nodes == 3
    deep = explain(r, top=1, expansions=2)
    assert [n.node.id for n in deep.nodes] == [0, 2, 3]
    assert [n.depth for n in deep.nodes] == [0, 1, 2] and deep.nodes[2].in_context is False
    wide = explain(r, top=2, expansions=3)
    assert [n.node.id for n in wide.nodes] == [0, 1, 2, 3, 4] and len(wide.anchors) == 2
    with pytest.raises(ValueError, match="top"):
        explain(r, top=0, expansions=1)


def test_a_time_filtered_retrieval_has_paths_among_its_own_events_and_explains():
    """magma_paper leaves out the expansions outside the question's window; an expansion reached
    from one of them kept a path naming an event the retrieval does not hold, and explaining failed."""
    topics = ["hiking trip to the mountains", "dog at the vet", "painting class", "new job at the bakery"]
    start = datetime(2023, 4, 20, 10)
    recs = [{"text": f"Yesterday I talked about the {topics[k % 4]} again, it was fun.",
             "timestamp": start + timedelta(hours=17 * k), "speaker": ("Ann", "Bob")[k % 2]} for k in range(80)]
    with MagmaMemory("magma_paper") as mem:
        mem.add_many(recs)
        mem.consolidate()
        asked = [mem.retrieve(f"What did Ann say about the {t} in May 2023?", "2023-06-10 10:00") for t in topics]
        outside = mem.retrieve("What did Ann say in 2019?", "2023-06-10 10:00")
    assert any(r.paths for r in asked)
    for r in asked:
        held = {n.id for n in r.nodes}
        assert all(p.src in held and p.dst in held for p in r.paths)
        assert r.question in format_text(explain(r, 15, 10))
    assert "anchors: none (no event falls in the question's time window)" in format_text(explain(outside, 15, 10))


def test_a_memory_an_llm_consolidated_is_explained_without_an_llm_or_consolidating(tmp_path):
    cfg = load_group("memory", "magma")
    cfg.slow_path.background = False
    with MagmaMemory(cfg, "llm", llm=ScriptedLLM()) as mem:
        mem.add_many([{"text": "I moved to Paris last spring.", "timestamp": "2023-05-01 10:00", "speaker": "Ann"},
                      {"text": "Paris must be lovely.", "timestamp": "2023-05-02 10:00", "speaker": "Bob"}])
        mem.consolidate()
        mem.add("We should visit her.", "2023-05-03 10:00", speaker="Bob")     # left in the queue
        mem.save(tmp_path / "mem")
    done = magma_explain(tmp_path / "mem", "Where did Ann move?")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"{tmp_path / 'mem'}: 3 events, 1 not consolidated yet")
    assert "I moved to Paris" in done.stdout
    with MagmaMemory.load(tmp_path / "mem", read_only=True) as view:
        # no LLM: a stand-in that keeps the consolidator's state and is never asked
        assert view.llm is None and isinstance(view.consolidator, Unasked)
        assert len(view.store) == 3 and view.worker.pending() == 1
        with pytest.raises(ReadOnlyError, match="read-only"):
            view.add("I moved again.", "2023-06-01 10:00", speaker="Ann")


def test_only_the_memorys_fused_signals_are_reported():
    cfg = RetrievalConfig(signal_weights=SignalWeights(**{**{s: 1.0 for s in SIGNALS}, "time": 0.0}),
                          signal_top_k=SignalTopK(**{**{s: 20 for s in SIGNALS}, "keyword_context": 0}))
    assert cfg.active_signals == ("vector", "keyword", "vector_context", "episode", "speaker", "entity")
    anchors = [Anchor(0, 0.03, {"vector": 2, "keyword": 1})]
    r = Retrieval("q", "WHY", None, anchors, [_node(0)], [], "ctx", 1, [0], 1.0)
    text = format_text(explain(r, top=5, expansions=0, signals=("vector", "keyword")))
    lines = text.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("anchors:"))
    header, row = lines[at + 1].split(), lines[at + 2].split()
    assert header == ["#", "event", "fused", "vector", "keyword", "text"]
    assert row[:5] == ["1", "D:0", "0.0300", "2", "1"]
    assert "paths: none (the beam search added no event to the anchors)" in text


@pytest.mark.parametrize("args, message", [
    (("{missing}", QUESTION), "no such save folder"),
    (("{corrupt}", QUESTION), "manifest says"),
    (("{empty}", QUESTION), "the memory holds no events"),
    (("{saved}", "   "), "the question is empty"),
    (("{saved}", QUESTION, "--date", "not a date"), "--date: cannot parse timestamp"),
    (("{saved}", QUESTION, "--top", "0"), "--top must be at least 1"),
    # before: the memory's QueryError escaped main as a traceback (exit 1) after loading the memory
    (("{saved}", QUESTION, "--budget-tokens", "0"), "--budget-tokens must be at least 1, got 0"),
    (("{saved}", QUESTION, "--budget-tokens", "-5"), "--budget-tokens must be at least 1, got -5"),
    # before: --png naming a folder, or a path below a file, ended in an OSError's traceback (exit 1)
    (("{saved}", QUESTION, "--png", "{folder}"), "cannot write {folder}: Is a directory"),
    (("{saved}", QUESTION, "--png", "{file}/view.png"), "cannot write {file}/view.png: "),
])
def test_bad_input_is_one_line_and_exit_2(saved, tmp_path, args, message, capsys):
    corrupt = tmp_path / "corrupt"
    corrupt.mkdir()
    for f in saved[0].iterdir():
        data = f.read_bytes()
        (corrupt / f.name).write_bytes(data[: len(data) // 2] if f.suffix == ".safetensors" else data)
    (tmp_path / "folder").mkdir()
    (tmp_path / "file").write_text("not a folder")
    where = {"missing": tmp_path / "nothing-here", "corrupt": corrupt, "saved": saved[0],
             "empty": saved[0].parent / "empty", "folder": tmp_path / "folder", "file": tmp_path / "file"}
    with pytest.raises(SystemExit) as exit_:
        main([a.format(**where) for a in args])
    out, err = capsys.readouterr()
    errors = [line for line in err.splitlines() if line.startswith("magma-explain: error:")]
    assert exit_.value.code == 2 and len(errors) == 1 and message.format(**where) in errors[0], err
    assert out == ""


def test_screenshot_without_a_browser_says_so(tmp_path, monkeypatch):
    monkeypatch.setattr(screenshot_module.shutil, "which", lambda name: None)
    page = tmp_path / "p.html"
    page.write_text("<p>x</p>")
    with pytest.raises(ScreenshotError, match="apt-get install chromium"):
        screenshot(page, tmp_path / "p.png", 800, 600)
    assert not (tmp_path / "p.png").exists()


@pytest.mark.parametrize("first", [2_000, 40_000])
def test_a_page_taller_than_the_cap_is_refused_whatever_the_first_window(tmp_path, monkeypatch, first):
    """Shots that never hold the closing rule: every window is at most MAX_HEIGHT_PX, so a first
    window above it is not rendered where a smaller one is refused, and the advice names every
    option that makes a page tall."""
    heights = []

    def shoot(browser, html, png, width, height):
        heights.append(height)
        Image.new("RGB", (width, 64), "white").save(png)

    monkeypatch.setattr(screenshot_module, "find_browser", lambda: "chromium")
    monkeypatch.setattr(screenshot_module, "_shoot", shoot)
    with pytest.raises(ScreenshotError, match="--budget-tokens"):
        screenshot(tmp_path / "p.html", tmp_path / "p.png", 800, first)
    assert max(heights) == screenshot_module.MAX_HEIGHT_PX and not (tmp_path / "p.png").exists()


def test_explains_a_namespace_folder_its_writer_holds_from_checkpoint_and_log(tmp_path, capsys):
    """magma-explain on store_dir/<namespace>: the event only in the write-ahead log is explained,
    unconsolidated; the folder is left byte for byte, and its writer keeps its lock and goes on."""
    cfg = load_group("memory", "magma")
    cfg.slow_path.background = False
    writer = MagmaMemory(cfg, store_dir=tmp_path, durable=True, namespace="tenant")
    writer.add_many(records(load_demo()[0]))
    writer.consolidate()   # checkpointed
    writer.add(HOSTILE, "2023-06-01 10:00", speaker="Tomás <b>", source_id="X:1")   # only in the log
    folder = tmp_path / "tenant"
    before = digest(folder)
    main([str(folder), QUESTION])
    out, _ = capsys.readouterr()
    assert f"{folder}: read-only, checkpoint + write-ahead log; {len(writer.store)} events, 1 not consolidated" in out
    assert "\\u202eevil" in out   # the logged event, retrieved and shown as data
    # its checkpoint folder is a save without the logged event: it was explained as the memory
    with pytest.raises(SystemExit) as exit_:
        main([str(folder / "checkpoint"), QUESTION])
    out, err = capsys.readouterr()
    assert exit_.value.code == 2 and out == "" and err.count("\n") == 1
    assert f"pass the namespace folder {folder.resolve()}" in err, err
    assert digest(folder) == before
    writer.consolidate()   # none left waiting: said so, not "0 not consolidated yet"
    main([str(folder), QUESTION])
    out, _ = capsys.readouterr()
    assert out.startswith(f"{folder}: read-only, checkpoint + write-ahead log; {len(writer.store)} events, "
                          "all consolidated\n") and "not consolidated" not in out
    writer.add("Tomás cleaned the canoe.", "2023-06-02 10:00", source_id="X:2")   # its lock and log still work
    abandon(writer)
    log = folder / WAL
    log.write_bytes(log.read_bytes().replace(b"canoe", b"canoE", 1) + log.read_bytes())
    with pytest.raises(SystemExit) as exit_:
        main([str(folder), QUESTION])
    out, err = capsys.readouterr()
    assert exit_.value.code == 2 and out == "" and err.count("\n") == 1
    assert err.startswith(f"magma-explain: error: cannot load memory: {log}: line 1 is damaged"), err


def test_anchors_the_beam_did_not_keep_are_not_listed_and_the_views_explain():
    # beam.max_nodes below anchor_k: the beam keeps that many anchors, the retrieval listed all of them,
    # and magma-explain's views looked the others up among the retrieved events (KeyError)
    cfg = load_group("memory", "magma")
    cfg.retrieval.beam.max_nodes = 2
    with MagmaMemory(cfg, consolidation="none") as mem:
        mem.add_many(records(load_demo()[0])[:12])
        r = mem.retrieve("What did Melanie paint?")
    held = {n.id for n in r.nodes}
    assert len(r.anchors) == 2 and {a.id for a in r.anchors} <= held
    ex = explain(r, 15, 10)
    assert "anchor #2" in format_text(ex) and "<h2>Anchors" in render_html(ex).html


def test_an_event_expanded_from_outside_the_time_window_is_not_called_full_context():
    # magma_paper-style time filter: B1 is reached from A2, which lies outside June 2023 and is left out,
    # so B1 keeps no path; it was labelled "listed without ranking (full-context memory)"
    cfg = {"fast_path": {"theta_sim": 0.45},
           "retrieval": {"time_filter": True, "anchor_k": 1, "rerank": {"pool": 0}, "beam": {"drop_threshold": -1.0},
                         "signal_weights": {"vector": 1.0, "keyword": 0.0, "time": 0.0, "vector_context": 0.0,
                                            "keyword_context": 0.0, "speaker": 0.0, "entity": 0.0, "episode": 0.0}}}
    with MagmaMemory(config=cfg, consolidation="none") as mem:
        mem.add_many([
            {"text": "I watched a film at the cinema.", "timestamp": "2023-06-05 10:00", "speaker": "Ann",
             "stream": "a", "source_id": "A1"},
            {"text": "I cooked a big pasta dinner.", "timestamp": "2023-06-20 10:00", "speaker": "Bob",
             "stream": "b", "source_id": "B1"},
            {"text": "Then I cooked pasta for dinner.", "timestamp": "2023-07-10 10:00", "speaker": "Ann",
             "stream": "a", "source_id": "A2"}])
        r = mem.retrieve("What film did Ann watch at the cinema in June 2023?")
    held = {s for n in r.nodes for s in n.source_ids}
    assert held == {"A1", "B1"} and not any(p.dst == n.id for p in r.paths for n in r.nodes if "B1" in n.source_ids)
    out = format_text(explain(r, 15, 10))
    line = next(x for x in out.splitlines() if " B1 " in x)
    assert "outside the question's time window" in line and "full-context" not in out


def test_an_update_is_explained_whether_or_not_its_earlier_event_is_shown():
    # anchor D:1 is superseded by D:0, which supersession pulled in; with --top 1 only D:0 is shown, and its
    # reason was looked for among the shown events: "outside the question's time window", with no window
    nodes = [_node(0), replace(_node(1), valid_to=_node(0).timestamp, superseded_by=0)]
    r = Retrieval("q", "FACT", None, [Anchor(1, 0.03, {"vector": 1})], nodes, [], "ctx", 1, [0, 1], 1.0)
    for top in (1, 2):
        line = format_text(explain(r, top=top, expansions=0)).splitlines()
        assert "the update of D:1 (supersession)" in next(x for x in line if x.startswith("  1 ") and "D:0" in x)
    # the chain 1 -> 7 -> 0, where 7 is not retrieved and not known: still no time filter
    chain = [_node(0), replace(_node(1), valid_to=_node(0).timestamp, superseded_by=7)]
    text = format_text(explain(replace(r, nodes=chain), top=2, expansions=0))
    assert "the current version of a superseded event (supersession)" in text and "time filter" not in text
    assert "2023-01-01 00:00 (E7)" in text


def test_the_cli_follows_a_chain_of_updates_and_names_them_by_source_id(tmp_path, capsys):
    # Boston -> Denver -> Seattle; the beam keeps the anchor alone and supersession pulls in Seattle (S4).
    # Before: S4 was "expanded from an event outside the question's time window (time filter)" (the question
    # has none) and Boston's valid-until named Denver E2, where the context says (S2)
    cfg = {"slow_path": {"background": False}, "retrieval": {"anchor_k": 1, "rerank": {"pool": 0},
                                                             "beam": {"max_nodes": 1}}}
    turns = [("Ann", "I live in Boston with my two cats.", "2023-01-02 10:00"),
             ("Ben", "Boston is lovely in the fall.", "2023-01-02 10:01"),
             ("Ann", "We just moved to Denver last month, the mountains are amazing!", "2023-03-02 10:00"),
             ("Ben", "Denver sounds great, enjoy the hiking.", "2023-03-02 10:01"),
             ("Ann", "We moved to Seattle this week, it rains a lot.", "2023-06-02 10:00")]
    with MagmaMemory(cfg) as mem:
        mem.add_many([{"text": t, "timestamp": ts, "speaker": sp, "source_id": f"S{i}", "stream": "s"}
                      for i, (sp, t, ts) in enumerate(turns)])
        mem.consolidate()
        mem.save(tmp_path / "mem")
    main([str(tmp_path / "mem"), "Does Ann have two cats in Boston?", "--date", "2023-07-01", "--html",
          str(tmp_path / "view.html")])
    out, _ = capsys.readouterr()
    assert "[superseded 2023-03-02 by (S2)]" in out
    rows = {x.split()[1]: x for x in out.splitlines() if x.split()[2:3] and x.split()[2].startswith("2023-")}
    assert {"S0", "S4"} <= set(rows) and "S2" not in rows
    assert "the update of S0 via S2 (supersession)" in rows["S4"] and "time filter" not in out
    assert "2023-03-02 10:00 (S2)" in rows["S0"]
    page = (tmp_path / "view.html").read_text(encoding="utf-8")   # its event table has the column too
    assert "<td>2023-03-02 10:00 (S2)</td>" in page and "the update of S0 via S2 (supersession)" in page


def test_a_memory_that_ranks_nothing_shows_its_contexts_events_first():
    # full context lists every event oldest first and its context keeps the newest: the views showed the
    # oldest, cut from the context, "by salience"
    r = Retrieval("q", "FACT", None, [], [_node(i) for i in range(5)], [], "ctx", 1, [3, 4], 1.0)
    ex = explain(r, top=2, expansions=0)
    assert [(n.node.id, n.rank, n.in_context) for n in ex.nodes] == [(3, 1, True), (4, 2, True)]
    assert "retrieved events, the context's first (this memory does not rank events)" in format_text(ex)
    assert "<h2>Retrieved events, the context's first" in render_html(ex).html
    ranked = explain(replace(r, anchors=[Anchor(0, 0.03, {"vector": 1})]), top=2, expansions=0)
    assert [n.node.id for n in ranked.nodes] == [0, 1] and "retrieved events, by salience" in format_text(ranked)
