"""LoCoMo's official answer F1 and BLEU-1, against hand-computed values."""
import math

import pytest

from magma_torch.eval.qa_metrics import bleu1, f1_multi, f1_score, locomo_f1, normalize_answer


@pytest.mark.parametrize("text,expected", [
    ("The Cat, sat!", "cat sat"),               # commas dropped, punctuation, articles
    ("Paris and  London.", "paris london"),     # LoCoMo's article list includes 'and'
    ("an apple a day", "apple day"),
    ("Theatre", "theatre"),                     # word boundaries: 'the' inside a word stays
])
def test_normalize_answer(text, expected):
    assert normalize_answer(text) == expected


@pytest.mark.parametrize("pred,gold,expected", [
    ("The cat sat", "a cat sat", 1.0),
    ("running dogs", "dog runs", 1.0),                            # Porter stems: run, dog
    ("7 May 2023", "May 7, 2023", 1.0),                           # bag of tokens
    ("Paris and London", "London", 2 / 3),                        # p=1/2, r=1
    ("She went to the beach yesterday", "beach", 1 / 3),          # p=1/5, r=1
    ("mountains", "the mountain trip", 2 / 3),                    # p=1, r=1/2
    ("", "anything", 0.0),
    ("cats", "dogs", 0.0),
])
def test_f1_score(pred, gold, expected):
    assert f1_score(pred, gold) == pytest.approx(expected)


@pytest.mark.parametrize("pred,gold,expected", [
    ("pottery, painting", "painting, pottery, swimming", 2 / 3),  # 1, 1, 0 per gold part
    ("pottery and painting", "pottery, painting", 2 / 3),         # one prediction part, 2/3 each
    ("painting", "painting", 1.0),
    ("camping, hiking, beach", "beach", 1.0),                     # best prediction part per gold
])
def test_f1_multi_averages_best_match_per_gold_part(pred, gold, expected):
    assert f1_multi(pred, gold) == pytest.approx(expected)


@pytest.mark.parametrize("pred,gold,category,expected", [
    ("pottery, painting", "painting, pottery, swimming", "multi-hop", 2 / 3),
    ("pottery, painting", "painting, pottery, swimming", "single-hop", 0.8),  # no split: p=1, r=2/3
    ("Likely yes", "Likely yes; she enjoys the outdoors", "open-domain", 1.0),  # first ';' part only
    ("7 May 2023", "7 May 2023", "temporal", 1.0),
    # adversarial: the gold is the trap answer; only an abstention scores
    ("Not mentioned in the conversation.", "a trap answer", "adversarial", 1.0),
    ("There is no information available.", "a trap answer", "adversarial", 1.0),
    ("a trap answer", "a trap answer", "adversarial", 0.0),
    ("", "a trap answer", "adversarial", 0.0),
    ("anything", None, "single-hop", None),
])
def test_locomo_f1_by_category(pred, gold, category, expected):
    got = locomo_f1(pred, gold, category)
    assert got == (None if expected is None else pytest.approx(expected))


@pytest.mark.parametrize("pred,ref,expected", [
    ("the cat sat on the mat", "the cat sat on the mat", 1.0),
    ("the cat", "the cat sat on the mat", math.exp(1 - 6 / 2)),   # precision 1, brevity penalty
    ("the cat sat on the mat today", "the cat sat", 3 / 7),       # clipped counts: one 'the'
    ("Yes!", "yes", 0.5),                                          # '!' is a token; lowercased
    ("dog", "cat", 0.0),
    ("", "cat", 0.0),
    ("cat", None, None),
])
def test_bleu1(pred, ref, expected):
    got = bleu1(pred, ref)
    assert got == (None if expected is None else pytest.approx(expected))
