"""LLM-free slow-path consolidation: entity mentions and causal links from surface cues.

`HeuristicConsolidator.propose` turns a batch of new events into one `Proposal` each:

- entities: the speaker; proper names (capitalised runs not at sentence start, or names
  already known in the stream anywhere; possessives stripped); recurring noun phrases
  (1-2 content words, stemmed key) once they occur in `min_phrase_count` events of the
  stream. When a phrase first reaches the threshold, the earlier events that held it get
  the mention too: inside the batch it goes into their proposals, for events of earlier
  batches it is queued for `backfill()`.
- causal links: an explicit discourse cue in the current turn ("that's why", "because",
  "after ... decided") plus a lexically related earlier event of the same stream within
  the window (stemmed content-word cosine >= `min_overlap`, >= `min_shared` shared stems,
  questions ignored) gives cause = that earlier event, effect = the current one; the
  answer to a why-question is labelled "why-answer:<cue>". Causes are always strictly
  earlier events of the same stream, so the causal graph stays acyclic by construction.

The proposer is stateful (phrase counts, known names, pending backfills) and
`state_dict`/`load_state_dict` round-trip that state through JSON.
"""
from __future__ import annotations

import math
import re
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import datetime

import Stemmer


@dataclass(frozen=True)
class EventView:
    id: int                 # global event id; ids increase in ingest order
    text: str
    speaker: str | None
    stream: str             # conversation / stream id; causal links only within a stream
    timestamp: datetime


@dataclass(frozen=True)
class EntityMention:
    name: str               # canonical key, e.g. "caroline", "support group", "max"
    kind: str               # "speaker" | "name" | "phrase"
    surface: str            # as written, for display


@dataclass(frozen=True)
class CausalLink:
    cause: int              # event id
    effect: int             # event id
    confidence: float       # in (0, 1]
    cue: str                # the discourse cue that triggered it, e.g. "that's why"


@dataclass
class Proposal:
    event_id: int
    entities: list[EntityMention]
    causal: list[CausalLink]


# Defaults mirrored in conf/consolidation/heuristic.yaml (a test checks they agree).
DEFAULT_CUES: dict[str, list[str]] = {
    # Point back to an earlier reason: the current turn is the effect.
    "result": ["so", "that's why", "that is why", "this is why", "which is why", "as a result",
               "because of that", "because of this", "because of it", "it led to", "that led to",
               "which led to", "led me to", "ended up", "that made me", "it made me",
               "that inspired me", "it inspired me", "therefore"],
    # Introduce the reason clause, which is matched against earlier events.
    "reason": ["because", "since", "due to", "thanks to", "as a result of", "inspired by",
               "motivated by", "after ... decided", "after ... realized", "after ... started"],
    # A why-question in the previous turn makes a cue in the answer more trustworthy.
    "question": ["why", "what made you", "how come", "what inspired you", "what motivated you",
                 "what got you", "what led you"],
    # Ambiguous cues (discourse "so", temporal "since") get lower confidence.
    "weak": ["so", "since", "ended up", "thanks to", "after ... started"],
}

