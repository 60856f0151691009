"""Retrieval metrics: turn-level evidence recall by rank and by context-token budget."""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def dedupe(sources: Sequence[str]) -> list[str]:
    return list(dict.fromkeys(sources))


def recall_all_at_k(retrieved: Sequence[str], evidence: Sequence[str], k: int) -> float:
    """1 when every evidence turn is among the top k retrieved turns."""
    return float(set(evidence) <= set(dedupe(retrieved)[:k]))


def recall_any_at_k(retrieved: Sequence[str], evidence: Sequence[str], k: int) -> float:
    return float(bool(set(evidence) & set(dedupe(retrieved)[:k])))


def within_budget(sources: Sequence[Sequence[str]], tokens: Sequence[int], budget: int) -> list[str]:
    """Turns taken in salience order while their blocks fit in ``budget`` context tokens. The first
    block counts whatever its size, as the context always shows it (cut to fit); a later block only
    when it fits, a first block without turns included."""
    out, used = [], 0
    for k, (src, t) in enumerate(zip(sources, tokens, strict=True)):
        if k and used + t > budget:
            break
        out.extend(src)
        used += t
    return out


def recall_all_at_tokens(sources: Sequence[Sequence[str]], tokens: Sequence[int], evidence: Sequence[str],
                         budget: int) -> float:
    return float(set(evidence) <= set(within_budget(sources, tokens, budget)))


def percentile(values: Sequence[float], q: float) -> float | None:
    return float(np.percentile(values, q)) if len(values) else None


# metrics.json's retrieval time: milliseconds per question, each batch's time (question embedding
# excluded) shared evenly by its questions, averaged over the questions.
RETRIEVAL_MS = "retrieval_ms_per_question_batch_mean"


def retrieval_ms(block: dict) -> float | None:
    """A metrics.json block's retrieval time per question. Runs written before the figure was
    named for what it is hold only ``retrieval_ms_p50``: the median of the same per-question
    batch shares."""
    return block[RETRIEVAL_MS] if RETRIEVAL_MS in block else block.get("retrieval_ms_p50")
