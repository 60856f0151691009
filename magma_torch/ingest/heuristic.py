"""LLM-free slow-path consolidation: entity mentions and causal links from one spaCy pass.

`HeuristicConsolidator.propose` parses a batch of events with spaCy's small English
pipeline (`magma_torch.ingest.nlp`, one `nlp.pipe` call per batch) and turns each event
into one `Proposal`:

- entities: people, places, organisations, works and products from spaCy's named
  entities (determiners, possessives and interjections trimmed; a capitalised
  sentence-initial word the stream also writes in lower case is not a name), and
  objects and activities from noun chunks (compound + lemma of the head: "violins" ->
  "violin", "my LGBTQ support groups" -> "lgbtq support group" and "support group"'s
  head is generic, so only the compound) and from gerunds after verbs such as "go",
  "love", "started" ("go camping" -> "camping"). Generic nouns ("thing", "time", "day",
  "fun") are never entities. Keys are lower case; the surface is kept as written.
  Speakers are event attributes, never entity nodes: a named entity equal to a speaker
  of the stream, or a short form of exactly one speaker's name ("Mel" for "Melanie"),
  is dropped; a short form of exactly one other person the stream has named maps to that
  person. Common-noun entities need `min_phrase_count` events of the stream; when one
  reaches it, earlier events get the mention through `backfill()`. What each event counted
  (its named mentions and phrases) is recorded, so the counts follow the stored events: a
  forgotten or corrected event's phrases are no longer counted, and `restate_mentions`
  derives a stream's mentions again as an in-order ingest of its events gives them.
- causal links (cause -> effect; always a strictly earlier event of the same stream,
  so the causal graph stays acyclic by construction). A reason stated inside one turn
  cannot be an edge to itself, so a link joins the turn to the earlier turn the
  reason or consequence concerns:
  * ``why-answer``: the previous turn (another speaker) asks a why-question ("why",
    "what made you", "what inspired you", ...) and this turn answers it with a
    statement: question -> answer (the answer gives the reason for what the question
    asks about);
  * ``result`` cues at the start of a turn ("that's why", "it made me", "so I"):
    the previous turn is the cause, this turn the effect ("so" needs a shared content
    lemma with it);
  * ``reason`` cues ("because", "'cause", "since", "after ... decided") whose reason
    clause restates an earlier turn of the window (lemma overlap >= `min_overlap`, at
    least `min_shared` shared content lemmas): that turn is the cause.

- supersession links (later -> earlier event): knowledge updates of the same speaker about
  the same attribute (``magma_torch.ingest.supersession``, rules in conf/supersession/).

The proposer is stateful (names and lower-case words seen per stream, what each event counted,
pending backfills) and `state_dict`/`load_state_dict` round-trip that state through JSON.
"""
from __future__ import annotations

import math
import re
from collections import Counter, OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass

from magma_torch.config.schema import HeuristicConsolidationConfig, check
from magma_torch.ingest import nlp
from magma_torch.ingest.consolidator import CausalLink, EntityMention, EventView, Proposal, SupersessionLink
from magma_torch.ingest.cues import CuePatterns, norm
from magma_torch.ingest.supersession import UpdateTracker


_DEFAULTS = HeuristicConsolidationConfig()   # every setting's default (config/schema.py)

_PRONOUNS = """i me my mine myself you your yours yourself yourselves he him his himself she her hers
herself it its itself we us our ours ourselves they them their theirs themselves""".split()
_DAYS_MONTHS = """monday tuesday wednesday thursday friday saturday sunday mon tue tues wed thu thur
thurs fri sat sun january february march april may june july august september october november
december jan feb mar apr jun jul aug sep sept oct nov dec today tomorrow yesterday tonight
weekend""".split()
_INTERJECTIONS = """hi hey hello hiya howdy bye goodbye morning evening afternoon night welcome wow
whoa woah woohoo oh ooh oops ah aha aww awww aw yeah yea yep yup yes no nope nah ok okay thanks
thank thx congrats congratulations cheers sorry please hmm hm um uh haha hah lol omg gosh geez yay
hooray great cool awesome nice sure well right alright absolutely totally definitely exactly
indeed amazing wonderful fantastic sweet dear damn anyway btw glad wanna gonna bummer cherish
ya yo dude buddy""".split()
# Kin terms are often capitalised as forms of address but are not names of their own.
_KIN = "mom mum mommy dad daddy mama papa grandma grandpa granny nana sis bro".split()
_NON_NAMES = frozenset(_PRONOUNS + _DAYS_MONTHS + _INTERJECTIONS + _KIN)

