"""Turn-level evidence recall: by rank over distinct turns, and by context-token budget over blocks
taken in salience order as the linearisation takes them."""
import pytest

from magma_torch.eval.metrics import recall_all_at_k, recall_all_at_tokens, recall_any_at_k, within_budget


def test_recall_at_k_counts_distinct_turns():
    retrieved = ["D1:1", "D1:1", "D1:2", "D1:3"]
    assert recall_all_at_k(retrieved, ["D1:1", "D1:2"], 2) == 1.0       # the repeat takes no rank
    assert recall_all_at_k(retrieved, ["D1:1", "D1:3"], 2) == 0.0
    assert recall_any_at_k(retrieved, ["D1:3", "D9:9"], 3) == 1.0
    assert recall_any_at_k(retrieved, ["D9:9"], 10) == 0.0


def test_blocks_are_taken_while_they_fit_and_the_first_always():
    sources, tokens = [["D1:1"], ["D1:2", "D1:3"], ["D1:4"], ["D1:5"]], [40, 50, 30, 5]
    assert within_budget(sources, tokens, 100) == ["D1:1", "D1:2", "D1:3"]   # stops at the first that does not fit
    assert within_budget(sources, tokens, 10) == ["D1:1"]                     # shown, cut to fit
    assert recall_all_at_tokens(sources, tokens, ["D1:1", "D1:3"], 90) == 1.0
    assert recall_all_at_tokens(sources, tokens, ["D1:1", "D1:4"], 119) == 0.0


@pytest.mark.parametrize("first", [[], ["D0:1"]])
def test_a_later_block_counts_only_when_it_fits(first):
    assert within_budget([first, ["D1:2"]], [500, 2000], 1000) == first
    assert recall_all_at_tokens([first, ["D1:2"]], [500, 2000], ["D1:2"], 1000) == 0.0