_PRONOUNS = """i me my mine myself you your yours yourself yourselves he him his himself she her hers
herself it its itself we us our ours ourselves they them their theirs themselves""".split()
_DAYS_MONTHS = """monday tuesday wednesday thursday friday saturday sunday mon tue tues wed thu thur
thurs fri sat sun january february march april may june july august september october november
december jan feb mar apr jun jul aug sep sept oct nov dec today tomorrow yesterday tonight
weekend""".split()
_INTERJECTIONS = """hi hey hello hiya howdy bye goodbye morning evening afternoon night welcome wow
whoa woah oh ooh oops ah aha aww awww aw yeah yea yep yup yes no nope nah ok okay thanks thank
thx congrats congratulations cheers sorry please hmm hm um uh haha hah lol omg gosh geez yay
hooray great cool awesome nice sure well right alright absolutely totally definitely exactly
indeed amazing wonderful fantastic sweet dear damn anyway btw""".split()
# Kin terms are often capitalised as forms of address but are not names of their own.
_KIN = "mom mum mommy dad daddy mama papa grandma grandpa granny nana sis bro".split()
_FUNCTION = """a an the and or but nor if then else when while where whereas what which who whom
whose why how that this these those there here to of in on at by for from with without about
into onto over under above below up down out off through during before after since until till
as than so too very just also only even still yet again ever never always often sometimes
usually really quite pretty rather much many more most less least few lot lots some any all
both each every either neither none no not nothing something anything everything someone
anyone everyone somebody anybody everybody am is are was were be been being have has had having
do does did doing done can could will would shall should may might must let lets ok gonna
wanna gotta got get gets getting go goes going went gone come comes came coming make makes
made making take takes took taking say says said tell told see saw seen look looks looking
know knew known think thought feel feels felt feeling want wants wanted like likes liked love
loves loved need needs needed try tried trying keep kept use used give gave find found mean
means meant seem seems seemed sound sounds sounded hope hoped glad happy sad proud excited
sure true real kind sort bit one two three first last next new old other another same own
such way ways thing things stuff time times day days week weeks month months year years lot
moment while today tonight people person guy guys folks everyone good great nice cool
awesome amazing wonderful fantastic incredible beautiful fun lovely special important hard
big small little long able well better best bad worse worst tough whole part place back
around away yes yeah yep okay thanks thank hey hello hi wow oh ah haha lol because though
although however anyway actually basically definitely totally absolutely exactly probably
maybe perhaps literally honestly seriously especially finally recently lately soon now
currently already almost enough instead together else every glad cause""".split()
_NON_NAMES = frozenset(_PRONOUNS + _DAYS_MONTHS + _INTERJECTIONS + _KIN + _FUNCTION)
# Words too generic to anchor an entity node or a lexical match.
_STOP = frozenset(_FUNCTION + _PRONOUNS + _DAYS_MONTHS + _INTERJECTIONS + """
ago else etc let's stuff things anything lots bunch experience experiences life world
idea ideas part parts end start started starting begin began reason reasons fact question
questions answer chance chances sense point talk talking talked chat chatting catch caught
share shared sharing hear heard glad appreciate appreciated reminds remind reminded mind
totally super awesome excited exciting interesting cute wish wishes luck happen happened
happening happens care cares cared believe believed keep keeps keeping
""".split())
# Stems too broad to be an entity alone, but fine inside a two-word phrase ("support group").
_GENERIC = frozenset("""support work working worked help helps helped helping helpful different
difference inspiring inspired inspiration inspire motivation motivated motivating motivate stay
stayed staying bring brings brought show shows showed wait waiting positive positivity joy
enjoy enjoyed enjoying passion passionate dream dreams pic pics picture pictures photo photos
play playing played plan plans planning goal goals hobby hobbies activity activities memories
memory moments journey progress success successful opportunity chance challenge challenges
challenging fun exciting feelings emotions energy peace peaceful calm comfort happiness
proud pride friends friend spend spent spending learn learned learning dedication effort
hard-work rewarding community awesome cool incredible beautiful sweet stunning gorgeous glad
keep sharing share vibe vibes see push watch create word words other others""".split())
_GENERIC = frozenset(Stemmer.Stemmer("english").stemWords(list(_GENERIC)))
# Lowercase words that may join capitalised words into one name.
_NAME_LINKS = frozenset({"of", "the", "and", "de", "van", "von", "la", "le"})
_SUBJECTS = frozenset("""i i'm i've i'd i'll we we're we've we'd we'll you you're you've he he's
she she's they they're they've it it's my our your his her their the that that's this now
there there's mom dad""".split())
# "since" is temporal when it anchors a time point rather than giving a reason.
_SINCE_TEMPORAL_NEXT = frozenset("""then last childhood high college school i'm
forever ever birth day yesterday early""".split()) | frozenset(_DAYS_MONTHS)
_SINCE_TEMPORAL_CLAUSE = re.compile(r"^(?:\w+ (?:was|were|last|first)|we met|i met)\b")
_PERFECT = re.compile(r"\b(?:have|has|had|haven't|hasn't|hadn't|'ve|been|ever|long)\b")