# Nouns too generic to be an entity on their own (lemmas). They still head a compound
# ("support group", "dance class"). Chosen by reading the most frequent nouns of chat text
# and of image captions ("[shares an image: a man sitting at a table]").
GENERIC_NOUNS = frozenset("""
thank thanks congrat congratulation time times lot lots way thing stuff difference life love
moment fun dream pic pics picture photo photos experience joy day night morning evening week
weekend month year today tomorrow yesterday tonight other others world part journey impact idea
word place passion memory goal one help kind sort bit piece ton bunch blast challenge feeling
plan reminder progress self change beauty worry success peace energy advice mind talk break
chance spot problem connection opportunity hope sense while see favorite favourite view
dedication balance list emotion inspiration determination courage hand news bond effort future
note need luck name move effect area positivity option back face tip cheer importance heart path
right guy guys folk folks people person go mix vibe vibes atmosphere chill thought motivation
setback shot act track offer resource process struggle pride chat resilience strength kindness
happiness comfort power growth step skill creativity understanding reality activity activities
support work matter question answer reason point end start beginning level aspect deal type
case example fact rest lesson look glimpse sight feel touch tear smile laugh hug yes no ok
something anything everything nothing someone anyone everyone anybody somebody everybody
excitement fact group place places friend friends buddy pal stuff everyday lifetime care doubt gut
load chapter issue voice event cause reaction conversation backing outlet expression empathy ally thinkin
image photography background man woman girl boy table closeup close
""".split())
# Abstract nouns ("kindness", "positivity", "acceptance") name no thing of their own; they still
# take part in compounds ("LGBTQ community").
_ABSTRACT = re.compile(r"(?:ness|ity|ance|ence|ment|ism|ship)$")
# Common nouns for people: their entities get kind "person".
_PERSON_NOUNS = frozenset("""kid child son daughter husband wife partner mom mother dad father parent
brother sister sibling grandma grandpa grandmother grandfather aunt uncle cousin niece nephew baby
boyfriend girlfriend fiance neighbor neighbour mentor teacher coach counselor counsellor therapist
doctor nurse boss colleague coworker teammate student classmate roommate dancer artist writer
player fan customer client veteran volunteer""".split())

# Verbs whose -ing complement names an activity ("go camping", "started painting").
_ACTIVITY_HEADS = frozenset("""go love enjoy like start begin try keep practice take quit stop miss finish
prefer learn teach hate continue do get""".split())
# Gerunds of verbs that name no pastime ("keep pushing", "keep working").
_NOT_ACTIVITIES = frozenset("""push work try follow reach chase grow learn help stay move hang talk chat
wait live improve smile shine fight rock believe inspire create share spread practice grind hustle
""".split())
_NAME_LINKS = frozenset({"of", "the", "and", "de", "van", "von", "la", "le"})
_NAMED_KINDS = {"PERSON": "person", "GPE": "place", "LOC": "place", "FAC": "place", "ORG": "org",
                "NORP": "group", "PRODUCT": "object", "WORK_OF_ART": "work", "EVENT": "event",
                "LANGUAGE": "other"}
_CONTENT_POS = frozenset({"NOUN", "PROPN", "VERB", "ADJ"})
# Lemmas too common in chat to make two turns "about the same thing".
_WEAK_LEMMAS = frozenset("""be have do get go make feel think know want love like say tell see look
come take give find keep need try let mean seem sound hope glad happy great good nice awesome
amazing cool fun really much many lot thing time way day people""".split())

_SINCE_TEMPORAL_NEXT = frozenset("""then last childhood high college school i'm
forever ever birth day yesterday early""".split()) | frozenset(_DAYS_MONTHS)
_SINCE_TEMPORAL_CLAUSE = re.compile(r"^(?:\w+ (?:was|were|last|first)|we met|i met)\b")
_PERFECT = re.compile(r"\b(?:have|has|had|haven't|hasn't|hadn't|'ve|been|ever|long|forever)\b")
_SUBJECTS = frozenset("""i i'm i've i'd i'll we we're we've we'd we'll""".split())
_CLAUSE_END = re.compile(r"[.!?;]|,\s*(?:so|but|and|which)\b|\s(?:but|and so)\s|\s[-–—]\s")
_SENT_END = re.compile(r"[.!?]+")
_LEAD_WORD = re.compile(r"[a-z][a-z']*")
_LEAD_FILLERS = frozenset("""agree more so too couldn't can't really just totally that's it's true same here""".split())


@dataclass
class _Parsed:
    """What the causal pass needs of one event (derived from its text)."""
    low: str                        # normalised text, same offsets as the spaCy doc
    lemmas: list[tuple[int, str]]   # (char offset, content lemma) in text order
    stated: frozenset[str]          # content lemmas of its statements (questions left out)
    questions: list[str]            # its question sentences, normalised
    opens_with_question: bool
    sentences: list[tuple[int, int]]


