"""experiments/llm_graph_audit.py: an LLM-built graph replayed from a run folder's consolidation cache, no model."""
from __future__ import annotations

from pathlib import Path

import pytest
from hydra import compose, initialize_config_module
from omegaconf import OmegaConf
from test_llm_consolidator import FakeLLM

from magma_torch import MagmaMemory
from magma_torch.eval.datasets import load_demo
from magma_torch.eval.runner import records
from magma_torch.text.embedder import Embedder
from magma_torch.testing import experiment_script

ROOT = Path(__file__).resolve().parents[1]
audit_module = experiment_script(ROOT / "experiments" / "llm_graph_audit.py")

FRAME = "Slowly! I finally finished the strongback frame in my garage last Friday, so now I can start putting the cedar strips on."
WARPED = "Yeah, the first one was warped because I built it on an uneven floor. That's why I had to start over."


def script(refs):
    """One causal link (the warped frame -> starting over), one below the confidence floor (the frame's
    oldest neighbour -> the frame), 'garage' where it occurs, a name the text lacks."""
    r = {t: k for k, t in refs.items()}
    causal = [{"cause": r[FRAME], "effect": "n0", "confidence": 0.8}] if refs["n0"] == WARPED and FRAME in r else []
    if refs["n0"] == FRAME and "n1" in refs:
        causal.append({"cause": "n1", "effect": "n0", "confidence": 0.1, "words": "finally"})
    ents = [{"name": "garage", "kind": "place"}] if "garage" in refs["n0"] else []
    return {"causal": causal, "entities": ents + [{"name": "unicorn", "kind": "object"}], "supersedes": []}


@pytest.fixture
def folder(tmp_path):
    """A run folder as magma-run leaves it: config.yaml and the consolidation cache of its first demo memory."""
    with initialize_config_module("magma_torch.conf", version_base=None):
        cfg = compose("config", overrides=[
            "dataset=demo", "+dataset.sample_ids=[demo-1]", "consolidation=llm", "llm=llamacpp",
            "consolidation.cache=${out_dir}/consolidation_cache.jsonl", "memory.slow_path.background=false",
            "memory.slow_path.batch_size=8", f"out_dir={tmp_path}"])
    OmegaConf.save(cfg, tmp_path / "config.yaml")
    sample = load_demo()[0]
    llm = FakeLLM(script)
    llm.name = cfg.llm.name      # the cache keys carry the run's model name
    with MagmaMemory(cfg.memory, cfg.consolidation, namespace=sample.sample_id, embedder=Embedder(device="cpu"),
                     llm=llm) as mem:
        mem.add_many(records(sample))
        mem.consolidate()
    return tmp_path, len(sample.turns), sum("garage" in t.text for t in sample.turns)


def test_the_audit_replays_the_graph_from_the_cache_alone(folder):
    path, n, garage = folder
    text = audit_module.audit(path, sample=5, seed=0, data=None)
    assert f"{n} of {n} events replayed from the cache" in text
    assert "| causal links | 2 | 1 (" in text
    assert f"| event–entity edges | {n + garage} mentions | {garage} |" in text   # 'unicorn' in none
    assert "| entity nodes |  | 1 |" in text                                      # garage
    assert f"| entity: not in the event's text | {n} |" in text       # 'unicorn', rejected each time
    assert f"   - cause: Tomás: {FRAME}" in text and f"   - effect: Tomás: {WARPED}" in text
    assert f"{n} generations" in text


def test_a_cache_cut_short_replays_only_what_it_holds(folder):
    path, n, _ = folder
    cache = path / "consolidation_cache.jsonl"
    lines = cache.read_text().splitlines(keepends=True)
    cache.write_text("".join(lines[:8]))      # the first batch of 8: a run stopped while consolidating
    text = audit_module.audit(path, sample=5, seed=0, data=None)
    assert f"8 of {n} events replayed from the cache" in text
    assert "| entity: not in the event's text | 8 |" in text


def test_reason_classes_drop_the_particulars():
    assert audit_module.reason_class("rejected entity 'melanie': a speaker (an event attribute, not an entity)") \
        == "entity: a speaker (an event attribute, not an entity)"
    assert audit_module.reason_class("rejected causal link 12->3: below 0.5") == "causal: below N"
    assert audit_module.reason_class("rejected causal link 'n9'->'n0': 'n9' is not a node of this prompt") \
        == audit_module.reason_class("rejected causal link <words not in the event>->'n0': <words not in the event> "
                                     "is not a node of this prompt") == "causal: X is not a node of this prompt"


def test_against_puts_the_heuristic_graph_of_the_same_turns_beside_it(folder, tmp_path_factory):
    path, n, garage = folder
    other = tmp_path_factory.mktemp("heuristic")
    cfg = OmegaConf.load(path / "config.yaml")
    with initialize_config_module("magma_torch.conf", version_base=None):
        cfg.consolidation = compose("config", overrides=["consolidation=heuristic"]).consolidation
    OmegaConf.save(cfg, other / "config.yaml")
    sample = load_demo()[0]
    h = audit_module.built_graph(cfg.memory, OmegaConf.to_container(cfg.consolidation, resolve=True), sample,
                                 Embedder(device="cpu"))
    assert h.mentions > garage and h.entities > 1          # spaCy finds more than the scripted model
    text = audit_module.audit(path, sample=5, seed=0, data=None, against=other)
    assert f"| | proposed | kept | `{other.name}` (HeuristicConsolidator) |" in text
    assert f"| event–entity edges | {n + garage} mentions | {garage} | {h.mentions} |" in text
    assert f"| causal links | 2 | 1 ({1000 / n:.1f} per 1,000 turns) | {len(h.causal)} (" in text
    with pytest.raises(SystemExit, match="needs a model"):
        audit_module.audit(path, sample=5, seed=0, data=None, against=path)


def test_rejected_proposals_are_sampled_with_the_turns_their_prompt_showed(folder):
    path, _, _ = folder
    text = audit_module.audit(path, sample=5, seed=0, data=None, rejected=5)
    section = text.split("## 1 of 1 rejected causal proposals (seed 0)", 1)[1]
    head = section.split("`demo-1` event ", 1)[1].split("\n", 1)[0]
    assert head.split(": ", 1)[1] == "confidence 0.1 below 0.5"
    assert f"   - effect: Tomás: {FRAME}" in section and "   - words: 'finally'" in section
    assert "   - cause: " in section and "   - cause: ?" not in section
    assert "rejected causal proposals" not in audit_module.audit(path, sample=5, seed=0, data=None)
