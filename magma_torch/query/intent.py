"""Query intent classifier: a small MLP head over normalised sentence embeddings."""
from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

import torch

INTENTS = ("WHY", "WHEN", "ENTITY")  # index order of the head's logits
WEIGHTS_NAME = "intent_head.safetensors"


class IntentHead(torch.nn.Module):
    """Linear -> GELU -> Dropout -> Linear over a sentence embedding."""

    def __init__(self, dim: int = 384, hidden: int = 64, dropout: float = 0.1):
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(dim, hidden),
            torch.nn.GELU(),
            torch.nn.Dropout(dropout),
            torch.nn.Linear(hidden, len(INTENTS)),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def sidecar_path(weights: Path) -> Path:
    """The JSON metadata file that travels with a weights file."""
    return weights.with_suffix(".json")


class IntentClassifier:
    """Maps query embeddings to WHY / WHEN / ENTITY."""

    def __init__(self, head: IntentHead, meta: dict):
        self.head = head.eval()
        self.meta = meta

    @classmethod
    def load(cls, path: str | None = None, device="cpu") -> "IntentClassifier":
        """Load weights (safetensors) plus sidecar; default is the head shipped in the package."""
        if path is None:
            with resources.as_file(resources.files("magma_torch.query") / "data" / WEIGHTS_NAME) as p:
                return cls._load(Path(p), device)
        return cls._load(Path(path), device)

    @classmethod
    def _load(cls, path: Path, device) -> "IntentClassifier":
        meta = json.loads(sidecar_path(path).read_text())
        if tuple(meta["labels"]) != INTENTS:
            raise ValueError(f"{path}: labels {meta['labels']} do not match {INTENTS}")
        from safetensors.torch import load_file  # lazy: only loading weights needs it

        head = IntentHead(meta["dim"], meta["hidden"], meta.get("dropout", 0.0))
        head.load_state_dict(load_file(str(path), device=str(device)))
        return cls(head.to(device), meta)

    @property
    def device(self) -> torch.device:
        return next(self.head.parameters()).device

    @torch.no_grad()
    def probabilities(self, embeddings: torch.Tensor) -> torch.Tensor:
        """[B, dim] embeddings -> [B, len(INTENTS)] softmax probabilities, columns in INTENTS order."""
        if embeddings.dim() != 2:
            raise ValueError(f"expected [B, dim] embeddings, got shape {tuple(embeddings.shape)}")
        if self.device != embeddings.device:
            # follow the caller's device so predict never forces a host round-trip
            self.head.to(embeddings.device)
        return self.head(embeddings.float()).softmax(dim=-1)

    def predict(self, embeddings: torch.Tensor) -> torch.Tensor:
        """[B, dim] embeddings -> LongTensor [B] of indices into INTENTS."""
        return self.probabilities(embeddings).argmax(dim=-1)

    def predict_labels(self, embeddings: torch.Tensor) -> list[str]:
        return [INTENTS[i] for i in self.predict(embeddings).tolist()]