class _Stream:
    """Per-stream knowledge: speakers, names, words seen in lower case, what each event counted,
    phrase counts (derived from that), pending phrases."""

    def __init__(self):
        self.speakers: dict[str, str] = {}              # lowercased speaker name -> as written
        self.names: dict[str, str] = {}                 # person name key -> kind, for short forms
        self.lower: set[str] = set()                    # words written in lower case in this stream
        # event id -> [its named mentions, its phrases], each [[key, kind, surface]]: what it counted
        self.records: dict[int, list[list[list[str]]]] = {}
        self.counts: dict[str, int] = {}                # phrase key -> recorded events containing it
        # phrase counts of a state from before the records, which no record explains: they stand until
        # the stream's mentions are restated (an update, forget or backfill in it)
        self.unrecorded: dict[str, int] = {}
        self.pending: dict[str, list[list]] = {}        # below-threshold key -> [[event id, kind, surface]]
        self.spoke: dict[int, str] = {}                 # event id -> its lowercased speaker
        self.first_said: dict[str, int] = {}            # lowercased speaker -> the first event id of theirs

    def to_json(self) -> dict:
        return {"speakers": self.speakers, "names": self.names, "lower": sorted(self.lower),
                "records": {str(k): v for k, v in self.records.items()}, "pending": self.pending,
                "unrecorded": self.unrecorded, "spoke": {str(k): v for k, v in self.spoke.items()}}

    @classmethod
    def from_json(cls, d: dict) -> _Stream:
        s = cls()
        s.speakers, s.names, s.lower = dict(d["speakers"]), dict(d["names"]), set(d["lower"])
        s.records = {int(k): v for k, v in d.get("records", {}).items()}
        s.unrecorded = dict(d.get("unrecorded", {})) if "records" in d else dict(d["counts"])
        s.counts = s.recount()
        s.pending = {k: [list(e) for e in v] for k, v in d["pending"].items()}
        s.spoke = {int(k): v for k, v in d.get("spoke", {}).items()}
        s.first_said = s.first_spoken()
        return s

    def first_spoken(self) -> dict[str, int]:
        """Lowercased speaker -> the first event id they spoke at, from ``spoke``."""
        first: dict[str, int] = {}
        for event, speaker in sorted(self.spoke.items()):
            first.setdefault(speaker, event)
        return first

    def recount(self) -> dict[str, int]:
        """Phrase key -> the recorded events that counted it, and the counts no record explains."""
        return dict(Counter(key for _, phrases in self.records.values() for key, _, _ in phrases)
                    + Counter(self.unrecorded))

    def speakers_through(self, through: int | None = None) -> list[str]:
        """The stream's (lowercased) speakers; with ``through``, those who spoke at or before that event
        (a speaker from a state saved before ``spoke`` counts from the start)."""
        return [s for s in self.speakers if through is None or self.first_said.get(s, -1) <= through]

    def speaker_words(self, through: int | None = None) -> set[str]:
        """The words of ``speakers_through(through)``."""
        return {w for s in self.speakers_through(through) for w in s.split()}

    def is_speaker(self, key: str, short: bool = True, through: int | None = None) -> bool:
        """The name of a speaker, one of its words, or (`short`, for person names) a short form of
        exactly one speaker's first name ("Mel" for "Melanie"); with ``through``, of the speakers who
        spoke at or before that event, as ``speaker_words``."""
        words = self.speaker_words(through)
        if key in words or key in self.speakers_through(through):
            return True
        if not short or " " in key or len(key) < 2:
            return False
        return len([w for w in words if w.startswith(key)]) == 1


