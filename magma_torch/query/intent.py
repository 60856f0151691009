"""Query intent classifier: a small MLP head over normalised sentence embeddings, plus an optional
lead-word rule layer on the question text.

Design: the learned head decides every question; when the caller also passes the question texts,
a question whose lead words are unambiguous ("Why …", "When did/is/was …") gets that intent's
one-hot row instead. A lead "When"/"Why" is a near-certain signal that an embedding of the whole
sentence can still be pulled away from by a topical word ("wine tasting trip"), and the rule costs
one regex per question; the head still routes every other phrasing ("What year…", "How long…",
"What made…", "What motivated…"). The rules (case-insensitive regexes per intent) come from
conf/intent/default.yaml and are recorded in the sidecar, so a loaded head carries its own.
"""
from __future__ import annotations

import functools
import json
import re
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


@functools.cache
def bundled_encoder(device: str):
    """The bundled all-MiniLM-L6-v2 on ``device``, loaded once per process."""
    from magma_torch.text.embedder import Embedder

    return Embedder(device=device)


class IntentClassifier:
    """Maps query embeddings to WHY / WHEN / ENTITY."""

    def __init__(self, head: IntentHead, meta: dict):
        self.head = head.eval()
        self.meta = meta
        self.rules = [(INTENTS.index(label), re.compile(rx, re.IGNORECASE))
                      for label, rx in (meta.get("rules") or {}).items()]

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

    def reads(self, embedder) -> bool:
        """Whether the head can read ``embedder``'s question vectors: it was trained on the bundled
        all-MiniLM-L6-v2's (query/train_intent.py), so another model's space, even of the same
        width, means nothing to it. An embedder that names no model is taken by its width."""
        from magma_torch.text.embedder import is_bundled   # lazy: sentence-transformers

        model = getattr(embedder, "model_path", None)
        return embedder.dim == self.meta["dim"] and is_bundled(model)

    def encoder(self, device: torch.device):
        """The embedder the head was trained on (the bundled all-MiniLM-L6-v2), on ``device``: one per
        device in the process, shared by every memory's retriever (magma-run builds one memory per
        conversation)."""
        return bundled_encoder(str(device))

    def rule_intents(self, questions: list[str]) -> list[int]:
        """Per question, the index of the first rule intent whose regex matches its text; -1 for none."""
        return [next((i for i, rx in self.rules if rx.search(q)), -1) for q in questions]

    @torch.no_grad()
    def probabilities(self, embeddings: torch.Tensor, questions: list[str] | None = None) -> torch.Tensor:
        """[B, dim] embeddings -> [B, len(INTENTS)] probabilities, columns in INTENTS order.

        The head's softmax; with ``questions`` (the B texts behind the embeddings), rows whose
        text matches a lead-word rule become that intent's one-hot row.
        """
        if embeddings.dim() != 2:
            raise ValueError(f"expected [B, dim] embeddings, got shape {tuple(embeddings.shape)}")
        if self.device != embeddings.device:
            # follow the caller's device so predict never forces a host round-trip
            self.head.to(embeddings.device)
        probs = self.head(embeddings.float()).softmax(dim=-1)
        if questions is None or not self.rules:
            return probs
        if len(questions) != len(probs):
            raise ValueError(f"{len(questions)} questions for {len(probs)} embeddings")
        ruled = torch.tensor(self.rule_intents(questions), dtype=torch.long).to(probs.device)
        one_hot = torch.nn.functional.one_hot(ruled.clamp(min=0), len(INTENTS)).to(probs.dtype)
        return torch.where((ruled >= 0)[:, None], one_hot, probs)

    def predict(self, embeddings: torch.Tensor, questions: list[str] | None = None) -> torch.Tensor:
        """[B, dim] embeddings -> LongTensor [B] of indices into INTENTS."""
        return self.probabilities(embeddings, questions).argmax(dim=-1)

    def predict_labels(self, embeddings: torch.Tensor, questions: list[str] | None = None) -> list[str]:
        return [INTENTS[i] for i in self.predict(embeddings, questions).tolist()]
