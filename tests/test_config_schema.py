"""The typed schema (magma_torch/config/schema.py) is the one source of defaults: every memory and
consolidation YAML composes against it, MagmaMemory takes it in every form, and a bad key or type
fails in one line naming the key."""
import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from magma_torch import MagmaMemory
from magma_torch.config import group_options, load_group
from magma_torch.config.resolve import (ConfigError, consolidation_config, memory_config, saved_memory_config,
                                        settings, yaml_option)
from magma_torch.config.schema import (INTENT_ROWS, RELATIONS, SIGNALS, BeamConfig, HeuristicConsolidationConfig,
                                       LLMConsolidationConfig, MemoryConfig, RetrievalConfig, SignalWeights)
from magma_torch.ingest.heuristic import HeuristicConsolidator
from magma_torch.ingest.llm_consolidator import LLMConsolidator
from magma_torch.query.intent import INTENTS
from magma_torch.query.retriever import Retriever
from magma_torch.store.graph import TRAVERSED

CONF = Path(__file__).resolve().parents[1] / "conf"


@pytest.mark.parametrize("name", group_options("memory"))
def test_every_memory_yaml_composes_through_the_schema(name):
    composed = load_group("memory", name)
    typed = settings(composed)
    assert isinstance(typed, MemoryConfig) and isinstance(typed.retrieval.beam, BeamConfig)
    assert typed.name == name
    # the Hydra-free composer (magma-bench on a bare torch node) gives the same config
    assert settings(yaml_option(CONF / "memory", name)) == typed


@pytest.mark.parametrize("name", group_options("consolidation"))
def test_every_consolidation_yaml_composes_through_the_schema(name):
    typed = consolidation_config(name)
    if name == "none":
        assert typed is None
    else:
        assert type(settings(typed)) is {"heuristic": HeuristicConsolidationConfig, "llm": LLMConsolidationConfig}[name]
        assert settings(typed) == settings(yaml_option(CONF / "consolidation", name))


def test_the_defaults_are_magmas_composed_config():
    magma = settings(load_group("memory", "magma"))
    assert MemoryConfig() == magma
    assert RetrievalConfig() == magma.retrieval and BeamConfig() == magma.retrieval.beam
    assert HeuristicConsolidationConfig() == settings(load_group("consolidation", "heuristic"))
    # the consolidator's own defaults are the schema's
    heuristic = HeuristicConsolidator()
    for f in dataclasses.fields(HeuristicConsolidationConfig):
        if f.name not in ("_target_", "cues", "supersession"):
            assert getattr(heuristic, f.name) == getattr(HeuristicConsolidationConfig(), f.name), f.name


def test_schema_names_match_the_runtime():
    import magma_torch.query.retriever as retriever

    assert RELATIONS == TRAVERSED and INTENT_ROWS == (*INTENTS, "uniform")
    assert tuple(f.name for f in dataclasses.fields(SignalWeights)) == SIGNALS == retriever.SIGNALS


def test_the_schema_imports_neither_torch_nor_hydra():
    code = ("import sys; import magma_torch.config.schema, magma_torch.config.resolve; "
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'torch', 'hydra'}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


@pytest.mark.parametrize("config, named", [
    ({"fast_path": {"bogus": 1}}, "memory.fast_path.bogus: Key 'bogus' not in 'FastPathConfig'"),
    ({"retrieval": {"beam": {"max_depth": "deep"}}},
     "memory.retrieval.beam.max_depth: Value 'deep' of type 'str' could not be converted to Integer"),
    ({"retrieval": {"beam": {"max_depth": 2.5}}}, "memory.retrieval.beam.max_depth: Value '2.5'"),
    ({"retrieval": {"intent_weights": {"WHY": {"causl": 1.0}}}},
     "memory.retrieval.intent_weights.WHY.causl: Key 'causl' not in 'RelationWeights'"),
    ({"retrieval": {"signal_top_k": {"vectr": 5}}}, "memory.retrieval.signal_top_k.vectr: Key 'vectr' not in 'SignalTopK'"),
    ({"slow_path": {"window": 3}}, "memory.slow_path.window: Key 'window' not in 'SlowPathConfig'"),
])
def test_unknown_key_or_wrong_type_fails_in_one_line_naming_the_key(config, named):
    with pytest.raises(ConfigError) as err:
        MagmaMemory(config=config, consolidation="none")   # refused before anything is built
    assert named in str(err.value) and "\n" not in str(err.value)


def test_consolidation_keys_are_checked_too():
    with pytest.raises(ConfigError, match=r"^consolidation\.windw: Key 'windw' not in 'HeuristicConsolidationConfig'"):
        consolidation_config({"windw": 3})
    with pytest.raises(ConfigError, match=r"^consolidation\.window: Value 'x'"):
        consolidation_config({"_target_": HeuristicConsolidationConfig._target_, "window": "x"})
    assert consolidation_config({}) is None                                  # a save's "no consolidation"
    assert settings(consolidation_config({"window": 3})).window == 3        # partial: onto the heuristic's defaults


