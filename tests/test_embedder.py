"""The embedder refuses a setting its model cannot run, when it is built."""
import os
import re

import pytest
import torch

from magma_torch import MagmaMemory
from magma_torch.config.resolve import ConfigError, settings
from magma_torch.text.embedder import Embedder


@pytest.mark.parametrize("length", [0, -1, 513])
def test_a_max_seq_length_the_model_cannot_take_is_refused_naming_the_setting_and_the_limit(length):
    with pytest.raises(ConfigError, match=rf"^embedder.max_seq_length: must be between 1 and 512, got {length} "
                                          r"\(the model has 512 positions\)$"):
        Embedder(device="cpu", max_seq_length=length)


def test_a_memory_config_asking_more_than_the_models_positions_is_refused():
    with pytest.raises(ConfigError, match=r"^embedder.max_seq_length: must be between 1 and 512, got 1000"):
        MagmaMemory(config={"embedder": {"max_seq_length": 1000}}, consolidation="none", device="cpu")


def test_the_models_full_length_embeds_a_longer_text():
    emb = Embedder(device="cpu", max_seq_length=512)
    assert emb.encode([" ".join(["word"] * 2000)]).shape == (1, emb.dim)


class FakeMpnet:
    """Stands for all-mpnet-base-v2 built by `make models` (768-d) in a folder of its own: loads from any
    folder that exists, as SentenceTransformer raises an OSError (offline) for one that does not."""

    def __init__(self, path, device=None):
        if not os.path.isdir(path):
            raise OSError(f"{path} is not a local folder and the hub is offline")
        self.path, self.max_seq_length = path, 384

    def __getitem__(self, i):
        return None                 # no transformer module: no stated position limit

    def get_embedding_dimension(self):
        return 768


def test_magma_mpnets_model_is_found_through_magma_models_dir_from_any_directory(tmp_path, monkeypatch):
    # before: models/all-mpnet-base-v2 from the working directory only, whatever MAGMA_MODELS_DIR said
    import dataclasses

    import sentence_transformers

    from magma_torch.config.resolve import memory_config

    monkeypatch.setattr(sentence_transformers, "SentenceTransformer", FakeMpnet)
    (tmp_path / "models" / "all-mpnet-base-v2").mkdir(parents=True)
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    monkeypatch.setenv("MAGMA_MODELS_DIR", str(tmp_path / "models"))
    cfg = settings(memory_config("magma_mpnet")).embedder
    assert cfg.model == str(tmp_path / "models" / "all-mpnet-base-v2")
    emb = Embedder(device="cpu", **dataclasses.asdict(cfg))
    assert emb.dim == 768 and emb.model_path == cfg.model
    # a MAGMA_MODELS_DIR without the model: the refusal names the setting and the folder it looked in
    monkeypatch.setenv("MAGMA_MODELS_DIR", str(tmp_path / "nowhere"))
    cfg = settings(memory_config("magma_mpnet")).embedder
    with pytest.raises(ConfigError, match=rf"^embedder\.model: cannot load {re.escape(str(tmp_path))}/nowhere/"
                                          r"all-mpnet-base-v2 \(no such folder, .*`make models` builds"):
        Embedder(device="cpu", **dataclasses.asdict(cfg))
    # without it, models/ in the working directory, as before; a relative path says where it looked
    monkeypatch.delenv("MAGMA_MODELS_DIR")
    cfg = settings(memory_config("magma_mpnet")).embedder
    assert cfg.model == "models/all-mpnet-base-v2"
    with pytest.raises(ConfigError, match=rf"^embedder\.model: cannot load models/all-mpnet-base-v2 in "
                                          rf"{re.escape(str(tmp_path / 'elsewhere'))} \(no such folder"):
        Embedder(device="cpu", **dataclasses.asdict(cfg))
    monkeypatch.chdir(tmp_path)
    assert Embedder(device="cpu", **dataclasses.asdict(cfg)).dim == 768


def test_an_empty_model_folder_is_refused_naming_the_setting(tmp_path):
    # before: transformers' raw ValueError ("Unrecognized model ... model_type"), e.g. for the folder an
    # interrupted `make models` leaves
    with pytest.raises(ConfigError, match=rf"^embedder\.model: cannot load {re.escape(str(tmp_path))} "
                                          r"\(is not a model folder"):
        Embedder(model=str(tmp_path), device="cpu")


@pytest.mark.parametrize("device", ["cuda:99"] + ([] if torch.cuda.is_available() else ["cuda", "cuda:0"]))
def test_a_cuda_device_this_machine_lacks_is_refused_naming_the_setting(device):
    # before: an AssertionError ("Torch not compiled with CUDA enabled") while the model was moved
    with pytest.raises(ConfigError, match=rf"^device: '{device}', but this machine has \d+ CUDA device"):
        Embedder(device=device)
