"""Causal cue phrases (``CueConfig``: consolidation.cues) compiled once.

The heuristic consolidator finds causes with them; the LLM consolidator's prompt v3 keeps a
causal link only when the words it quotes from the event hold a result or reason cue, or the
other event asks a why-question that the event answers.
"""
from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

# Why-words that make a suggestion, not a question about a reason ("Why not try yoga?").
NOT_WHY = re.compile(r"\bwhy (?:not|don't|dont|do not|wouldn't)\b")
# A suggestion cancels only its own sentence's why-question ("Why did you move? Why not Rome?" asks one).
_SENTENCE = re.compile(r"[^.!?\n]+[.!?]*")


def norm(text: str) -> str:
    """Lower case with curly apostrophes straightened; keeps every character offset."""
    return text.replace("’", "'").replace("‘", "'").lower()


def _alternation(cues: Sequence[str]) -> re.Pattern | None:
    """One pattern matching any plain cue (none with '...') as whole words, the longest first."""
    plain = [norm(c) for c in cues if "..." not in c]
    alt = "|".join(re.escape(c) for c in sorted(set(plain), key=len, reverse=True))
    return re.compile(rf"(?<![\w']){'(?:' + alt + ')'}(?![\w'])") if plain else None


@dataclass(frozen=True)
class CuePatterns:
    result: re.Pattern | None               # a result cue opens the effect ("that's why", "so")
    reason: re.Pattern | None               # a reason clause follows ("because", "since")
    question: re.Pattern | None             # a why-question in the other speaker's turn
    gapped: tuple[tuple[str, re.Pattern], ...]   # 'a ... b' reason cues: b after a in one sentence
    weak: frozenset[str]                    # ambiguous cues, given lower confidence

    @classmethod
    def compile(cls, cues: Mapping[str, Sequence[str]]) -> "CuePatterns":
        gapped = []
        for cue in cues.get("reason", ()):
            if "..." in cue:
                head, tail = (p.strip() for p in norm(cue).split("...", 1))
                gapped.append((norm(cue), re.compile(
                    rf"\b{re.escape(head)}\b(?P<gap>[^.!?;]{{1,120}}?)\b{re.escape(tail)}\b")))
        return cls(_alternation(cues.get("result", ())), _alternation(cues.get("reason", ())),
                   _alternation(cues.get("question", ())), tuple(gapped),
                   frozenset(norm(c) for c in cues.get("weak", ())))

    def states_cause(self, text: str) -> bool:
        """``text`` holds a result or reason cue that is not one of the weak ones ("so" is as often
        "so inspiring" as "so I left"; the heuristic reads those by their place in the sentence)."""
        low = norm(text)
        hits = [m.group(0) for p in (self.result, self.reason) if p is not None for m in p.finditer(low)]
        hits += [cue for cue, rx in self.gapped if rx.search(low)]
        return any(h not in self.weak for h in hits)

    def asks_why(self, text: str) -> bool:
        """``text`` has a sentence that asks for a reason (not "why not ...")."""
        return self.question is not None and any(
            self.question.search(s) and not NOT_WHY.search(s) for s in _SENTENCE.findall(norm(text)))
