"""Bulk insertion of pre-embedded events and of their links (imports, benchmarks at 10^6).

Unlike the fast path this neither embeds nor searches: the caller brings the embeddings
and the semantic, causal and entity links. Work is linear in the batch: one append per
column (capacity-doubling buffers) and the edges go into the CSR delta, which is merged
when it outgrows a fraction of the main part, so no call re-sorts or copies the store
and nothing compares all pairs. Everything is validated before anything is written, so
bad input raises naming the record or edge and leaves the store as it was.

The links are final: nothing is queued for the slow path, and no write-ahead log is
written, so use it to build non-durable stores.
"""
from __future__ import annotations

import math
from collections.abc import Callable

import torch

from magma_torch.ingest.episodes import EpisodeConfig, assign_episodes
from magma_torch.ingest.fast_path import IngestError, link_temporal
from magma_torch.store.store import MemoryStore
from magma_torch.store.tables import EventRow, date_span


def add_entities(store: MemoryStore, names: list[str], embeddings: torch.Tensor, kind: str = "imported") -> list[int]:
    """Entity nodes with their name embeddings [len(names), dim]; returns their ids."""
    _check_rows("entity embeddings", embeddings, len(names), store.dim)
    seen = set(store.entities.by_name)
    for i, name in enumerate(names):
        if name in seen:
            raise IngestError(f"entity {i} ({name!r}): the name is already taken")
        seen.add(name)
    with store.lock:
        return store.entities.append(list(names), [kind] * len(names), list(names), embeddings)


def add_events(store: MemoryStore, rows: list[EventRow], embeddings: torch.Tensor,
               tokens: list[list[str]] | None = None, episodes: EpisodeConfig = EpisodeConfig()) -> range:
    """Append events (time order within each stream) with their embeddings [len(rows), dim],
    their temporal-chain edges and their episodes (segmented as the fast path does).
    ``tokens`` are the keyword-index terms of each event; None tokenises the texts.
    Returns the new ids."""
    _check_rows("event embeddings", embeddings, len(rows), store.dim)
    if tokens is not None and len(tokens) != len(rows):
        raise IngestError(f"tokens has {len(tokens)} entries for {len(rows)} events")
    with store.ingest_lock:
        last = {stream: store.events.rows[i].timestamp for stream, i in store.events.last_of_stream.items()}
        known = store.events.by_source
        batch_sources = set()
        for i, r in enumerate(rows):
            if not math.isfinite(r.timestamp):     # NaN would pass every order check
                raise IngestError(f"event {i}: timestamp {r.timestamp} is not a finite number")
            if r.timestamp < last.get(r.stream, float("-inf")):
                raise IngestError(f"event {i}: timestamp {r.timestamp} goes backwards in stream {r.stream!r}")
            last[r.stream] = r.timestamp
            if not isinstance(r.text, str):
                raise IngestError(f"event {i}: text is a {type(r.text).__name__}, not a string")
            try:
                date_span(r)
            except (KeyError, TypeError, ValueError) as err:
                raise IngestError(f"event {i}: a date of its dates cannot be read "
                                  f"({type(err).__name__}: {err})") from None
            if r.source_id is not None:
                if r.source_id in known or r.source_id in batch_sources:
                    raise IngestError(f"event {i}: source_id {r.source_id!r} is already stored")
                batch_sources.add(r.source_id)
        if not rows:
            return range(len(store), len(store))
        if tokens is None:
            tokens = store.keyword_index.tokenize([r.text for r in rows])
        with store.lock:
            embeddings = embeddings.to(store.device, store.events.embeddings.data.dtype)
            ids = store.append_events(rows, embeddings, tokens)
            link_temporal(store, ids)
            assign_episodes(store, ids, embeddings, episodes, tokens)
    return range(ids[0], ids[-1] + 1)


def add_links(store: MemoryStore, semantic: tuple[torch.Tensor, ...] | None = None,
              causal: tuple[torch.Tensor, torch.Tensor] | None = None,
              mentions: tuple[torch.Tensor, torch.Tensor] | None = None) -> None:
    """Add edges between stored nodes: semantic (newer event, older event, cosine),
    causal (cause, effect): two events of one stream, the cause appended before the effect
    (a stream's rows follow its time order, so the cause precedes the effect in time, and
    the causal graph stays acyclic without a path search), and mentions (event, entity). Each edge
    once: a repeat within the call, or of a causal link or mention already stored, is refused."""
    # Checked and written under one hold of the lock: the slow path stores causal links and
    # mentions too, and one it stored between the check and the write would be stored twice.
    with store.lock:
        checked = _checked_links(store, semantic, causal, mentions)
        for rel, (src, dst, weight) in checked.items():
            store.graph.add_edges(rel, src, dst, weight)


