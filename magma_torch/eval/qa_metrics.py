"""Answer metrics: LoCoMo's official token F1 and BLEU-1.

``f1_score``, ``f1_multi`` and ``locomo_f1`` follow LoCoMo's own evaluation code
(snap-research/locomo, ``task_eval/evaluation.py``: ``normalize_answer``, ``f1_score``,
``f1`` and ``eval_question_answering``) to the letter, including its quirks:

- ``normalize_answer`` drops commas, lowercases, removes ``string.punctuation``, removes the
  words a / an / the / *and*, and collapses whitespace; tokens are Porter-stemmed (nltk).
- multi-hop (category 1): prediction and gold are split on commas and the best-matching
  prediction part's F1 is averaged over the gold parts;
- open-domain (category 3): only the gold before the first ``;`` counts;
- adversarial (category 5): 1 when the prediction contains "not mentioned" or
  "no information available", else 0. The dataset's ``adversarial_answer`` (stored in
  ``Question.gold``) is the trap answer and is never matched against.

``paired_bootstrap`` gives the confidence interval of a score difference between two runs
over the same questions.
"""
from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Sequence

import numpy as np
from nltk.stem import PorterStemmer
from nltk.translate.bleu_score import SmoothingFunction, sentence_bleu

_stemmer = PorterStemmer()
_PUNCT = set(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the|and)\b")
_BLEU_TOKEN = re.compile(r"\w+|[^\w\s]")
ABSTAIN_MARKERS = ("no information available", "not mentioned")


def normalize_answer(s: str) -> str:
    s = s.replace(",", "").lower()
    s = "".join(ch for ch in s if ch not in _PUNCT)
    s = _ARTICLES.sub(" ", s)
    return " ".join(s.split())


def _stems(s: str) -> list[str]:
    return [_stemmer.stem(w) for w in normalize_answer(s).split()]


def f1_score(prediction: str, gold: str) -> float:
    """Token F1 of stemmed, normalised tokens (Counter overlap)."""
    pred, ref = _stems(prediction), _stems(gold)
    same = sum((Counter(pred) & Counter(ref)).values())
    if same == 0:
        return 0.0
    p, r = same / len(pred), same / len(ref)
    return 2 * p * r / (p + r)


def f1_multi(prediction: str, gold: str) -> float:
    """Multi-answer F1: mean over comma-separated gold parts of the best prediction part."""
    preds = [p.strip() for p in prediction.split(",")]
    golds = [g.strip() for g in gold.split(",")]
    return sum(max(f1_score(p, g) for p in preds) for g in golds) / len(golds)


def abstains(prediction: str) -> bool:
    low = prediction.lower()
    return any(m in low for m in ABSTAIN_MARKERS)


def reference_answer(gold: str | None, category: str) -> str | None:
    """The answer a prediction is scored against; None for adversarial questions (their gold
    is a trap) and questions without a gold answer."""
    if category == "adversarial" or gold is None:
        return None
    return gold.split(";")[0].strip() if category == "open-domain" else gold


def locomo_f1(prediction: str, gold: str | None, category: str) -> float | None:
    """LoCoMo's per-question score by category (``eval_question_answering``)."""
    if category == "adversarial":
        return float(abstains(prediction))
    ref = reference_answer(gold, category)
    if ref is None:
        return None
    return float(f1_multi(prediction, ref) if category == "multi-hop" else f1_score(prediction, ref))


def bleu1(prediction: str, reference: str | None) -> float | None:
    """Sentence BLEU-1 (unigram precision x brevity penalty, nltk smoothing method1) on
    lowercased word/punctuation tokens; None without a reference."""
    if reference is None:
        return None
    pred, ref = _BLEU_TOKEN.findall(prediction.lower()), _BLEU_TOKEN.findall(reference.lower())
    if not pred or not ref:
        return 0.0
    return float(sentence_bleu([ref], pred, weights=(1, 0, 0, 0),
                               smoothing_function=SmoothingFunction().method1))


def paired_bootstrap(a: Sequence[float], b: Sequence[float], resamples: int = 10_000, seed: int = 0,
                     level: float = 0.95) -> tuple[float, float, float]:
    """Mean of ``a - b`` over paired items (the same questions, in the same order) and its
    percentile bootstrap interval: each resample draws items with replacement, the same
    draw for both systems. Returns (difference, low, high)."""
    d = np.asarray(a, dtype=float) - np.asarray(b, dtype=float)
    if len(a) != len(b) or d.ndim != 1 or not len(d):
        raise ValueError(f"paired_bootstrap needs two equally long, non-empty score lists, got {len(a)} and {len(b)}")
    draws = np.random.default_rng(seed).integers(0, len(d), size=(resamples, len(d)), dtype=np.int32)
    low, high = np.quantile(d[draws].mean(axis=1), [(1 - level) / 2, (1 + level) / 2])
    return float(d.mean()), float(low), float(high)
