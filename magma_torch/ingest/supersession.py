"""Knowledge updates for the heuristic consolidator: which earlier events a new one supersedes.

``FactRules`` reads first-person attribute statements (residence, employer, role, partner,
counts of pets/children/possessions, favourites) out of an event's text with the patterns of
``conf/supersession/<name>.yaml`` (the file documents the rules). ``UpdateTracker`` remembers,
per stream, speaker and attribute key, the events that state the current value; when a later
event of the same speaker states another value with a change cue ("now", "moved", "no
longer", ...), it supersedes them: a ``SupersessionLink`` later -> earlier, which the worker
validates and stores as a ``supersedes`` edge (the earlier event's valid time ends there).
Events are observed in time order; after an update, forget or backfill ``restate`` observes a
stream's remaining events again, in order, so its links are those an in-order ingest gives.
"""
from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from omegaconf import OmegaConf

from magma_torch.config import conf_root, group_options
from magma_torch.config.schema import ConfigError
from magma_torch.ingest.consolidator import SupersessionLink
from magma_torch.text.temporal import ABBREVIATIONS


@dataclass(frozen=True)
class Fact:
    key: str                # "residence", "count:cat", "favourite:food", ...
    value: str              # normalised value; "" for a negation that names none
    change: bool            # the pattern states a change ("moved to")
    cued: bool              # a change cue is in its sentence ("now")
    negates: bool           # it ends a fact rather than stating one
    cue: str


def load_rules(rules: str | Mapping) -> dict:
    """The rules of ``conf/supersession/<rules>.yaml``, or a mapping of the same shape; an unknown
    name (``consolidation.supersession``) raises ConfigError."""
    if isinstance(rules, str):
        file = conf_root() / "supersession" / f"{rules}.yaml"
        if not file.is_file():
            raise ConfigError(f"consolidation.supersession: unknown rules {rules!r}, no conf/supersession/{rules}.yaml "
                              f"(known: {', '.join(group_options('supersession'))}; null turns it off)")
        return OmegaConf.to_container(OmegaConf.create(file.read_text()), resolve=True)
    return OmegaConf.to_container(OmegaConf.create(dict(rules)), resolve=True)


def _words(words) -> re.Pattern:
    alt = "|".join(re.escape(w) for w in sorted(set(words), key=len, reverse=True))
    return re.compile(rf"\b(?:{alt})\b")


# Their period ends neither a sentence nor a clause: "st. louis" is a value, not "st".
_ABBREVIATION_PERIOD = rf"\b(?:{'|'.join(map(re.escape, ABBREVIATIONS))})\."
_SENTENCE = re.compile(rf"(?:{_ABBREVIATION_PERIOD}|[^.!?\n])+[.!?]*")
_CLAUSE = re.compile(rf"(?:{_ABBREVIATION_PERIOD}|(?!\s[-–—]\s)[^.,;:!?()\"\[\]])*")
_WORD = re.compile(r"[a-z0-9][a-z0-9'&.-]*")


# what a rules mapping must hold (conf/supersession/default.yaml documents each)
RULE_KEYS = ("confidence", "max_per_event", "value_words", "number_words", "plurals", "change_cues", "hedges",
             "value_skip", "value_stops", "kinds")
CONFIDENCES = ("change", "cue", "negates")
RULE_SHAPES = {"confidence": Mapping, "number_words": Mapping, "plurals": Mapping, "kinds": Mapping,
               "change_cues": list, "hedges": list, "value_skip": list, "value_stops": list}


def _shaped(value, shape: type, where: str):
    """``value`` when it is a ``shape`` (Mapping or list), else ConfigError naming where it sits in the rules
    (before: a TypeError or AttributeError when the rules were first read, e.g. for a kind left empty)."""
    if not isinstance(value, shape):
        raise ConfigError(f"consolidation.supersession: {where}: expected a {'mapping' if shape is Mapping else 'list'}"
                          f", got {value!r}")
    return value


