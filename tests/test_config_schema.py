"""The typed schema (magma_torch/config/schema.py) is the one source of defaults: every memory and
consolidation YAML composes against it, MagmaMemory takes it in every form, and a bad key, type or
value fails in one line naming the key."""
import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir, version
from hydra.core.global_hydra import GlobalHydra
from hydra.core.utils import JobRuntime
from omegaconf import OmegaConf

from magma_torch import MagmaMemory
from magma_torch.config import group_options, load_group
from magma_torch.config.resolve import (ConfigError, consolidation_config, memory_config, saved_memory_config,
                                        settings, worker_settings, yaml_option)
from magma_torch.config.schema import (INTENT_ROWS, RELATIONS, SIGNALS, BeamConfig, EmbedderConfig,
                                       HeuristicConsolidationConfig, LLMConsolidationConfig, MemoryConfig,
                                       RetrievalConfig, SignalWeights)
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
    # a section given as a value: OmegaConf's merge error named no key ("memory: Merge error: int ...")
    ({"retrieval": {"beam": 5}}, "memory.retrieval.beam: expected a mapping of BeamConfig settings, got int 5"),
    ({"fast_path": "fast"}, "memory.fast_path: expected a mapping of FastPathConfig settings, got str 'fast'"),
])
def test_unknown_key_or_wrong_type_fails_in_one_line_naming_the_key(config, named):
    with pytest.raises(ConfigError) as err:
        MagmaMemory(config=config, consolidation="none")   # refused before anything is built
    assert named in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("config, named", [
    ({"retrieval": {"beam": {"beam_width": -1}}}, "memory.retrieval.beam.beam_width: must be >= 1, got -1"),
    ({"retrieval": {"beam": {"drop_threshold": 5.0}}}, "memory.retrieval.beam.drop_threshold: must be between -1 and 1, got 5.0"),
    ({"retrieval": {"anchor_k": 0}}, "memory.retrieval.anchor_k: must be >= 1, got 0"),
    ({"retrieval": {"rrf_k": -60}}, "memory.retrieval.rrf_k: must be >= 0, got -60"),
    ({"retrieval": {"budget_tokens": -100}}, "memory.retrieval.budget_tokens: must be >= 1, got -100"),
    ({"retrieval": {"signal_top_k": {"vector": -10}}}, "memory.retrieval.signal_top_k.vector: must be >= 0, got -10"),
    ({"retrieval": {"context": {"hops": -1}}}, "memory.retrieval.context.hops: must be >= 0, got -1"),
    ({"chain_span": -2}, "memory.chain_span: must be >= 0, got -2"),
    ({"bm25": {"k1": -1}}, "memory.bm25.k1: must be >= 0, got -1.0"),
    ({"bm25": {"b": 3}}, "memory.bm25.b: must be between 0 and 1, got 3.0"),
    ({"fast_path": {"theta_sim": 7.0}}, "memory.fast_path.theta_sim: must be between -1 and 1, got 7.0"),
    ({"fast_path": {"theta_sim": float("nan")}},
     "memory.fast_path.theta_sim: must be a finite number between -1 and 1, got nan"),
    # NaN or infinity in a weight turned every score into NaN and the context into id order
    ({"retrieval": {"beam": {"anchor_weight": float("nan")}}},
     "memory.retrieval.beam.anchor_weight: must be a finite number >= 0, got nan"),
    ({"retrieval": {"intent_weights": {"WHY": {"causal": float("inf")}}}},
     "memory.retrieval.intent_weights.WHY.causal: must be a finite number >= 0, got inf"),
    ({"retrieval": {"signal_weights": {"vector": float("inf")}}},
     "memory.retrieval.signal_weights.vector: must be a finite number >= 0, got inf"),
    ({"retrieval": {"intent_weights": {"ENTITY": {"entity": -1.0}}}},
     "memory.retrieval.intent_weights.ENTITY.entity: must be >= 0, got -1.0"),
    ({"fast_path": {"episodes": {"max_gap_hours": -1}}}, "memory.fast_path.episodes.max_gap_hours: must be >= 0, got -1.0"),
    ({"fast_path": {"episodes": {"topic_shift": 3.0}}}, "memory.fast_path.episodes.topic_shift: must be between -1 and 1"),
    ({"retrieval": {"mode": "grpah"}}, "memory.retrieval.mode: must be one of graph, full_context, got 'grpah'"),
    ({"retrieval": {"score_dtype": "int64"}}, "memory.retrieval.score_dtype: must be one of float32, float64, "),
    ({"retrieval": {"kernel": "cuda"}}, "memory.retrieval.kernel: must be one of auto, torch, numba, got 'cuda'"),
    ({"scan_dtype": "int8"}, "memory.scan_dtype: must be one of auto, float32, float16, bfloat16, float16_packed, "
                           "got 'int8'"),
    ({"vector_backend": "annoy"}, "memory.vector_backend: must be one of auto, faiss, torch, got 'annoy'"),
    ({"embedder": {"precision": "fp16"}}, "memory.embedder.precision: must be one of auto, float32, bfloat16, float16"),
])
def test_a_value_outside_its_range_or_choices_fails_in_one_line_naming_the_key(config, named):
    with pytest.raises(ConfigError) as err:
        MagmaMemory(config=config, consolidation="none")   # refused before anything is built
    assert str(err.value).startswith(named) and "\n" not in str(err.value)


