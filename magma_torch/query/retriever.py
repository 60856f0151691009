"""The query process (paper, Algorithm 1) for a batch of questions.

intent -> time window -> anchors by RRF over vector, keyword and time rankings, re-ranked
(query/rerank.py) -> batched beam search -> salience order -> linearised context. Reads a store snapshot
and never writes to the store.

``mode: full_context`` (the full-context baseline) skips ranking: every event is returned in
chronological order and the context holds the most recent turns that fit the budget (the
reader's context window), with ``Retrieval.truncated`` set when earlier turns were left out.
"""
from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone

import torch

from magma_torch.config.schema import SIGNALS, TEXT_SIGNALS, RetrievalConfig
from magma_torch.query.adapter import QuestionAdapter
from magma_torch.query.anchors import (Anchors, asked_phrase, context_candidates, context_ranking, context_scores,
                                       entity_ranking, episode_ranking, inside_windows, keep_inside, rrf_fuse,
                                       speaker_ranking, speakers_named, time_ranking)
from magma_torch.query.beam import BeamResult, beam_search, relation_weights, salience_order
from magma_torch.query.intent import INTENTS, IntentClassifier
from magma_torch.query.kernel import compiled, resolve_kernel, search_kernel
from magma_torch.query.linearize import cut_block, format_time, linearize, render_blocks
from magma_torch.query.rerank import feature_matrix, removed_relations, rerank
from magma_torch.query.segment import top_ids
from magma_torch.query.supersession import notes, prefer_current
from magma_torch.query.similarity import Similarity
from magma_torch.store.graph import TRAVERSED
from magma_torch.store.store import StoreSnapshot
from magma_torch.store.validity import superseders
from magma_torch.text.embedder import Embedder
from magma_torch.tokens import count_tokens


@dataclass(frozen=True)
class RetrievedNode:
    id: int
    text: str
    timestamp: datetime
    source_ids: list[str]
    score: float
    speaker: str | None
    tokens: int                        # tokens of the node's rendered block
    valid_to: datetime | None = None   # when a later event superseded it (None: it still holds)
    superseded_by: int | None = None   # that event


@dataclass(frozen=True)
class PathEdge:
    src: int
    dst: int
    relation: str                      # "temporal" | "semantic" | "causal" | "entity:<name>" | "episode:<start>"
    score: float


@dataclass(frozen=True)
class Anchor:
    id: int
    rrf: float
    ranks: dict[str, int]              # 1-based rank per signal; absent signals are left out


@dataclass
class Retrieval:
    question: str
    intent: str
    time_window: tuple[datetime, datetime] | None
    anchors: list[Anchor]             # those the beam kept (at most beam.max_nodes; in the window, with time_filter)
    nodes: list[RetrievedNode]
    paths: list[PathEdge]
    context: str
    context_tokens: int
    context_ids: list[int]
    retrieval_ms: float
    truncated: bool = False            # cut to fit the budget: an event's text (marked "…[cut]"), or in
                                       # full_context earlier turns
    intent_probs: dict[str, float] = field(default_factory=dict)  # classifier softmax; {} without one

    @property
    def source_ids(self) -> list[str]:
        return [s for n in self.nodes for s in n.source_ids]


