"""Per-category recall bars for a run folder."""
from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # headless: runs on cluster nodes and CI
import matplotlib.pyplot as plt  # noqa: E402


def plot_categories(metrics: dict, path: Path) -> None:
    cats = [c for c, m in metrics["by_category"].items() if m.get("recall_all@10") is not None]
    keys = [k for k in ("recall_all@10", "recall_all@2000tok") if metrics["overall"].get(k) is not None]
    fig, ax = plt.subplots(figsize=(7, 3.5))
    width = 0.8 / max(len(keys), 1)
    for i, k in enumerate(keys):
        vals = [metrics["by_category"][c][k] for c in cats] + [metrics["overall"][k]]
        ax.bar([x + i * width for x in range(len(cats) + 1)], vals, width, label=k)
    ax.set_xticks([x + width * (len(keys) - 1) / 2 for x in range(len(cats) + 1)], cats + ["overall"])
    ax.set_ylim(0, 1)
    ax.set_ylabel("evidence recall")
    ax.set_title(f"{metrics['dataset']} / {metrics['memory']}")
    ax.legend(loc="upper right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
