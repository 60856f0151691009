"""The embedder refuses a setting its model cannot run, when it is built."""
import pytest

from magma_torch import MagmaMemory
from magma_torch.config.resolve import ConfigError
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