def _require(mapping, keys, where: str = "") -> None:
    """A rules mapping (or the part of it at ``where``) that is no mapping, or lacks one of ``keys``, raises
    ConfigError naming consolidation.supersession and the keys missing, instead of a KeyError when the rules are
    first read."""
    missing = [k for k in keys if k not in _shaped(mapping, Mapping, where or "the rules")]
    if missing:
        at = f"{where}: " if where else ""
        raise ConfigError(f"consolidation.supersession: {at}no {', '.join(map(repr, missing))} "
                          "(conf/supersession/default.yaml shows the rules' keys)")


class FactRules:
    """Compiled rules: ``facts(text)`` lists the attribute statements of a text; a mapping without
    a key the rules need raises ConfigError naming it."""

    def __init__(self, rules: Mapping):
        _require(rules, RULE_KEYS)
        for key, shape in RULE_SHAPES.items():
            _shaped(rules[key], shape, key)
        _require(rules["confidence"], CONFIDENCES, "confidence")
        self.rules = dict(rules)
        self.confidence = dict(rules["confidence"])
        self.max_per_event = int(rules["max_per_event"])
        self.value_words = int(rules["value_words"])
        self.numbers = {str(k): int(v) for k, v in rules["number_words"].items()}
        self.plurals = dict(rules["plurals"])
        self.cues, self.hedges = _words(rules["change_cues"]), _words(rules["hedges"])
        self.skip, self.stops = set(rules["value_skip"]), set(rules["value_stops"])
        self.kinds = []
        for kind, spec in rules["kinds"].items():
            _require(spec, ("patterns",), f"kinds.{kind}")
            keys = set(spec.get("keys") or ()) or None
            for i, p in enumerate(_shaped(spec["patterns"], list, f"kinds.{kind}.patterns")):
                _require(p, ("pattern",), f"kinds.{kind}.patterns[{i}]")
                try:
                    rx = re.compile(p["pattern"])
                except re.error as err:
                    raise ConfigError(f"consolidation.supersession: kinds.{kind}: bad pattern {p['pattern']!r}: "
                                      f"{err}") from None
                if spec.get("key") and "key" not in rx.groupindex:   # else an IndexError at the first match
                    raise ConfigError(f"consolidation.supersession: kinds.{kind}: key: true, but pattern "
                                      f"{p['pattern']!r} has no named group (?P<key>...) to take the key from")
                self.kinds.append((kind, bool(spec.get("key")), keys, rx, p))

    def facts(self, text: str) -> list[Fact]:
        low = text.replace("’", "'").replace("‘", "'").lower()
        out = []
        for sent in _SENTENCE.finditer(low):
            s = sent.group(0)
            if s.rstrip().endswith("?"):
                continue
            for kind, keyed, keys, rx, p in self.kinds:
                for m in rx.finditer(s):
                    if self.hedges.search(s[:m.start()].split(",")[-1]):
                        continue
                    fact = self._fact(kind, keyed, keys, m, p, s, text[sent.start():sent.end()])
                    if fact is not None:
                        out.append(fact)
        return out

    def _fact(self, kind, keyed, keys, m: re.Match, p: Mapping, sentence: str, original: str) -> Fact | None:
        key = kind
        if keyed:
            words = m.group("key").split()
            noun = " ".join(words[:1] + [w for w in words[1:2] if w not in self.stops]) if keys is None else next(
                (n for n in map(self._singular, words) if n in keys), None)
            if noun is None:
                return None
            key = f"{kind}:{noun}"
        if "fixed" in p:
            value = str(p["fixed"])
        elif "value" in m.re.groupindex:
            value = self._count(m.group("value")) if kind == "count" else self._clean(m.group("value").split())
        else:
            value = self._after(sentence, m.end())
            if value and p.get("capitalised") and not original[m.end():m.end() + 1].isupper():
                return None
        negates = bool(p.get("negates"))
        if not value and not negates:
            return None
        return Fact(key, value, bool(p.get("change")), bool(self.cues.search(sentence)), negates,
                    f"{kind}: {m.group(0).strip()[:40]}")

    def _after(self, sentence: str, start: int) -> str:
        words = _WORD.findall(_CLAUSE.match(sentence, start).group())
        kept = []
        for w in words:
            if w in self.stops and kept:
                break
            if w in self.skip and not kept:
                continue
            kept.append(w.rstrip("."))
        return self._clean(kept[: self.value_words])

    def _clean(self, words: list[str]) -> str:
        while words and words[0] in self.skip:
            words = words[1:]
        return " ".join(words).strip(" '-")

    def _singular(self, word: str) -> str:
        word = self.plurals.get(word, word)
        return word[:-1] if word.endswith("s") and not word.endswith("ss") else word

    def _count(self, word: str) -> str:
        return str(self.numbers.get(word, word))

    def same_value(self, a: str, b: str) -> bool:
        """Two values name the same thing when the content words of one are among the other's
        ("boston" and "a suburb of boston", not "thai food" and "ethiopian food")."""
        wa, wb = set(a.split()) - self.skip - self.stops, set(b.split()) - self.skip - self.stops
        return a == b or bool(wa and wb) and (wa <= wb or wb <= wa)


