"""The question adapter: a learned linear map of question embeddings, applied before they are
compared with events (dense ranking, context views, beam transitions; the intent head reads the
raw embedding it was trained on).

Questions about a conversation ("What did Caroline research?") and the turns that answer them
("I've been looking into adoption agencies") are phrased differently: on the dev split, MiniLM's
cosine puts every evidence turn of a question in the top 10 of its conversation's turns for 0.45 of
the questions (experiments/results/adapter/locomo_dev.json). A map
W, close to the identity, fitted with a softmax over each conversation's turns to the evidence
turns of its questions (experiments/train_question_adapter.py, on the LoCoMo dev split, held-out
conversations for its validation) moves q to normalise(W q). Events are not mapped, so stored
embeddings and every index stay as they are. Maps ship for all-MiniLM-L6-v2 (384-d, the bundled
embedder) and all-mpnet-base-v2 (768-d, `make models`; conf/memory/magma_mpnet.yaml);
``bundled`` picks the one for the configured embedder.
"""
from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

import torch

from magma_torch.config.resolve import ConfigError
from magma_torch.text.embedder import is_bundled

BUNDLED = "bundled"                     # retrieval.question_adapter: the map shipped for the configured embedder
BUNDLED_EMBEDDER = "bundled"            # meta["embedder_path"] of a map fitted on the bundled model's vectors
WEIGHTS_NAME = "question_adapter.safetensors"


def shipped_name(model_path: str | None) -> str:
    """The package's file of the map for ``model_path``'s vectors: WEIGHTS_NAME for the bundled
    model (None), ``question_adapter.<model folder name>.safetensors`` for another."""
    if is_bundled(model_path):
        return WEIGHTS_NAME
    return f"question_adapter.{Path(model_path).name}.safetensors"


class QuestionAdapter:
    """q -> normalise(q Wᵀ) for question embeddings q [B, d]."""

    def __init__(self, weight: torch.Tensor, meta: dict | None = None, source: str = "<memory>"):
        if weight.dim() != 2 or weight.shape[0] != weight.shape[1]:
            raise ConfigError(f"retrieval.question_adapter {source}: weight must be square [d, d], "
                              f"got {list(weight.shape)}")
        self.weight, self.meta, self.source = weight.float(), meta or {}, source

    @classmethod
    def load(cls, path: str, model_path: str | None = None) -> "QuestionAdapter":
        """``path``: a safetensors file with a ``weight`` [d, d] (and a .json sidecar), or ``bundled``:
        the map the package ships for the embedder at ``model_path`` (None: the bundled model)."""
        if path == BUNDLED:
            shipped = resources.files("magma_torch.query") / "data" / shipped_name(model_path)
            if not shipped.is_file():
                raise ConfigError(f"retrieval.question_adapter=bundled: no map ships for the embedder {model_path} "
                                  f"(maps ship for all-MiniLM-L6-v2 and all-mpnet-base-v2); set it to null or to a "
                                  f"map fitted for it (experiments/train_question_adapter.py --embedder)")
            with resources.as_file(shipped) as p:
                return cls._load(Path(p))
        return cls._load(Path(path))

    @classmethod
    def _load(cls, path: Path) -> "QuestionAdapter":
        from safetensors.torch import load_file  # lazy: only loading weights needs it

        if not path.is_file():
            raise ConfigError(f"retrieval.question_adapter: no file {path}")
        tensors = load_file(str(path))
        if "weight" not in tensors:
            raise ConfigError(f"retrieval.question_adapter: {path} holds no 'weight' tensor")
        sidecar = path.with_suffix(".json")
        meta = json.loads(sidecar.read_text()) if sidecar.is_file() else {}
        return cls(tensors["weight"], meta, str(path))

    def save(self, path: Path) -> None:
        from safetensors.torch import save_file

        path.parent.mkdir(parents=True, exist_ok=True)
        save_file({"weight": self.weight.contiguous()}, str(path))
        path.with_suffix(".json").write_text(json.dumps(self.meta, indent=1) + "\n")

    @property
    def dim(self) -> int:
        return self.weight.shape[0]

    def check(self, embedder) -> None:
        """Raise unless this map was fitted for ``embedder``'s vectors: its dimension, and for the
        bundled map the bundled model (a map of another model's space reorders nothing sensibly)."""
        dim = getattr(embedder, "dim", self.dim)
        if dim != self.dim:
            raise ConfigError(f"retrieval.question_adapter {self.source} maps {self.dim}-d questions, the embedder "
                              f"gives {dim}-d ones; set it to null or fit one for this embedder")
        fitted_for, model = self.meta.get("embedder_path"), getattr(embedder, "model_path", None)
        if fitted_for is None or model is None:
            return
        if fitted_for == BUNDLED_EMBEDDER and not is_bundled(model):
            raise ConfigError(f"retrieval.question_adapter {self.source} is fitted for the bundled all-MiniLM-L6-v2, "
                              f"the embedder is {model}; set it to null or fit one for this embedder")
        if fitted_for != BUNDLED_EMBEDDER and Path(fitted_for).name != Path(model).name:
            raise ConfigError(f"retrieval.question_adapter {self.source} is fitted for {fitted_for}, the embedder is "
                              f"{model}; set it to null or fit one for this embedder")

    def __call__(self, q: torch.Tensor) -> torch.Tensor:
        if self.weight.device != q.device:     # moved once, not per batch
            self.weight = self.weight.to(q.device)
        mapped = q.float() @ self.weight.T
        return torch.nn.functional.normalize(mapped, dim=-1).to(q.dtype)


def fit(conversations: list[tuple[torch.Tensor, torch.Tensor, list[list[int]]]], l2: float, temperature: float,
        epochs: int, lr: float) -> torch.Tensor:
    """W [d, d] from (events [N, d], questions [B, d], evidence rows per question) per conversation:
    Adam on the mean over questions of -log softmax(cos(W q, events) / temperature) at the evidence
    rows, plus ``l2`` · ||W - I||², each epoch one step per conversation."""
    # clones: the embeddings may come from inference mode, whose tensors autograd cannot save
    conversations = [(events.clone(), questions.clone(), evidence) for events, questions, evidence in conversations]
    dim = conversations[0][0].shape[1]
    eye = torch.eye(dim)
    weight = eye.clone().requires_grad_(True)
    opt = torch.optim.Adam([weight], lr=lr)
    with torch.enable_grad():
        for _ in range(epochs):
            for events, questions, evidence in conversations:
                q = torch.nn.functional.normalize(questions @ weight.T, dim=1)
                log_p = ((q @ events.T) / temperature).log_softmax(dim=1)
                rows = [b for b, ev in enumerate(evidence) if ev]
                nll = torch.stack([-log_p[b, evidence[b]].mean() for b in rows]).mean()
                loss = nll + l2 * ((weight - eye) ** 2).sum()
                opt.zero_grad()
                loss.backward()
                opt.step()
    return weight.detach()