@pytest.mark.parametrize("cap", ["max_causal_per_event", "max_entities_per_event", "max_supersedes_per_event"])
@pytest.mark.parametrize("target", [HeuristicConsolidationConfig._target_, LLMConsolidationConfig._target_,
                                    "my.own.Consolidator"])
def test_a_negative_cap_is_refused_naming_it(cap, target):
    with pytest.raises(ConfigError, match=rf"^consolidation\.{cap} must be an integer >= 0, got -1$"):
        consolidation_config({"_target_": target, cap: -1})


@pytest.mark.parametrize("cap", ["max_causal_per_event", "max_entities_per_event", "max_supersedes_per_event"])
def test_a_consolidator_built_in_python_refuses_a_negative_cap_too(cap):
    with pytest.raises(ConfigError, match=rf"^consolidation\.{cap} must be an integer >= 0, got -1$"):
        LLMConsolidator(llm=object(), **{cap: -1})
    with pytest.raises(ConfigError, match=rf"^consolidation\.{cap} must be an integer >= 0, got -1$"):
        HeuristicConsolidator(**{cap: -1})


def test_memory_takes_a_dataclass_a_partial_mapping_or_a_name():
    built = MemoryConfig(retrieval=RetrievalConfig(anchor_k=20))
    partial = {"retrieval": {"anchor_k": 20}}
    for config in (built, partial, OmegaConf.create(partial)):
        cfg = memory_config(config)
        assert cfg.retrieval.anchor_k == 20
        assert dataclasses.replace(settings(cfg), retrieval=RetrievalConfig()) == MemoryConfig()   # the rest: defaults
    assert settings(memory_config("hybrid_rag")).retrieval.anchor_k == 200
    with pytest.raises(ConfigError, match="expected a MemoryConfig, got a BeamConfig"):
        memory_config(BeamConfig())
    with MagmaMemory(config=built, consolidation=HeuristicConsolidationConfig(window=3), device="cpu") as mem:
        assert isinstance(mem.retriever, Retriever) and mem.retriever.cfg.anchor_k == 20
        assert mem.consolidator.window == 3 == mem.worker.shown.window
        assert mem.retriever.cfg.beam == BeamConfig()


def test_a_saved_config_with_keys_since_removed_or_added_still_opens():
    old = OmegaConf.to_container(load_group("memory", "hybrid_rag"))
    old["slow_path"]["window"] = 6            # removed: consolidation.window is the one setting
    old["retired_setting"] = {"x": 1}
    del old["retrieval"]["supersession"]      # added since: gets its default
    del old["fast_path"]["default_stream"]
    cfg = saved_memory_config(old)
    assert "window" not in cfg.slow_path and "retired_setting" not in cfg
    assert settings(cfg).retrieval.supersession == RetrievalConfig().supersession
    assert cfg.retrieval.anchor_k == 200 and cfg.name == "hybrid_rag"       # the saved values win


FOLDER = Path("/tmp/x")    # the run folder the configs are compared for (their out_dir)


def test_a_run_folder_written_by_an_earlier_version_still_resumes():
    """Its config.yaml has a setting since removed (slow_path.window) and lacks ones added since."""
    from magma_torch.eval.run_folder import _comparable, differences

    new = OmegaConf.create({"out_dir": "/tmp/x", "memory": memory_config("magma"),
                            "consolidation": consolidation_config("heuristic")})
    old = OmegaConf.to_container(new)
    old["memory"]["slow_path"]["window"] = 6
    del old["memory"]["fast_path"]["default_stream"], old["consolidation"]["max_supersedes_per_event"]
    old = OmegaConf.create(old)
    assert differences(_comparable(old, FOLDER), _comparable(new, FOLDER)) == []
    new.memory.retrieval.anchor_k = 7
    assert differences(_comparable(old, FOLDER), _comparable(new, FOLDER)) == ["memory.retrieval.anchor_k: 50 -> 7"]


def test_a_consolidation_cache_may_be_added_when_a_run_resumes():
    """consolidation.cache changes where generations are kept, not what they are; the LLM's settings still count."""
    from magma_torch.eval.run_folder import _comparable, differences

    old = OmegaConf.create({"out_dir": "/tmp/x", "consolidation": consolidation_config("llm")})
    new = OmegaConf.create(OmegaConf.to_container(old))
    new.consolidation.cache = "/tmp/x/consolidation_cache.jsonl"
    assert differences(_comparable(old, FOLDER), _comparable(new, FOLDER)) == []
    new.consolidation.max_tokens = 64
    assert differences(_comparable(old, FOLDER), _comparable(new, FOLDER)) == ["consolidation.max_tokens: 256 -> 64"]