_WORD = r"[A-Za-z][A-Za-z'\-]*[A-Za-z]|[A-Za-z]"
_TOKEN = re.compile(rf"({_WORD})|(\d[\d,.:]*)|([.!?]+)|([,;:()\"“”—–]|\s-\s)")
_CONTENT = re.compile(_WORD)
_POSSESSIVE = re.compile(r"(?<=\w\w)'s$")
_CLAUSE_END = re.compile(r"[.!?;]|,\s*(?:so|but|and|which)\b|\s(?:but|and so)\s")
_SENT_END = re.compile(r"[.!?]+")
_STATEMENT = re.compile(r"([^.!?]+)([.!?]*)")
_CLAUSE_START = re.compile(r"(?:^|[,.;:!?—–(\"]|\s-|\band|\bbut)\s*$")


def _stem_key(stemmer: Stemmer.Stemmer, words: Sequence[str]) -> str:
    return " ".join(stemmer.stemWords(list(words)))


class _Stream:
    """Per-stream knowledge: speakers, names seen mid-sentence, phrase counts, pending phrases."""

    def __init__(self):
        self.speakers: dict[str, str] = {}              # key -> surface
        self.names: set[str] = set()                    # single-token name keys
        self.counts: dict[str, int] = {}                # phrase key -> events containing it
        self.pending: dict[str, list[list]] = {}        # below-threshold key -> [[event id, surface]]

    def to_json(self) -> dict:
        return {"speakers": self.speakers, "names": sorted(self.names), "counts": self.counts,
                "pending": self.pending}

    @classmethod
    def from_json(cls, d: dict) -> _Stream:
        s = cls()
        s.speakers, s.names = dict(d["speakers"]), set(d["names"])
        s.counts = dict(d["counts"])
        s.pending = {k: [list(e) for e in v] for k, v in d["pending"].items()}
        return s


