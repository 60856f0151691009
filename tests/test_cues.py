"""ingest/cues.py: the causal cue phrases of consolidation.cues, compiled once."""
from dataclasses import asdict

import pytest

from magma_torch.config.schema import CueConfig
from magma_torch.ingest.cues import CuePatterns

CUES = CuePatterns.compile(asdict(CueConfig()))


@pytest.mark.parametrize("text, stated", [
    ("Because the bakery closed", True),
    ("I chose them ’cause they help", True),              # curly apostrophe, a reason cue
    ("That's why I moved", True),
    ("after the talk I decided to go", True),             # a gapped cue: 'after ... decided'
    ("The stories were so inspiring!", False),            # 'so' is weak: an intensifier as often as a result
    ("so I left", False),
    ("Thanks", False),
    ("becausewhy", False),                                # whole words only
])
def test_states_cause(text, stated):
    assert CUES.states_cause(text) is stated


@pytest.mark.parametrize("text, asked", [
    ("What made you pick it?", True),
    ("Why did you go?", True),
    ("Why not try yoga?", False),                         # a suggestion, not a question about a reason
    ("Why did you move to Paris? Why not Rome?", True),   # the suggestion cancels only its own sentence
    ("What happened?", False),
])
def test_asks_why(text, asked):
    assert CUES.asks_why(text) is asked


def test_no_cues_match_nothing():
    empty = CuePatterns.compile({})
    assert not empty.states_cause("because") and not empty.asks_why("why?")