class UpdateTracker:
    """Per stream, speaker and key: the events stating the current value (state_dict: JSON)."""

    def __init__(self, rules: str | Mapping):
        self.rules = FactRules(load_rules(rules))
        self._current: dict[str, dict[str, list]] = {}   # "stream\x1fspeaker" -> key -> [value, [event ids]]
        self._last: dict[str, int] = {}                   # stream -> the last event observed

    def observe(self, event: int, stream: str, speaker: str | None, text: str) -> list[SupersessionLink]:
        """Record event ``event``'s facts; returns the links to the earlier events it supersedes
        (events are observed in id order; at most ``max_per_event``, the most recent first).
        An event at or before its stream's last observed one was observed by ``restate`` in its
        place already (an updated or backfilled event consolidated again): it gives nothing."""
        if event <= self._last.get(stream, -1):
            return []
        self._last[stream] = event
        if speaker is None:
            return []
        facts = self.rules.facts(text)
        current = self._current.setdefault(f"{stream}\x1f{speaker}", {})
        links: dict[int, SupersessionLink] = {}
        conf = self.rules.confidence
        for f in facts:
            value, holders = current.get(f.key, ("", []))
            earlier = [e for e in holders if e != event]
            differs = not self.rules.same_value(f.value, value) if f.value else True
            if f.negates:
                if earlier and (not f.value or self.rules.same_value(f.value, value)):
                    for e in earlier:
                        links.setdefault(e, SupersessionLink(event, e, conf["negates"], f.cue))
                    current.pop(f.key, None)
                continue
            if holders and not differs:
                if event not in holders:
                    holders.append(event)
                continue
            if earlier and (f.change or f.cued):
                strength = conf["change"] if f.change else conf["cue"]
                for e in earlier:
                    links.setdefault(e, SupersessionLink(event, e, strength, f.cue))
            current[f.key] = [f.value, [event]]
        ranked = sorted(links.values(), key=lambda l: -l.earlier)
        return ranked[: self.rules.max_per_event]

    def restate(self, stream: str, events) -> dict[int, list[SupersessionLink]]:
        """Forget what stream ``stream`` stated and observe its events ``(id, speaker, text)`` again,
        in time order; returns each event's links (those with none left out)."""
        for who in [w for w in self._current if w.partition("\x1f")[0] == stream]:
            del self._current[who]
        self._last.pop(stream, None)
        links = {event: self.observe(event, stream, speaker, text) for event, speaker, text in events}
        return {event: found for event, found in links.items() if found}

    def renumber(self, moved) -> None:
        """Events were renumbered (``moved(old)``: the new id, -1 when forgotten or rewritten):
        a fact stated only by such events is no longer current, and a speaker left with no current
        fact is not kept (the name alone would survive the forget)."""
        for who, current in list(self._current.items()):
            for key, (value, holders) in list(current.items()):
                kept = [j for j in map(moved, holders) if j >= 0]
                if kept:
                    current[key] = [value, kept]
                else:
                    del current[key]
            if not current:
                del self._current[who]
        self._last = {stream: moved(e) for stream, e in self._last.items() if moved(e) >= 0}

    def state_dict(self) -> dict:
        return {"current": self._current, "last": self._last}

    def load_state_dict(self, state: dict | None) -> None:
        self._current = {k: {key: [v[0], list(v[1])] for key, v in d.items()}
                         for k, d in ((state or {}).get("current") or {}).items()}
        self._last = dict((state or {}).get("last") or {})