class HeuristicConsolidator:
    """Stateful proposer of entity mentions and causal links; see the module docstring."""

    def __init__(self, window: int = 6, min_phrase_count: int = 2, max_entities_per_event: int = 12,
                 max_causal_per_event: int = 3, min_overlap: float = 0.2,
                 cues: Mapping[str, list[str]] | None = None, min_shared: int = 2):
        self.window, self.min_phrase_count = window, min_phrase_count
        self.max_entities_per_event, self.max_causal_per_event = max_entities_per_event, max_causal_per_event
        self.min_overlap, self.min_shared = min_overlap, min_shared
        cues = DEFAULT_CUES if cues is None else cues
        self.cues = {k: list(cues.get(k, ())) for k in ("result", "reason", "question", "weak")}
        self._stemmer = Stemmer.Stemmer("english")
        self._compile()
        self._streams: dict[str, _Stream] = {}
        self._room: dict[int, int] = {}                 # event id -> free entity slots, for events with pending phrases
        self._backfill: list[tuple[int, EntityMention]] = []
        self._stems: OrderedDict[int, frozenset[str]] = OrderedDict()

    def _compile(self) -> None:
        self._cls: dict[str, str] = {}
        plain, self._gapped = [], []
        for cls in ("result", "reason"):
            for cue in self.cues[cls]:
                cue = cue.lower().replace("’", "'")
                if cue in self._cls:
                    continue
                self._cls[cue] = cls
                if "..." in cue:
                    head, tail = (p.strip() for p in cue.split("...", 1))
                    self._gapped.append((cue, re.compile(
                        rf"\b{re.escape(head)}\b(?P<gap>[^.!?;]{{1,120}}?)\b{re.escape(tail)}\b")))
                else:
                    plain.append(cue)
        # Longest first so "because of that" (result) wins over "because" (reason).
        alt = "|".join(re.escape(c) for c in sorted(plain, key=len, reverse=True))
        self._plain = re.compile(rf"\b(?:{alt})\b") if plain else None
        qs = "|".join(re.escape(q.lower()) for q in self.cues["question"])
        self._question = re.compile(rf"\b(?:{qs})\b") if qs else None
        self._weak = {c.lower().replace("’", "'") for c in self.cues["weak"]}

    # ------------------------------------------------------------------ entities

    def _stream(self, name: str) -> _Stream:
        if name not in self._streams:
            self._streams[name] = _Stream()
        return self._streams[name]

    def _name_key(self, st: _Stream, words: list[str]) -> str:
        key = " ".join(w.lower() for w in words)
        if key in st.speakers:
            return key
        # A short form of exactly one speaker's name ("Mel" for "Melanie") is that speaker.
        if len(words) == 1 and len(key) >= 3:
            hits = [s for s in st.speakers if s.startswith(key)]
            if len(hits) == 1:
                return hits[0]
        return key

    def _scan(self, st: _Stream, text: str) -> tuple[list[tuple[str, str]], list[tuple[str, str, int]]]:
        """(names as (key, surface), phrase candidates as (key, surface, n_words)) in text order."""
        toks = list(_TOKEN.finditer(text.replace("’", "'")))
        names: list[tuple[str, str]] = []
        words: list[str | None] = []        # lowercased content words; None marks a break
        run: list[str] = []
        start = True

        def close():
            if run:
                names.append((self._name_key(st, run), " ".join(run)))
                run.clear()

        def capital(m) -> bool:
            tok = m.group(1)
            return bool(tok) and tok[0].isupper() and "'" not in _POSSESSIVE.sub("", tok) \
                and _POSSESSIVE.sub("", tok).lower() not in _NON_NAMES

        for i, m in enumerate(toks):
            tok = m.group(1)
            if tok is None:
                close()
                words.append(None)
                start = start or m.group(3) is not None
                continue
            base = _POSSESSIVE.sub("", tok)
            low = base.lower()
            if capital(m) and (not start or low in st.speakers or low in st.names):
                run.append(base)
                words.append(None)
                if base != tok:
                    close()
            elif run and low in _NAME_LINKS and self._links_to_name(toks, i, capital):
                run.append(tok)             # "Lord of the Rings", "Bank of America"
                words.append(None)
            else:
                close()
                content = ("'" not in base and len(low) >= 3 and low not in _STOP
                           and low not in st.speakers and low not in st.names)
                words.append(low if content else None)
            start = False
        close()
        phrases: list[tuple[str, str, int]] = []
        for i, w in enumerate(words):
            if w is None:
                continue
            key = _stem_key(self._stemmer, [w])
            if key not in _GENERIC:
                phrases.append((key, w, 1))
            if i + 1 < len(words) and words[i + 1] is not None:
                pair = [w, words[i + 1]]
                phrases.append((_stem_key(self._stemmer, pair), " ".join(pair), 2))
        return names, phrases

    @staticmethod
    def _links_to_name(toks: list, i: int, capital) -> bool:
        j = i + 1
        while j < len(toks) and (toks[j].group(1) or "").lower() in _NAME_LINKS:
            j += 1
        return j < len(toks) and capital(toks[j])

    def _entities(self, ev: EventView, props: dict[int, Proposal]) -> list[EntityMention]:
        st = self._stream(ev.stream)
        out: list[EntityMention] = []
        seen: set[str] = set()
        if ev.speaker:
            key = ev.speaker.strip().lower()
            st.speakers.setdefault(key, ev.speaker.strip())
            out.append(EntityMention(key, "speaker", ev.speaker.strip()))
            seen.add(key)
        names, phrases = self._scan(st, ev.text)
        for key, surface in names:
            if " " not in key:
                st.names.add(key)
            if key not in seen:
                seen.add(key)
                out.append(EntityMention(key, "name", surface))
        cap = self.max_entities_per_event
        del out[cap:]
        ready: list[tuple[int, int, int, str, str]] = []
        below: list[tuple[str, str]] = []
        done: set[str] = set()
        for pos, (key, surface, n) in enumerate(phrases):
            if key in done or key in seen:
                continue
            done.add(key)
            count = st.counts.get(key, 0) + 1
            st.counts[key] = count
            if count < self.min_phrase_count:
                below.append((key, surface))
                continue
            if count == self.min_phrase_count:
                self._release(st, key, props)
            # Two-word phrases and rarer phrases are more specific, so they take free slots first.
            ready.append((-n, count, pos, key, surface))
        for *_, key, surface in sorted(ready)[:max(0, cap - len(out))]:
            out.append(EntityMention(key, "phrase", surface))
        room = cap - len(out)
        if room > 0 and below:
            self._room[ev.id] = room
            for key, surface in below:
                st.pending.setdefault(key, []).append([ev.id, surface])
        return out

    def _release(self, st: _Stream, key: str, props: dict[int, Proposal]) -> None:
        """A phrase just reached the threshold: give it to the earlier events that held it."""
        for eid, surface in st.pending.pop(key, []):
            room = self._room.get(eid, 0)
            if room <= 0:
                continue
            mention = EntityMention(key, "phrase", surface)
            if eid in props:
                props[eid].entities.append(mention)
            else:
                self._backfill.append((eid, mention))
            if room == 1:
                del self._room[eid]
            else:
                self._room[eid] = room - 1

    def backfill(self) -> list[tuple[int, EntityMention]]:
        """(older event id, phrase mention) pairs for events of earlier batches whose phrase
        reached `min_phrase_count` since the last call; the queue is emptied. Mentions for
        events in the same batch go straight into their proposals instead. Backfilled
        mentions respect `max_entities_per_event`."""
        out, self._backfill = self._backfill, []
        return out

    # ------------------------------------------------------------------ causal links

    def _content(self, text: str) -> frozenset[str]:
        words = [w.lower() for w in _CONTENT.findall(text.replace("’", "'"))]
        words = [w for w in words if len(w) >= 3 and "'" not in w and w not in _STOP]
        return frozenset(self._stemmer.stemWords(words))

    def _event_stems(self, ev: EventView) -> frozenset[str]:
        """Content stems of the event's statements; questions assert nothing that could be a cause."""
        stems = self._stems.get(ev.id)
        if stems is None:
            stated = " ".join(m.group(1) for m in _STATEMENT.finditer(ev.text) if not m.group(2).startswith("?"))
            stems = self._stems[ev.id] = self._content(stated)
            # Only the recent window is ever looked up again; bound the cache.
            while len(self._stems) > 4096:
                self._stems.popitem(last=False)
        return stems

    def _hits(self, text: str, speakers: frozenset[str]) -> list[tuple[str, str, str]]:
        """(class, cue, query text) per usable cue occurrence in the turn."""
        low = text.lower().replace("’", "'")
        found: list[tuple[int, int, str, str]] = []   # start, end, cue, query
        if self._plain is not None:
            for m in self._plain.finditer(low):
                found.append((m.start(), m.end(), m.group(0), ""))
        for cue, rx in self._gapped:
            for m in rx.finditer(low):
                found.append((m.start(), m.end(), cue, m.group("gap")))
        hits = []
        for start, end, cue, gap in sorted(found):
            sent_end = _SENT_END.search(low, end)
            if sent_end and "?" in sent_end.group(0):
                continue                                   # questioning a cause is not asserting one
            before, after = low[:start], low[end:]
            cls = self._cls[cue]
            if cls == "result":
                # Only a result cue near the turn's start points to earlier turns ("Yeah, it's
                # tough. So I ..."); later in the turn its cause is the same event's own clause.
                if len(self._content(before) - speakers) > 1:
                    continue
                if " " not in cue and not self._clause_initial(before, after):
                    continue
                query = text
            elif gap:
                query = gap
            else:
                if cue == "since" and self._temporal_since(before, after):
                    continue
                stop = _CLAUSE_END.search(after)
                query = after[:stop.start()] if stop else after
            hits.append((cls, cue, query))
        return hits

    @staticmethod
    def _clause_initial(before: str, after: str) -> bool:
        # One-word result cues ("so") only count as "<clause start> so <subject> ...".
        nxt = after.split(None, 1)
        return bool(_CLAUSE_START.search(before)) and bool(nxt) and nxt[0].strip(",") in _SUBJECTS

    @staticmethod
    def _temporal_since(before: str, after: str) -> bool:
        nxt = after.split(None, 1)
        if not nxt or nxt[0][0].isdigit() or nxt[0] in _SINCE_TEMPORAL_NEXT or _SINCE_TEMPORAL_CLAUSE.match(after.lstrip()):
            return True
        clause = re.split(r"[.!?;,]", before)[-1]
        return bool(_PERFECT.search(clause))

    def _causal(self, ev: EventView, context: Sequence[EventView]) -> list[CausalLink]:
        window = [c for c in context if c.stream == ev.stream and c.id < ev.id][-self.window:]
        if not window:
            return []
        speakers = frozenset(self._stemmer.stemWords(list(self._stream(ev.stream).speakers)))
        hits = self._hits(ev.text, speakers)
        if not hits:
            return []
        prev = window[-1]
        why = (self._question is not None and prev.speaker != ev.speaker and "?" in prev.text
               and self._question.search(prev.text.lower().replace("’", "'")) is not None)
        if why:
            # The question restates the effect; its cause is elsewhere.
            window = window[:-1]
        best: dict[int, CausalLink] = {}
        for cls, cue, query in hits:
            q = self._content(query) - speakers
            if not q:
                continue
            pick, score = None, 0.0
            for c in reversed(window):                   # newest first: ties go to the most recent
                w = self._event_stems(c) - speakers
                if not w:
                    continue
                shared = len(q & w)
                s = shared / math.sqrt(len(q) * len(w))
                if shared >= min(self.min_shared, len(q)) and s > score:
                    pick, score = c, s
            if pick is None or score < self.min_overlap:
                continue
            strength = (0.5 if cue in self._weak else 0.8) + (0.1 if why else 0.0)
            conf = round(strength * (0.5 + 0.5 * min(1.0, score)), 4)
            link = CausalLink(pick.id, ev.id, conf, f"why-answer:{cue}" if why else cue)
            if pick.id not in best or best[pick.id].confidence < conf:
                best[pick.id] = link
        links = sorted(best.values(), key=lambda l: (-l.confidence, -l.cause))
        return links[:self.max_causal_per_event]

    # ------------------------------------------------------------------ API

    def propose(self, batch: Sequence[EventView], context: Mapping[int, Sequence[EventView]]) -> list[Proposal]:
        """One Proposal per event in batch. context[event.id] = the up-to-`window` preceding
        events of the same stream (oldest first), which may include events of earlier batches."""
        props: dict[int, Proposal] = {}
        for ev in batch:
            props[ev.id] = Proposal(ev.id, [], [])
            props[ev.id].entities = self._entities(ev, props)
            props[ev.id].causal = self._causal(ev, context.get(ev.id, ()))
        return [props[ev.id] for ev in batch]

    def state_dict(self) -> dict:
        """JSON-serialisable state; the stem cache is derived from event text and left out."""
        return {"streams": {k: s.to_json() for k, s in self._streams.items()},
                "room": {str(k): v for k, v in self._room.items()},
                "backfill": [[eid, asdict(m)] for eid, m in self._backfill]}

    def load_state_dict(self, state: dict) -> None:
        self._streams = {k: _Stream.from_json(v) for k, v in state["streams"].items()}
        self._room = {int(k): v for k, v in state["room"].items()}
        self._backfill = [(eid, EntityMention(**m)) for eid, m in state["backfill"]]
        self._stems.clear()