def test_every_form_of_a_config_is_range_checked():
    bad = {"retrieval": {"beam": {"beam_width": 0}}}
    named = "memory.retrieval.beam.beam_width: must be >= 1, got 0"
    for config in (bad, OmegaConf.create(bad)):
        with pytest.raises(ConfigError, match=f"^{named}$"):
            memory_config(config)
    with pytest.raises(ConfigError, match=f"^{named}$"):
        saved_memory_config(bad)                                  # a save or checkpoint being reopened
    # A dataclass refuses the value when it is built (by you, by dataclasses.replace, or by OmegaConf)
    with pytest.raises(ConfigError, match="^BeamConfig.beam_width: must be >= 1, got 0$"):
        BeamConfig(beam_width=0)
    with pytest.raises(ConfigError, match="^RetrievalConfig.mode: must be one of graph, full_context"):
        dataclasses.replace(RetrievalConfig(), mode="grpah")
    composed = memory_config(None)
    composed.retrieval.beam.beam_width = 0                        # OmegaConf checks only its type
    with pytest.raises(ConfigError, match="^BeamConfig.beam_width: must be >= 1, got 0$"):
        settings(composed)


def test_a_yaml_option_is_range_checked(tmp_path):
    (tmp_path / "memory").mkdir()
    (tmp_path / "memory" / "bad.yaml").write_text("defaults:\n  - schema\n  - _self_\nretrieval:\n  anchor_k: 0\n")
    with pytest.raises(ConfigError, match="^memory.retrieval.anchor_k: must be >= 1, got 0$"):
        yaml_option(tmp_path / "memory", "bad")


@pytest.mark.parametrize("config, named", [
    ({"window": -3}, "consolidation.window: must be >= 0, got -3"),
    ({"max_causal_per_event": -1}, "consolidation.max_causal_per_event: must be >= 0, got -1"),
    ({"_target_": LLMConsolidationConfig._target_, "min_confidence": 7}, "consolidation.min_confidence: must be between 0 and 1"),
    ({"_target_": LLMConsolidationConfig._target_, "max_supersedes_per_event": -1},
     "consolidation.max_supersedes_per_event: must be >= 0, got -1"),
])
def test_consolidation_values_are_range_checked(config, named):
    with pytest.raises(ConfigError) as err:
        consolidation_config(config)
    assert str(err.value).startswith(named)


def test_a_consolidator_of_your_own_gets_its_window_and_caps_checked():
    with pytest.raises(ConfigError, match="^consolidation.window: must be >= 0, got -2$"):
        worker_settings(consolidation_config({"_target_": "my.Consolidator", "window": -2}))


def test_every_choice_the_schema_allows_is_one_the_runtime_takes():
    import torch

    from magma_torch.text.embedder import resolve_precision

    for dtype in fields_of(RetrievalConfig)["score_dtype"].metadata["allowed"].choices:
        assert isinstance(getattr(torch, dtype), torch.dtype)
    for precision in fields_of(EmbedderConfig)["precision"].metadata["allowed"].choices:
        assert isinstance(resolve_precision(precision, torch.device("cpu")), torch.dtype)


def fields_of(schema) -> dict:
    return {f.name: f for f in dataclasses.fields(schema)}


@pytest.mark.parametrize("config, consolidation, named", [
    ("magam", "none", r"^unknown memory config 'magam'; options: \[.*'magma'"),
    (None, "heuristc", r"^unknown consolidation config 'heuristc'; options: \[.*'heuristic'"),
])
def test_a_config_name_not_in_the_tree_is_a_config_error(config, consolidation, named):
    with pytest.raises(ConfigError, match=named):
        MagmaMemory(config=config, consolidation=consolidation)


def test_a_config_name_inside_your_own_hydra_app_composes_the_packaged_tree_and_leaves_yours_be(tmp_path):
    """Your app's search path has its own config.yaml and memory group (with a magma.yaml of its own),
    and no consolidation group."""
    (tmp_path / "memory").mkdir()
    (tmp_path / "config.yaml").write_text("defaults:\n  - memory: magma\n  - _self_\nlr: 0.1\n")
    (tmp_path / "memory" / "magma.yaml").write_text("name: not_the_packaged_magma\n")
    with initialize_config_dir(str(tmp_path), version_base="1.2", job_name="my_app"):
        yours = compose("config")
        assert settings(memory_config("magma")) == MemoryConfig()
        assert settings(memory_config("hybrid_rag")).retrieval.anchor_k == 200
        assert settings(consolidation_config("heuristic")) == HeuristicConsolidationConfig()
        assert compose("config") == yours and yours.memory.name == "not_the_packaged_magma"
        assert JobRuntime.instance().get("name") == "my_app" and str(version.getbase()) == "1.2"
    assert not GlobalHydra.instance().is_initialized()


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
    """A cap cuts a list (links[:cap]): -1 would quietly keep all but the last."""
    with pytest.raises(ConfigError, match=rf"^consolidation\.{cap}: must be >= 0, got -1$"):
        worker_settings(consolidation_config({"_target_": target, cap: -1}))


@pytest.mark.parametrize("cap", ["max_causal_per_event", "max_entities_per_event", "max_supersedes_per_event"])
def test_a_consolidator_built_in_python_refuses_a_negative_cap_too(cap):
    for build in (lambda: LLMConsolidator(llm=object(), **{cap: -1}), lambda: HeuristicConsolidator(**{cap: -1})):
        with pytest.raises(ConfigError, match=rf"^consolidation\.{cap}: must be >= 0, got -1$"):
            build()


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