class Retriever:
    def __init__(self, embedder: Embedder, intent: IntentClassifier | None, cfg: RetrievalConfig):
        self.embedder, self.intent, self.cfg = embedder, intent, cfg
        # The head reads the vectors of the model it was trained on: with another embedder
        # (embedder.model) it embeds the questions with that model of its own.
        self.intent_embedder = embedder if intent is None or embedder is None or intent.reads(embedder) \
            else intent.encoder(embedder.device)
        self.weights = relation_weights(cfg.intent_rows(INTENTS), INTENTS)
        self.dtype = getattr(torch, cfg.score_dtype)
        self.past = cfg.supersession.past_pattern()
        self.asked = cfg.entity.asked_pattern()
        self.kernel = resolve_kernel(cfg.kernel)   # a bad or uninstalled kernel fails here, not mid-query
        self.adapter = None if cfg.question_adapter is None else \
            QuestionAdapter.load(cfg.question_adapter, getattr(embedder, "model_path", None))
        if self.adapter is not None:
            self.adapter.check(embedder)

    def embed_questions(self, questions: list[str], device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        """(raw, compared): the question vectors the intent head reads (the embedder's own, or its
        ``intent_embedder``'s), and the embedder's vectors compared with events, through the
        question adapter when one is configured."""
        vectors = self.embedder.encode(questions).to(device)
        compared = vectors if self.adapter is None else self.adapter(vectors)
        raw = vectors if self.intent_embedder is self.embedder else self.intent_embedder.encode(questions).to(device)
        return raw, compared

    @torch.inference_mode()
    def retrieve_batch(self, snap: StoreSnapshot, questions: list[str], query_times: list[datetime | None],
                       budget_tokens: int | None = None) -> list[Retrieval]:
        from magma_torch.text.temporal import question_time_window  # lazy: dateparser is not needed to rank

        budget = self.cfg.budget_tokens if budget_tokens is None else budget_tokens
        raw, q = self.embed_questions(questions, snap.embeddings.device)
        started = time.perf_counter()
        probs = self.intent_probs(raw, questions)
        intents = self.intents(raw, probs)
        windows = [question_time_window(text, t) for text, t in zip(questions, query_times, strict=True)]
        if self.cfg.mode == "full_context" or snap.num_events == 0:
            # an empty memory has nothing to rank; full_context over it is the empty result
            out = self._full_context(snap, questions, intents, windows, budget)
        else:
            epochs = [epoch_window(w_) for w_ in windows]
            out = []
            for p in self.passes(snap, len(questions)):
                sim = self.similarity(snap, q[p])
                anchors = self.anchors(snap, sim, epochs[p], questions[p])
                result = self.expand(snap, sim, intents[p], anchors)
                out += self._assemble(snap, questions[p], intents[p], windows[p], anchors, result, budget,
                                      epochs[p] if self.cfg.time_filter else None)
        per_query_ms = (time.perf_counter() - started) * 1000 / max(len(questions), 1)
        out = [_with_event_ids(r, snap.event_ids) for r in out]
        for b, r in enumerate(out):
            r.retrieval_ms = per_query_ms
            if probs is not None:
                r.intent_probs = dict(zip(INTENTS, probs[b].tolist(), strict=True))
        return out

    # The tensor steps of Algorithm 1 for a batch of embedded questions q [B, d]; magma-bench
    # times them one by one. Inference mode: nothing here is differentiated, and skipping
    # autograd's bookkeeping takes ~15% off a single question's many small tensor operations.
    @torch.inference_mode()
    def intent_probs(self, q: torch.Tensor, questions: list[str] | None = None) -> torch.Tensor | None:
        """[B, len(INTENTS)] intent probabilities; None without a classifier. With the question
        texts, the classifier's lead-word rules apply too (see query/intent.py)."""
        return None if self.intent is None else self.intent.probabilities(q, questions).to(q.device)

    @torch.inference_mode()
    def intents(self, q: torch.Tensor, probs: torch.Tensor | None = None,
                questions: list[str] | None = None) -> torch.Tensor:
        """[B] predicted intent indices (``probs`` from intent_probs when already computed);
        every question is ENTITY without a classifier."""
        probs = self.intent_probs(q, questions) if probs is None else probs
        if probs is None:
            return torch.full((q.shape[0],), INTENTS.index("ENTITY"), dtype=torch.long, device=q.device)
        return probs.argmax(dim=-1)

    def passes(self, snap: StoreSnapshot, num_questions: int) -> list[slice]:
        """Questions per pass of the steps below: each pass's [B, N] similarity matrix stays
        within ``similarity.matrix_max_bytes``."""
        per_question = max(snap.num_events, 1) * self.dtype.itemsize
        size = max(1, self.cfg.similarity.matrix_max_bytes // per_question)
        return [slice(a, a + size) for a in range(0, num_questions, size)]

    def similarity_mode(self, snap: StoreSnapshot, num_questions: int) -> str:
        """"matrix", "columns" or "scan": how ``similarity`` scores a batch of this many questions (its first pass)."""
        size = self.passes(snap, num_questions)[0].stop if num_questions else 0
        return Similarity.way(min(size, num_questions), snap.scan_embeddings, self.cfg.similarity)

    def search_kernel(self, device: torch.device) -> str:
        """"numba" or "torch": the beam search a batch runs on ``device`` (query/beam.py)."""
        return search_kernel(self.kernel, self.dtype, device)

    @torch.inference_mode()
    def similarity(self, snap: StoreSnapshot, q: torch.Tensor) -> Similarity:
        """The questions' cosines with the snapshot's events, shared by the steps below."""
        return Similarity(snap.embeddings, snap.scan_embeddings, q, self.cfg.similarity, self.dtype,
                          compiled(self.kernel, q.device))

    @torch.inference_mode()
    def anchors(self, snap: StoreSnapshot, sim: Similarity, windows: list[tuple[float, float] | None],
                questions: list[str] | None = None) -> Anchors:
        """The anchors handed to the beam: the fused candidates (``fused``), re-ranked
        (query/rerank.py) unless ``rerank.pool`` is 0, the best ``anchor_k`` of them."""
        cfg = self.cfg
        fused = self.fused(snap, sim, windows, questions)
        if not cfg.rerank.pool:
            return fused
        features = self.rerank_features(snap, sim, fused)
        return rerank(fused, features, cfg.rerank, cfg.rrf_k, cfg.anchor_k)

    def rerank_features(self, snap: StoreSnapshot, sim: Similarity, fused: Anchors) -> torch.Tensor:
        """[B, P, len(rerank.FEATURES)] features of the fused candidates."""
        return feature_matrix(snap.graph, snap.episode_of, snap.text_tokens, sim, fused, self.cfg.rrf_k,
                              self.cfg.rerank.support_from, self.cfg.rerank.length_cap,
                              removed_relations(self.weights), self.kernel)

    @torch.inference_mode()
    def fused(self, snap: StoreSnapshot, sim: Similarity, windows: list[tuple[float, float] | None],
              questions: list[str] | None = None) -> Anchors:
        """RRF over the dense, keyword and time rankings, and over the dense and keyword
        rankings of each event's temporal-context view: the best ``anchor_k``, or
        ``rerank.pool`` when the re-ranker is on and that is more. ``windows``: epoch-second
        time windows (None: no window); ``questions`` are read by the keyword signals only."""
        cfg, n, dev = self.cfg, snap.num_events, sim.queries.device
        on = {s: s in cfg.active_signals for s in SIGNALS}
        k = {s: getattr(cfg.signal_top_k, s) for s in SIGNALS}
        ctx = cfg.context
        n_cand = ctx.candidates if on["vector_context"] or on["keyword_context"] else 0
        if questions is None and any(on[s] for s in TEXT_SIGNALS):
            raise ValueError("the keyword, speaker and entity signals need question texts; set "
                             "retrieval.signal_weights.keyword, keyword_context, speaker and entity to 0 "
                             "to rank embeddings alone")
        empty = torch.zeros((sim.batch_size, 0), dtype=torch.long, device=dev)
        need = max(k["vector"], n_cand, k["speaker"] if on["speaker"] else 0)
        dense = sim.top_k(need) if on["vector"] or n_cand or on["speaker"] else empty
        kw_scores = torch.from_numpy(snap.keyword_index.scores(questions, upto=n)).to(dev) if (
            on["keyword"] or on["keyword_context"]) else None
        kw_top = torch.from_numpy(snap.keyword_index.top_k(kw_scores.cpu().numpy(), max(k["keyword"], n_cand))).to(
            dev) if kw_scores is not None else empty
        ranked = {"vector": dense[:, : k["vector"]], "keyword": kw_top[:, : k["keyword"]], "time": empty,
                  "vector_context": empty, "keyword_context": empty, "episode": empty, "speaker": empty,
                  "entity": empty}
        named = [speakers_named(text, snap.speaker_names) for text in questions] if (
            on["speaker"] or on["entity"]) else None
        if on["speaker"]:
            ranked["speaker"] = speaker_ranking(dense, named, snap.speaker_of, k["speaker"])
        if on["entity"]:
            ranked["entity"] = self.entity_ranking(snap, sim, questions, named, k["entity"])
        if on["episode"]:
            ranked["episode"] = episode_ranking(snap.episode_embeddings().to(dev), snap.graph.episode_event, sim, n,
                                                cfg.episode, k["episode"])
        if on["time"]:
            ranked["time"] = time_ranking(windows, snap.timestamps, snap.date_spans, sim, k["time"])
        if n_cand:
            cand = context_candidates([dense[:, :n_cand], kw_top[:, :n_cand]], snap.prev, snap.next, n, ctx)
            if on["vector_context"]:
                ranked["vector_context"] = context_ranking(cand, snap.prev, snap.next, n, ctx, sim, snap.chain_dots,
                                                           k["vector_context"])
            if on["keyword_context"]:
                sc = context_scores(cand, snap.prev, snap.next, n, ctx, keyword=kw_scores)
                ranked["keyword_context"] = top_ids(cand, sc, k["keyword_context"])
        if cfg.time_filter and any(w is not None for w in windows):
            ranked = {s: keep_inside(r, inside_windows(r, windows, snap.timestamps, snap.date_spans))
                      for s, r in ranked.items()}
        weights = [getattr(cfg.signal_weights, s) if on[s] else 0.0 for s in SIGNALS]
        top = max(cfg.anchor_k, cfg.rerank.pool)    # pool 0: no re-ranking, anchor_k
        return rrf_fuse([ranked[s] for s in SIGNALS], weights, cfg.rrf_k, top, max(n, 1), self.kernel)

    def entity_ranking(self, snap: StoreSnapshot, sim: Similarity, questions: list[str],
                       named: list[list[int]], top: int) -> torch.Tensor:
        """The entity signal's [B, top] ranking (query/anchors.py entity_ranking); the asked-for
        phrases are embedded here, one batch for the questions that have one."""
        ecfg, dev = self.cfg.entity, sim.queries.device
        phrases = [asked_phrase(text, self.asked) for text in questions]
        asks = torch.tensor([p is not None for p in phrases], dtype=torch.bool, device=dev)
        vectors = torch.zeros((len(questions), snap.embeddings.shape[1]), device=dev)
        if bool(asks.any()) and snap.num_entities:
            vectors[asks] = self.embedder.encode([p for p in phrases if p is not None]).to(dev).float()
        # imported ones may not be unit
        entities = torch.nn.functional.normalize(snap.entity_embeddings.float(), dim=1)
        return entity_ranking(entities, snap.graph.entity_event, vectors, asks, sim, snap.num_events, ecfg, top,
                              named if ecfg.named_speakers_only else None, snap.speaker_of)

    def start_scores(self, sim: Similarity, anchors: Anchors) -> torch.Tensor:
        """The beam's start score of each anchor, on the scale of the transitions it competes
        with: the best anchor counts as a hop of weight ``beam.anchor_weight`` to the event most
        similar to the question, exp(lambda1 * anchor_weight + lambda2 * c), c the best cosine of
        an anchor with the question; the others scale by their RRF relative to the best. So an
        expansion whose transition beats a weak anchor's displaces it, and removing or
        re-weighting a relation (the ablations) changes the transitions, not the anchors.
        float64, as the beam's scores are (query/beam.py)."""
        b, valid = self.cfg.beam, anchors.ids >= 0
        rows = torch.arange(anchors.ids.shape[0], device=anchors.ids.device)[:, None].expand_as(anchors.ids)
        cos = torch.full(anchors.ids.shape, -1.0, dtype=torch.float64, device=anchors.ids.device)
        cos[valid] = sim.pairs(rows[valid], anchors.ids[valid]).double()
        top = torch.exp(b.lambda1 * b.anchor_weight + b.lambda2 * cos.max(dim=1).values)
        best = anchors.scores[:, :1].clamp(min=1e-12)
        return top[:, None] * anchors.scores / best

    @torch.inference_mode()
    def expand(self, snap: StoreSnapshot, sim: Similarity, intents: torch.Tensor, anchors: Anchors) -> BeamResult:
        return beam_search(snap.graph, sim, intents, anchors.ids, self.start_scores(sim, anchors), self.weights,
                           self.cfg.beam, self.kernel)

    def _assemble(self, snap, questions, intents, windows, anchors, res: BeamResult, budget,
                  filter_windows: list | None = None) -> list[Retrieval]:
        """Retrievals from the visited set; with ``filter_windows`` (epoch windows) expansions
        outside their question's window are left out too."""
        rows, causal = snap.rows, list(zip(*(t.tolist() for t in snap.causal_edges), strict=True))
        later_of = superseders(*snap.supersedes, snap.timestamps, snap.num_events)
        order = salience_order(res)
        if filter_windows is not None and order.numel():
            of_query = [filter_windows[i] for i in res.query[order].tolist()]
            order = order[inside_windows(res.node[order][:, None], of_query, snap.timestamps, snap.date_spans)[:, 0]]
        q_of, node, score = res.query.tolist(), res.node.tolist(), res.score.tolist()
        parent, rel, via = res.parent.tolist(), res.relation.tolist(), res.via.tolist()
        per_query: list[list[int]] = [[] for _ in questions]
        for i in order.tolist():
            per_query[q_of[i]].append(i)
        out = []
        for b, text in enumerate(questions):
            idx = per_query[b]
            past = self.past is not None and bool(self.past.search(text))
            scored, follows = prefer_current([(node[i], score[i]) for i in idx], later_of, rows,
                                             self.cfg.supersession, past,
                                             None if windows[b] is None else _utc(windows[b][1]))
            ranked = [e for e, _ in scored]
            intent = INTENTS[int(intents[b])]
            episodes = snap.episode_of[ranked].tolist() if ranked else []
            starts = {ep: rows[int(snap.episode_first[ep])].timestamp for ep in set(episodes)}
            context, kept, blocks = linearize(ranked, intent, rows, causal, budget, episodes=episodes, starts=starts,
                                              ids=snap.event_ids, notes=notes(ranked, later_of, rows, snap.event_ids),
                                              follows=follows)
            nodes = [_node(rows, e, sc, blk.tokens, later_of.get(e, [None])[0])
                     for (e, sc), blk in zip(scored, blocks, strict=True)]
            # An expansion whose parent the time filter left out keeps no path: paths join retrieved events only.
            retrieved = {node[i] for i in idx}
            paths = [PathEdge(parent[i], node[i], _relation_name(rel[i], via[i], snap), score[i])
                     for i in idx if parent[i] in retrieved]
            out.append(Retrieval(text, intent, windows[b], self._anchor_list(anchors, b, retrieved), nodes, paths,
                                 context, count_tokens(context), [b.event for b in kept], 0.0,
                                 truncated=any(b.cut for b in kept)))
        return out

    @staticmethod
    def _full_context(snap, questions, intents, windows, budget) -> list[Retrieval]:
        """Every event, oldest first; the context keeps the newest blocks that fit ``budget``."""
        rows = snap.rows
        order = sorted(range(snap.num_events), key=lambda e: (rows[e].timestamp, e))
        blocks = render_blocks(order, rows, ids=snap.event_ids)
        kept, note = blocks, ""
        if budget is not None and sum(b.tokens for b in blocks) > budget:
            room = budget - count_tokens(_omitted(len(blocks)))
            used, start = 0, len(blocks)
            while start > 0 and (start == len(blocks) or used + blocks[start - 1].tokens <= room):
                start -= 1
                used += blocks[start].tokens
            kept, note = blocks[start:], _omitted(start) if start else ""
            limit = room if note else budget
            if kept[0].tokens > limit:   # only the newest event, alone, can be over it: cut its text
                kept = [cut_block(kept[0], limit)]
                blocks = blocks[:-1] + kept
        context = "\n".join(([note] if note else []) + [b.text for b in kept])
        n_tokens, kept_ids = count_tokens(context), [b.event for b in kept]
        nodes = [_node(rows, b.event, 0.0, b.tokens) for b in blocks]
        truncated = bool(note) or any(b.cut for b in kept)
        return [Retrieval(text, INTENTS[int(intents[i])], windows[i], [], list(nodes), [], context, n_tokens,
                          list(kept_ids), 0.0, truncated=truncated) for i, text in enumerate(questions)]

    @staticmethod
    def _anchor_list(anchors, b, retrieved: set[int]) -> list[Anchor]:
        """Question ``b``'s anchors among the ``retrieved`` rows: the beam keeps at most ``max_nodes`` of
        them and the time filter those in the window (before, the views looked the others up among the
        retrieved events and failed)."""
        out = []
        for j, a in enumerate(anchors.ids[b].tolist()):
            if a < 0:
                break
            if a not in retrieved:
                continue
            ranks = {s: int(r) for s, r in zip(SIGNALS, anchors.ranks[b, j].tolist(), strict=True) if r > 0}
            out.append(Anchor(a, float(anchors.fused_scores[b, j]), ranks))
        return out


def _with_event_ids(r: Retrieval, ids: list[int]) -> Retrieval:
    """``r`` with the stable event ids users hold in place of the snapshot's rows (they differ
    once a forget has compacted the rows)."""
    return dataclasses.replace(
        r, anchors=[dataclasses.replace(a, id=ids[a.id]) for a in r.anchors],
        nodes=[dataclasses.replace(n, id=ids[n.id], superseded_by=None if n.superseded_by is None
                                   else ids[n.superseded_by]) for n in r.nodes],
        paths=[dataclasses.replace(p, src=ids[p.src], dst=ids[p.dst]) for p in r.paths],
        context_ids=[ids[i] for i in r.context_ids])


def _omitted(n: int) -> str:
    return f"…{n} earlier event{'s' if n != 1 else ''} left out to fit the context window…"


def _node(rows, event: int, score: float, tokens: int, superseded_by: int | None = None) -> RetrievedNode:
    r = rows[event]
    until = None if superseded_by is None else datetime.fromtimestamp(rows[superseded_by].timestamp, timezone.utc)
    return RetrievedNode(event, r.text, datetime.fromtimestamp(r.timestamp, timezone.utc),
                         [r.source_id] if r.source_id else [], score, r.speaker, tokens, until, superseded_by)


def _relation_name(rel: int, via: int, snap: StoreSnapshot) -> str:
    """"entity:<name>" and "episode:<its start time>" for hops through a node, else the relation."""
    name = TRAVERSED[rel]
    if via < 0:
        return name
    if name == "episode":
        return f"episode:{format_time(snap.rows[int(snap.episode_first[via])].timestamp)}"
    return f"{name}:{snap.entity_names[via]}"


def epoch_window(window: tuple[datetime, datetime] | None) -> tuple[float, float] | None:
    """A question's time window in epoch seconds, as ``anchors`` and ``fused`` take it."""
    return None if window is None else (_utc(window[0]), _utc(window[1]))


def _utc(t: datetime) -> float:
    return (t.replace(tzinfo=timezone.utc) if t.tzinfo is None else t).timestamp()