def _checked_links(store: MemoryStore, semantic, causal, mentions) -> dict[str, tuple]:
    """add_links' edges by relation as (src, dst, weight) tensors, each checked against its rules."""
    n, m = len(store.events), len(store.entities)
    checked = {}
    for rel, edges, hi_dst in (("semantic", semantic, n), ("causal", causal, n), ("entity", mentions, m)):
        if edges is None:
            continue
        src, dst = (torch.as_tensor(t, dtype=torch.long).cpu() for t in edges[:2])
        weight = torch.as_tensor(edges[2], dtype=torch.float32).cpu() if len(edges) > 2 else None
        if src.shape != dst.shape or src.dim() != 1 or (weight is not None and weight.shape != src.shape):
            raise IngestError(f"{rel} edges: src, dst (and weight) must be 1-d of one length")
        if weight is not None and not torch.isfinite(weight).all():   # the save would not load back
            bad = int(torch.nonzero(~torch.isfinite(weight))[0])
            raise IngestError(f"{rel} edges: edge {bad} ({int(src[bad])} -> {int(dst[bad])}) has weight "
                              f"{float(weight[bad])}, not a finite number")
        _check_ids(rel, "source", src, n)
        _check_ids(rel, "target", dst, hi_dst)
        if rel == "semantic":
            _check_edge(rel, src <= dst, src, dst, "must point from a newer event to an older one")
        if rel == "causal":
            _check_edge(rel, src >= dst, src, dst, "must point from an earlier event to a later one")
            _check_edge(rel, _across_streams(store, src, dst), src, dst,
                        "joins two streams (a causal link stays within a stream)")
        # (stored semantic edges are not looked up: the graph keeps no lookup of them, and a scan of them all
        # is not linear in the batch)
        lookup = {"causal": store.graph.has_causal, "entity": store.graph.has_mention}.get(rel)
        stored, again = _repeated(src, dst, lookup)
        _check_edge(rel, stored, src, dst, "is already stored")
        _check_edge(rel, again, src, dst, "repeats an earlier edge of this call")
        checked[rel] = (src, dst, weight)
    return checked


def _check_rows(what: str, embeddings: torch.Tensor, rows: int, dim: int) -> None:
    if embeddings.dim() != 2 or embeddings.shape != (rows, dim):
        raise IngestError(f"{what}: expected shape ({rows}, {dim}), got {tuple(embeddings.shape)}")
    # inner products are read as cosines (and bound the float16 scan's error): unit rows only
    norms = torch.linalg.vector_norm(embeddings.float(), dim=1)
    bad = (~torch.isfinite(norms) | ((norms - 1).abs() > 1e-3)).nonzero()
    if bad.numel():
        i = int(bad[0])
        raise IngestError(f"{what}: row {i} has L2 norm {float(norms[i]):.4g}; the store holds L2-normalised vectors")


def _across_streams(store: MemoryStore, src: torch.Tensor, dst: torch.Tensor) -> torch.Tensor:
    """Per edge: its ends are events of different streams (one lookup per distinct event)."""
    ends, where = torch.unique(torch.cat([src, dst]), return_inverse=True)
    codes: dict[str, int] = {}
    stream = torch.tensor([codes.setdefault(store.events.rows[i].stream, len(codes)) for i in ends.tolist()],
                          dtype=torch.long)
    return stream[where[:src.numel()]] != stream[where[src.numel():]]


def _repeated(src: torch.Tensor, dst: torch.Tensor, stored: Callable[[int, int], bool] | None
              ) -> tuple[torch.Tensor, torch.Tensor]:
    """Per edge: the graph holds it already (``stored``, its lookup; None: not asked); an earlier edge of the
    batch is the same. The graph holds each edge once: integrity.check counts a repeated causal link as
    damage, a repeated mention counts its event twice in the entity's degree (the beam's specificity), and a
    repeated semantic edge twice in its event's neighbours (lifecycle's relinking after an update)."""
    keys = src * (int(dst.max()) + 1) + dst if dst.numel() else src
    order = torch.argsort(keys, stable=True)      # a repeat sorts after the first of its edge
    again = torch.zeros_like(src, dtype=torch.bool)
    again[order[1:]] = keys[order[1:]] == keys[order[:-1]]
    if stored is None:
        return torch.zeros_like(again), again
    return torch.tensor([stored(*pair) for pair in zip(src.tolist(), dst.tolist(), strict=True)],
                        dtype=torch.bool), again


def _check_ids(rel: str, end: str, ids: torch.Tensor, upper: int) -> None:
    bad = ((ids < 0) | (ids >= upper)).nonzero()
    if bad.numel():
        i = int(bad[0])
        raise IngestError(f"{rel} edge {i}: {end} id {int(ids[i])} is not a stored node (0..{upper - 1})")


def _check_edge(rel: str, wrong: torch.Tensor, src: torch.Tensor, dst: torch.Tensor, rule: str) -> None:
    bad = wrong.nonzero()
    if bad.numel():
        i = int(bad[0])
        raise IngestError(f"{rel} edge {i} ({int(src[i])} -> {int(dst[i])}) {rule}")