class HeuristicConsolidator:
    """Stateful proposer of entity mentions and causal links; see the module docstring."""

    def __init__(self, window: int = _DEFAULTS.window, min_phrase_count: int = _DEFAULTS.min_phrase_count,
                 max_entities_per_event: int = _DEFAULTS.max_entities_per_event,
                 max_causal_per_event: int = _DEFAULTS.max_causal_per_event, min_overlap: float = _DEFAULTS.min_overlap,
                 cues: Mapping[str, list[str]] | None = None, min_shared: int = _DEFAULTS.min_shared,
                 lead_words: int = _DEFAULTS.lead_words, supersession: str | Mapping | None = _DEFAULTS.supersession,
                 max_supersedes_per_event: int = _DEFAULTS.max_supersedes_per_event):
        """The settings of ``HeuristicConsolidationConfig``; ``cues`` None: its cue phrases.
        ``max_supersedes_per_event`` caps what the worker writes of its knowledge updates."""
        self.window, self.min_phrase_count = window, min_phrase_count
        self.max_supersedes_per_event = max_supersedes_per_event
        self.max_entities_per_event, self.max_causal_per_event = max_entities_per_event, max_causal_per_event
        self.min_overlap, self.min_shared, self.lead_words = min_overlap, min_shared, lead_words
        check(HeuristicConsolidationConfig, vars(self), "consolidation")
        cues = asdict(_DEFAULTS.cues) if cues is None else cues
        self.cues = {k: list(cues.get(k, ())) for k in ("result", "reason", "question", "weak")}
        self._cues = CuePatterns.compile(self.cues)
        self._streams: dict[str, _Stream] = {}
        self._room: dict[int, int] = {}                 # event id -> free entity slots, for events with pending phrases
        self._backfill: list[tuple[int, EntityMention]] = []
        self._parsed: OrderedDict[int, _Parsed] = OrderedDict()
        # Knowledge updates (conf/supersession/<name>.yaml); None: no supersession links.
        self.supersession = supersession
        self._updates = None if supersession is None else UpdateTracker(supersession)

    def _stream(self, name: str) -> _Stream:
        if name not in self._streams:
            self._streams[name] = _Stream()
        return self._streams[name]

    # ------------------------------------------------------------------ entities

    def _person_key(self, st: _Stream, key: str) -> str:
        """A one-word short form of exactly one longer person name of the stream is that name."""
        if " " in key or len(key) < 3 or key in st.names:
            return key
        hits = [n for n, k in st.names.items() if k == "person" and n != key
                and (n.split()[0] == key or (" " not in n and n.startswith(key)))]
        return hits[0] if len(hits) == 1 else key

    def _named(self, st: _Stream, doc, used: set[int], event: int) -> list[tuple[str, str, str]]:
        """(key, kind, surface) of the named mentions of ``event`` (parsed ``doc``): neither a speaker's
        name as of that event (one named before they first speak is a mention, as an in-order ingest
        sees it, whatever was ingested since), nor a short form of one unless a person's ("Rome" is a
        place, "Romeo" speaking or not)."""
        out = []
        for ent in doc.ents:
            kind = _NAMED_KINDS.get(ent.label_)
            if kind is None:
                continue
            start = ent.start
            # A title the small model cut short: "The Lord of the [Rings]".
            while start > 0 and (doc[start - 1].pos_ == "PROPN" and doc[start - 1].is_title or
                                 doc[start - 1].lower_ in _NAME_LINKS and start > 1 and
                                 (doc[start - 2].pos_ == "PROPN" and doc[start - 2].is_title
                                  or doc[start - 2].lower_ in _NAME_LINKS)):
                start -= 1
            toks = list(doc[start:ent.end])
            # Trim determiners, possessives, punctuation and interjections at either end ("Yep John").
            while toks and (toks[0].pos_ in ("DET", "PUNCT", "INTJ", "PART") or toks[0].lower_ in _NON_NAMES):
                toks.pop(0)
            while toks and (toks[-1].pos_ in ("PUNCT", "PART") or toks[-1].lower_ in _NON_NAMES
                            or toks[-1].lower_ in ("'s", "'")):
                toks.pop()
            if not toks or not any(t.pos_ == "PROPN" for t in toks):   # "Violins are old" is a noun
                continue
            if len(toks) == 1 and toks[0].is_sent_start and toks[0].lower_ in st.lower:
                continue                  # "Pottery is fun": a common word opening a sentence
            key = " ".join(t.lower_.replace("’", "'") for t in toks)
            if not re.search(r"[a-z]", key) or st.is_speaker(key, short=kind == "person", through=event):
                continue
            if kind == "person" and len(toks) == 1 and self._vocative(doc, toks[0]):
                continue                  # "Hey Mel!", "Thanks, Jo.": addresses the other speaker
            used.update(t.i for t in toks)
            if kind == "person":
                key = self._person_key(st, key)
            out.append((key, kind, " ".join(t.text for t in toks)))
        # A capitalised word the stream already knows as a name, where NER missed it.
        for t in doc:
            if (t.i not in used and t.pos_ == "PROPN" and t.lower_ in st.names
                    and not st.is_speaker(t.lower_, short=st.names[t.lower_] == "person", through=event)):
                used.add(t.i)
                out.append((self._person_key(st, t.lower_), st.names[t.lower_], t.text))
        return out

    @staticmethod
    def _vocative(doc, t) -> bool:
        before = doc[t.i - 1] if t.i > 0 else None
        after = doc[t.i + 1] if t.i + 1 < len(doc) else None
        return ((before is not None and (before.lower_ in _INTERJECTIONS or before.text == ","))
                and (after is None or after.text in ("!", "?", ".", ",")))

    @staticmethod
    def _noun_ok(t) -> bool:
        lem = t.lemma_.lower()
        return (t.is_alpha and len(lem) >= 3 and not t.is_stop and lem not in GENERIC_NOUNS
                and t.lower_ not in GENERIC_NOUNS and lem not in _NON_NAMES and not _ABSTRACT.search(lem))

    def _phrases(self, st: _Stream, doc, used: set[int], event: int) -> list[tuple[str, str, str]]:
        """(key, kind, surface) of object and activity mentions of ``event``, in text order."""
        out = []
        speaker_words = st.speaker_words(through=event)
        for chunk in doc.noun_chunks:
            root = chunk.root
            for t in chunk:
                # A possessor inside the chunk ("my sister's violin", "the dogs' toys").
                if t.dep_ == "poss" and t.pos_ == "NOUN" and t.i not in used and self._noun_ok(t):
                    lem = t.lemma_.lower()
                    out.append((lem, "person" if lem in _PERSON_NOUNS else "object", t.text))
            if root.pos_ != "NOUN" or root.i in used or not root.is_alpha:
                continue
            comps = []
            for t in reversed(chunk[: root.i - chunk.start]):
                if t.dep_ == "compound" and t.pos_ in ("NOUN", "PROPN") and t.is_alpha \
                        and t.lower_ not in speaker_words and t.i not in used:
                    comps.insert(0, t)
                elif t.text != "-" or not comps and t.i != root.i - 1:
                    break
            head = root.lemma_.lower()
            kind = ("person" if head in _PERSON_NOUNS else
                    "activity" if root.tag_ == "NN" and root.lower_.endswith("ing") and len(root) > 5 else "object")
            if comps:
                # "self-care", "LGBTQ support group": the compounds as written (lower case) + the head's lemma
                key = norm(doc.text[comps[0].idx:root.idx]) + head
                out.append((key, kind, doc.text[comps[0].idx:root.idx + len(root)]))
            if self._noun_ok(root):
                out.append((head, kind, root.text))
        for t in doc:
            # Gerunds as activities: "go camping", "I love running", "started painting", "running or reading".
            if not t.is_alpha or t.i in used:
                continue
            if t.tag_ == "NN" and t.lower_.endswith("ing") and len(t) > 5:
                # "Camping trips" -> camping; "went camping" parsed as a noun
                if t.dep_ == "compound" or t.head.lemma_.lower() in _ACTIVITY_HEADS and t.head.pos_ == "VERB":
                    if t.lower_ not in GENERIC_NOUNS:
                        out.append((t.lower_, "activity", t.text))
                continue
            if t.tag_ != "VBG":
                continue
            gov = t
            while gov.dep_ == "conj" and gov.head is not gov:
                gov = gov.head
            if gov is not t and gov.tag_ != "VBG":
                continue
            if gov.dep_ not in ("xcomp", "dobj", "pcomp", "ccomp") or gov.head.lemma_.lower() not in _ACTIVITY_HEADS:
                continue
            if any(c.dep_ in ("dobj", "ccomp", "xcomp", "attr", "prt") for c in t.children):
                continue
            key = t.lower_
            if len(key) > 5 and key not in GENERIC_NOUNS and t.lemma_.lower() not in _WEAK_LEMMAS | _NOT_ACTIVITIES:
                out.append((key, "activity", t.text))
        return out

    def _entities(self, ev: EventView, doc, props: dict[int, Proposal]) -> list[EntityMention]:
        st = self._stream(ev.stream)
        if ev.id in st.records:
            return []             # restated in its place already (``restate_mentions``): counted once
        st.records[ev.id] = self._observed(st, ev.id, ev.speaker, doc)
        return self._allot(st, ev.id, *st.records[ev.id], props)

    def _observed(self, st: _Stream, event: int, speaker: str | None, doc) -> list[list[list[str]]]:
        """What an event (parsed ``doc``) counts: its named mentions (at most the cap) and its distinct
        phrases (neither named nor a speaker), each [key, kind, surface]; the stream learns its
        ``speaker``, names and lower-case words."""
        if speaker and speaker.strip():
            sp = " ".join(speaker.split())
            st.speakers.setdefault(sp.lower(), sp)
            st.spoke[event] = sp.lower()
            st.first_said[sp.lower()] = min(st.first_said.get(sp.lower(), event), event)
        for t in doc:
            if t.is_alpha and t.text.islower() and len(t.text) >= 3:
                st.lower.add(t.text)
        named: list[list[str]] = []
        seen: set[str] = set()
        used: set[int] = set()
        for key, kind, surface in self._named(st, doc, used, event):
            st.names.setdefault(key, kind)
            if key not in seen and len(named) < self.max_entities_per_event:
                seen.add(key)
                named.append([key, kind, surface])
        phrases: list[list[str]] = []
        for key, kind, surface in self._phrases(st, doc, used, event):
            if key in seen or st.is_speaker(key, short=False, through=event):
                continue
            seen.add(key)
            phrases.append([key, kind, surface])
        return [named, phrases]

    def _allot(self, st: _Stream, eid: int, named: list, phrases: list,
               props: dict[int, Proposal]) -> list[EntityMention]:
        """Event ``eid``'s mentions, counting its phrases in: the named ones, then the phrases that
        reached `min_phrase_count`, within the cap; the others wait (pending) while it has room."""
        out = [EntityMention(*m) for m in named]
        cap = self.max_entities_per_event
        ready: list[tuple[int, int, int, str, str, str]] = []
        below: list[tuple[str, str, str]] = []
        for pos, (key, kind, surface) in enumerate(phrases):
            count = st.counts.get(key, 0) + 1
            st.counts[key] = count
            if count < self.min_phrase_count:
                below.append((key, kind, surface))
                continue
            if count == self.min_phrase_count:
                self._release(st, key, props)
            # Compounds are more specific, so they take free slots first.
            ready.append((-key.count(" "), count, pos, key, kind, surface))
        for *_, key, kind, surface in sorted(ready)[:max(0, cap - len(out))]:
            out.append(EntityMention(key, kind, surface))
        room = cap - len(out)
        if room > 0 and below:
            self._room[eid] = room
            for key, kind, surface in below:
                st.pending.setdefault(key, []).append([eid, kind, surface])
        return out

    def _release(self, st: _Stream, key: str, props: dict[int, Proposal]) -> None:
        """A phrase just reached the threshold: give it to the earlier events that held it."""
        for eid, kind, surface in st.pending.pop(key, []):
            room = self._room.get(eid, 0)
            if room <= 0:
                continue
            mention = EntityMention(key, kind, surface)
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

    def _parse_view(self, doc) -> _Parsed:
        low = norm(doc.text)
        lemmas, stated, questions, sents = [], set(), [], []
        for s in doc.sents:
            end_char = s.end_char
            tail = low[end_char:end_char + 3]
            is_q = "?" in s.text or tail.lstrip().startswith("?")
            sents.append((s.start_char, s.end_char))
            if is_q:
                questions.append(low[s.start_char:s.end_char])
            for t in s:
                # Names keep their form ("Leeds", whether tagged PROPN or not).
                lem = t.lower_ if t.pos_ == "PROPN" or t.is_title and not t.is_sent_start else t.lemma_.lower()
                if (t.pos_ in _CONTENT_POS and t.is_alpha and len(lem) >= 3 and not t.is_stop
                        and lem not in _WEAK_LEMMAS and lem not in GENERIC_NOUNS and lem not in _NON_NAMES):
                    lemmas.append((t.idx, lem))
                    if not is_q:
                        stated.add(lem)
        first_q = bool(sents) and low[sents[0][0]:sents[0][1]] in questions
        return _Parsed(low, lemmas, frozenset(stated), questions, first_q, sents)

    def _lemmas_between(self, p: _Parsed, start: int, end: int) -> frozenset[str]:
        return frozenset(lem for i, lem in p.lemmas if start <= i < end)

    def _lead(self, p: _Parsed, start: int, speakers: set[str], limit: int) -> bool:
        """At most `limit` words (not counting interjections, pronouns and names of the
        speakers: "Yeah, I couldn't agree more!") come before a cue at `start`."""
        words = [w for w in _LEAD_WORD.findall(p.low[:start])
                 if w not in _NON_NAMES and w not in speakers and w not in _LEAD_FILLERS]
        return len(words) <= limit

    def _reason_hits(self, p: _Parsed) -> list[tuple[str, str]]:
        """(cue, reason clause) for each asserted reason cue of the turn."""
        hits = []
        low = p.low
        found = []
        if self._cues.reason is not None:
            found += [(m.start(), m.end(), m.group(0), None) for m in self._cues.reason.finditer(low)]
        for cue, rx in self._cues.gapped:
            found += [(m.start(), m.end(), cue, m.group("gap")) for m in rx.finditer(low)]
        for start, end, cue, gap in sorted(found):
            sent_end = _SENT_END.search(low, end)
            if sent_end and "?" in sent_end.group(0):
                continue                                   # questioning a cause is not asserting one
            before, after = low[:start], low[end:]
            if gap is not None:
                hits.append((cue, (start, end)))
                continue
            if cue == "since" and self._temporal_since(before, after):
                continue
            if cue in ("because", "thanks to", "due to") and re.match(r"\s*of (that|this|it)\b", after):
                continue                                   # "because of that" is a result cue
            stop = _CLAUSE_END.search(after)
            hits.append((cue, (end, end + (stop.start() if stop else len(after)))))
        return hits

    @staticmethod
    def _temporal_since(before: str, after: str) -> bool:
        nxt = after.split(None, 1)
        if (not nxt or nxt[0][0].isdigit() or nxt[0] in _SINCE_TEMPORAL_NEXT
                or _SINCE_TEMPORAL_CLAUSE.match(after.lstrip())):
            return True
        clause = re.split(r"[.!?;,]", before)[-1]
        return (bool(_PERFECT.search(clause))
                or bool(re.search(r"\b(?:forever|ages|long time|a while|years|months)\s*$", clause)))

    def _result_hit(self, p: _Parsed, speakers: set[str]) -> str | None:
        """A back-pointing result cue in the turn's lead, in a statement; returns the cue."""
        if self._cues.result is None:
            return None
        for m in self._cues.result.finditer(p.low):
            cue = m.group(0)
            sent_end = _SENT_END.search(p.low, m.end())
            if sent_end and "?" in sent_end.group(0):
                continue
            if not self._lead(p, m.start(), speakers, 0 if cue in self._cues.weak else self.lead_words):
                return None
            if cue == "so":
                # Discourse "so" only as "<clause start> so I/we ...".
                nxt = p.low[m.end():].split(None, 1)
                pre = p.low[:m.start()].rstrip()
                if not nxt or nxt[0].strip(",") not in _SUBJECTS or (pre and pre[-1] not in ".!,;-–—"):
                    continue
            return cue
        return None

    def _causal(self, ev: EventView, p: _Parsed, window: Sequence[EventView]) -> list[CausalLink]:
        if not window:
            return []
        st = self._stream(ev.stream)
        # the speakers as an in-order ingest knows them at this event, also when it is consolidated again later
        # (``lifecycle._redrawn``): a later speaker's name is not yet a speaker's here
        speakers = st.speaker_words(through=ev.id)
        best: dict[int, CausalLink] = {}

        def add(cause: EventView, conf: float, cue: str):
            link = CausalLink(cause.id, ev.id, round(conf, 4), cue)
            if cause.id not in best or best[cause.id].confidence < link.confidence:
                best[cause.id] = link

        prev = window[-1]
        pp = self._parsed[prev.id]
        reasons = self._reason_hits(p)
        # 1. The answer to a why-question of the previous turn.
        asked = (prev.speaker != ev.speaker and prev.speaker is not None and ev.speaker is not None
                 and any(self._cues.asks_why(q) for q in pp.questions[-2:])
                 and not p.opens_with_question and p.stated)
        if asked:
            cue = reasons[0][0] if reasons else ""
            add(prev, 0.9 if reasons else 0.75, f"why-answer:{cue}" if cue else "why-answer")
        # 2. A result cue opening the turn: the turn it points back to is the cause: the
        # previous turn when it shares a content lemma with this one, else the statement of the
        # window sharing most (at least `min_shared`; the most recent on ties), else the
        # previous turn when it states something.
        cue = self._result_hit(p, speakers)
        if cue is not None and not (asked and prev.id in best):
            mine = p.stated - speakers
            pick, shared = None, 0
            for c in reversed(window):
                k = len(mine & self._parsed[c.id].stated)
                if k > shared and (c is prev or k >= self.min_shared):
                    pick, shared = c, k
                if c is prev and k:
                    break                 # the previous turn, when it shares a word, is what "that" means
            weak = cue in self._cues.weak
            if pick is None and not weak and pp.stated:
                pick = prev
            if pick is not None:
                add(pick, 0.55 if weak else 0.8, cue)
        # 3. A reason clause that restates an earlier turn: that turn is the cause.
        for cue, (a, b) in reasons:
            q = self._lemmas_between(p, a, b) - speakers
            if not q:
                continue
            pick, score = None, 0.0
            for c in reversed(window):                   # newest first: ties go to the most recent
                w = self._parsed[c.id].stated - speakers
                if not w:
                    continue
                shared = len(q & w)
                s = shared / math.sqrt(len(q) * len(w))
                if shared >= self.min_shared and s > score:
                    pick, score = c, s
            if pick is None or score < self.min_overlap:
                continue
            strength = 0.5 if cue in self._cues.weak else 0.8
            add(pick, strength * (0.5 + 0.5 * min(1.0, score)) + (0.1 if asked else 0.0), cue)
        links = sorted(best.values(), key=lambda l: (-l.confidence, -l.cause))
        return links[:self.max_causal_per_event]

    # ------------------------------------------------------------------ API

    def propose(self, batch: Sequence[EventView], context: Mapping[int, Sequence[EventView]]) -> list[Proposal]:
        """One Proposal per event in batch. context[event.id] = the up-to-`window` preceding
        events of the same stream (oldest first), which may include events of earlier batches."""
        windows = {ev.id: [c for c in context.get(ev.id, ()) if c.stream == ev.stream and c.id < ev.id][-self.window:]
                   for ev in batch}
        todo = {ev.id: ev.text for ev in batch}
        todo.update({c.id: c.text for w in windows.values() for c in w
                     if c.id not in self._parsed and c.id not in todo})
        ids = list(todo)
        docs = dict(zip(ids, nlp.parse(todo[i] for i in ids), strict=True))
        for i in ids:
            self._parsed[i] = self._parse_view(docs[i])
            self._parsed.move_to_end(i)
        for w in windows.values():
            for c in w:
                self._parsed.move_to_end(c.id)
        props: dict[int, Proposal] = {}
        for ev in batch:
            props[ev.id] = Proposal(ev.id, [], [])
            props[ev.id].entities = self._entities(ev, docs[ev.id], props)
            props[ev.id].causal = self._causal(ev, self._parsed[ev.id], windows[ev.id])
            if self._updates is not None:
                props[ev.id].supersedes = self._updates.observe(ev.id, ev.stream, ev.speaker, ev.text)
        # Only the recent windows are ever looked up again; bound the cache.
        while len(self._parsed) > 4096:
            self._parsed.popitem(last=False)
        return [props[ev.id] for ev in batch]

    def forget(self, new_id: Sequence[int], gone: set[int], remaining: Mapping[str, Sequence]) -> None:
        """Events were renumbered (``new_id[old]``, -1: forgotten) and the text of the old ids
        ``gone`` (forgotten or rewritten) is no longer stored: their records (so the phrase counts
        are those of the remaining events), pending phrases, free slots, backfills and parses are
        dropped, and what the streams of ``remaining`` (each stream's remaining events, with
        ``text`` and ``speaker``) knew only from that text: words, names, pending phrase keys and
        speakers none of its remaining events contains."""
        def moved(eid: int) -> int:
            return -1 if eid in gone else new_id[eid]

        for stream, events in remaining.items():
            st = self._streams.get(stream)
            if st is None:
                continue
            text = "\n".join(norm(e.text) for e in events)
            words = set(re.findall(r"[^\W\d_]+", text))
            speakers = {" ".join(e.speaker.split()).lower() for e in events if e.speaker}
            st.lower &= words
            st.speakers = {k: v for k, v in st.speakers.items() if k in speakers}
            for table in (st.names, st.pending):
                for key in [k for k in table if k not in text]:
                    del table[key]
        for st in self._streams.values():
            st.records = {moved(e): r for e, r in st.records.items() if moved(e) >= 0}
            st.counts = st.recount()
            st.spoke = {moved(e): s for e, s in st.spoke.items() if moved(e) >= 0}
            st.first_said = st.first_spoken()
            for key, entries in list(st.pending.items()):
                st.pending[key] = [[moved(e[0]), *e[1:]] for e in entries if moved(e[0]) >= 0]
        self._room = {moved(e): r for e, r in self._room.items() if moved(e) >= 0}
        self._backfill = [(moved(e), m) for e, m in self._backfill if moved(e) >= 0]
        self._parsed = OrderedDict((moved(e), p) for e, p in self._parsed.items() if moved(e) >= 0)
        if self._updates is not None:
            self._updates.renumber(moved)

    def restate_mentions(self, streams: Mapping[str, Sequence]) -> dict[int, list[EntityMention]] | None:
        """The entity mentions of every event of each stream of ``streams`` (its events ``(id, event
        with text and speaker)``, in time order, consolidated or still queued) as an in-order ingest
        gives them, after an update, forget or backfill: the phrases are counted again, in that
        order, from what each event recorded (an event with no record yet, queued, is parsed now and
        recorded in its place, so its consolidation counts it no more). None with a
        `min_phrase_count` of 1: then no event's mentions depend on another's."""
        if self.min_phrase_count == 1:
            return None
        out: dict[int, list[EntityMention]] = {}
        for stream, events in streams.items():
            st = self._stream(stream)
            fresh = [(i, e) for i, e in events if i not in st.records]
            docs = dict(zip([i for i, _ in fresh], nlp.parse(e.text for _, e in fresh), strict=True))
            ids = {i for i, _ in events}
            st.counts, st.pending, st.unrecorded = {}, {}, {}   # every event of the stream is recorded below
            self._room = {e: r for e, r in self._room.items() if e not in ids}
            self._backfill = [(e, m) for e, m in self._backfill if e not in ids]   # written with the rest
            props: dict[int, Proposal] = {}
            for i, e in events:
                if i in docs:
                    st.records[i] = self._observed(st, i, e.speaker, docs[i])
                props[i] = Proposal(i, [], [])
                props[i].entities = self._allot(st, i, *st.records[i], props)
            out.update((i, p.entities) for i, p in props.items())
        return out

    def restate_facts(self, streams: Mapping[str, Sequence]) -> dict[int, list[SupersessionLink]]:
        """The facts of each stream of ``streams`` observed again from its events ``(id, event with
        text and speaker)``, in time order (after an update, forget or backfill); returns each
        event's supersession links."""
        if self._updates is None:
            return {}
        return {event: links for stream, events in streams.items()
                for event, links in self._updates.restate(stream, [(i, e.speaker, e.text) for i, e in events]).items()}

    def state_dict(self) -> dict:
        """JSON-serialisable state; the parse cache is derived from event text and left out."""
        return {"streams": {k: s.to_json() for k, s in self._streams.items()},
                "room": {str(k): v for k, v in self._room.items()},
                "backfill": [[eid, asdict(m)] for eid, m in self._backfill],
                "updates": None if self._updates is None else self._updates.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self._streams = {k: _Stream.from_json(v) for k, v in state["streams"].items()}
        self._room = {int(k): v for k, v in state["room"].items()}
        self._backfill = [(eid, EntityMention(**m)) for eid, m in state["backfill"]]
        self._parsed.clear()
        if self._updates is not None:   # a state from before supersession has none: facts start afresh
            self._updates.load_state_dict(state.get("updates"))
