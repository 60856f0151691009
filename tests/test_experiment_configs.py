"""Every experiment grid composes point by point through the schema, and the ablations are what they claim."""
import dataclasses
import itertools

import pytest
from hydra import compose, initialize_config_module
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import OmegaConf

from magma_torch.config import group_options, load_group
from magma_torch.config.resolve import consolidation_config, memory_config, settings
from magma_torch.config.schema import MemoryConfig
from magma_torch.memory import MagmaMemory
from magma_torch.query.intent import INTENTS
from magma_torch.store.graph import REL_ID

EXPERIMENTS = group_options("experiment")
DATA = ["dataset.path=/nonexistent/locomo.json"]  # composing never opens it


def sweep_points(experiment: str) -> list[list[str]]:
    """The override lists of every job of the grid, expanded as Hydra's basic sweeper does. For an
    Optuna search space (no grid), one point per bound of each interval and per listed value."""
    cfg = compose("config", overrides=[f"+experiment={experiment}"] + DATA, return_hydra_config=True)
    assert cfg.hydra.mode.name == "MULTIRUN"
    parsed = OverridesParser.create().parse_overrides([f"{k}={v}" for k, v in cfg.hydra.sweeper.params.items()])

    def values(o):
        if o.is_interval_sweep():
            return [str(o.value().start), str(o.value().end)]
        return o.sweep_string_iterator() if o.is_sweep_override() else [o.get_value_element_as_str()]

    axes = [[f"{o.get_key_element()}={v}" for v in values(o)] for o in parsed]
    if "optuna" in cfg.hydra.sweeper._target_:
        return [[point] for axis in axes for point in axis]
    return [list(p) for p in itertools.product(*axes)]


def test_there_are_grids():
    assert {"table1", "table4", "lambda_sweep", "tune_traversal"} <= set(EXPERIMENTS)


@pytest.mark.parametrize("experiment", EXPERIMENTS)
def test_every_grid_point_composes(experiment):
    with initialize_config_module("magma_torch.conf", version_base=None):
        points = sweep_points(experiment)
        assert points
        for point in points:
            cfg = compose("config", overrides=[f"+experiment={experiment}", *DATA, *point])
            assert isinstance(settings(memory_config(cfg.memory)), MemoryConfig)     # through the schema
            consolidation_config(cfg.consolidation)                                  # raises on a bad key
            for override in point:  # each swept value reaches the job's config
                key, value = override.split("=", 1)
                got = OmegaConf.select(cfg, key) if "." in key else cfg[key].name
                assert str(got) == value, (experiment, override)


def test_table_grids_cover_the_paper_rows():
    with initialize_config_module("magma_torch.conf", version_base=None):
        t1 = {p[1] for p in sweep_points("table1")}
        t4 = {p[1] for p in sweep_points("table4")}
    assert {"memory=magma", "memory=magma_paper", "memory=hybrid_rag", "memory=vector_rag", "memory=bm25",
            "memory=full_context"} <= t1
    assert t4 == {f"memory={m}" for m in ("magma", "magma_no_traversal", "magma_no_beam", "magma_no_episode",
                                          "magma_no_entity", "magma_no_causal", "magma_no_policy",
                                          "magma_no_temporal", "magma_no_adapter", "magma_no_context")}


def relation_matrix(name: str):
    with MagmaMemory(name, "none") as mem:
        return mem.retriever.weights, mem.retriever.cfg


@pytest.mark.parametrize("removed", ["causal", "entity", "temporal", "episode"])
def test_ablation_removes_one_relation_for_every_intent(removed):
    full, full_cfg = relation_matrix("magma")
    ablated, cfg = relation_matrix(f"magma_no_{removed}")
    assert (ablated[:, REL_ID[removed]] == 0).all() and (full[:, REL_ID[removed]] > 0).all()
    others = [j for r, j in REL_ID.items() if r != removed]
    assert (ablated[:, others] == full[:, others]).all()
    assert getattr(cfg.intent_weights.uniform, removed) == 0      # also when use_intent is off
    # no_temporal also drops the RRF rankings built on the temporal chain, no_episode the episode
    # ranking, no_entity the entity ranking; the others keep them
    context_on = {getattr(cfg.signal_weights, s) > 0 for s in ("vector_context", "keyword_context")}
    assert context_on == ({False} if removed == "temporal" else {True})
    assert (cfg.signal_weights.episode > 0) == (removed != "episode" and full_cfg.signal_weights.episode > 0)
    assert (cfg.signal_weights.entity > 0) == (removed != "entity") and full_cfg.signal_weights.entity > 0
    assert cfg.signal_weights.time == full_cfg.signal_weights.time > 0


def test_no_traversal_reads_no_relation_and_no_beam_only_stops_the_beam():
    weights, cfg = relation_matrix("magma_no_traversal")
    full_weights, full = relation_matrix("magma")
    assert cfg.beam.max_depth == 0 and full.beam.max_depth > 0
    # every relation removed for every intent (so no re-ranker support), no temporal-context ranking
    # and no entity ranking (entity nodes)
    assert (weights == 0).all() and (full_weights > 0).any()
    assert set(full.active_signals) - set(cfg.active_signals) == {"vector_context", "keyword_context", "entity"}
    beam_weights, beam = relation_matrix("magma_no_beam")
    assert beam.beam.max_depth == 0 and (beam_weights == full_weights).all()
    assert beam.active_signals == full.active_signals
    assert dataclasses.replace(beam, beam=full.beam) == full


def test_magma_paper_keeps_to_table_5():
    _, paper = relation_matrix("magma_paper")
    b = paper.beam
    assert paper.active_signals == ("vector", "keyword", "time") and paper.time_filter
    assert paper.question_adapter is None            # the map fitted on dev is not the paper's
    assert paper.signal_top_k.vector == 20 and 2 <= paper.signal_weights.keyword <= 5
    assert (b.max_depth, b.max_nodes, b.drop_threshold, b.lambda1) == (5, 200, 0.15, 1.0) and 0.3 <= b.lambda2 <= 0.7
    for intent in INTENTS:
        w = getattr(paper.intent_weights, intent)
        assert 2.5 <= w.entity <= 6 and 0.5 <= w.temporal <= 4 and 3 <= w.causal <= 5
        assert 2.5 <= w.semantic <= 5 and w.episode == 0


def test_no_policy_uses_one_row_for_every_intent():
    weights, cfg = relation_matrix("magma_no_policy")
    assert not cfg.use_intent
    assert (weights == weights[0]).all() and weights.shape[0] == len(INTENTS)
    assert load_group("memory", "magma_no_policy").name == "magma_no_policy"
