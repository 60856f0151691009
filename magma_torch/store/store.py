"""MemoryStore: event, entity and episode tables, the multigraph and the indexes, behind one lock.

Writers (the fast path and the slow-path worker) mutate under ``lock``; readers take a
``snapshot()`` under the lock and then work without it: every tensor in a snapshot is
a view that later appends never modify.
"""
from __future__ import annotations

import logging
import threading
from dataclasses import dataclass

import torch
from torch_geometric.data import HeteroData

from magma_torch.config.schema import Bm25Config, MemoryConfig, check
from magma_torch.hardware import auto_scan_dtype
from magma_torch.store import packed_half
from magma_torch.store.graph import GraphSnapshot, MultiGraph
from magma_torch.store.keyword_index import KeywordIndex
from magma_torch.store.tables import EntityTable, EpisodeTable, EventRow, EventTable
from magma_torch.store.vector_index import VectorIndex

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class StoreSnapshot:
    num_events: int
    num_entities: int
    num_episodes: int
    embeddings: torch.Tensor          # [num_events, d]
    # small batches' copy: float32 [d, num_events], half precision [num_events, d], or packed for FBGEMM
    scan_embeddings: torch.Tensor | packed_half.PackedView
    timestamps: torch.Tensor          # [num_events] float64 epoch seconds
    date_spans: torch.Tensor          # [num_events, 2] mentioned-date span, NaN when none
    prev: torch.Tensor                # [num_events] temporal-chain predecessor, -1 at a stream's start
    chain_dots: torch.Tensor          # [num_events, span] cosine with the 1st..span-th predecessor (0: none)
    next: torch.Tensor                # [num_events] successor; may point past num_events
    graph: GraphSnapshot
    rows: list[EventRow]              # the shared append-only list; read only [:num_events]
    entity_names: list[str]
    entity_embeddings: torch.Tensor   # [num_entities, d] embeddings of the entity names
    vector_index: VectorIndex
    keyword_index: KeywordIndex
    causal_edges: tuple[torch.Tensor, torch.Tensor]
    episode_of: torch.Tensor          # [num_events] episode id of each event
    speaker_of: torch.Tensor          # [num_events] speaker id of each event (-1: none)
    speaker_names: list[str]          # speaker id -> name (shared, append-only)
    episode_first: torch.Tensor       # [num_episodes] first event of each episode
    episode_sums: torch.Tensor        # [num_episodes, d] summed member embeddings (the open ones may still grow)
    episode_keyword_index: KeywordIndex
    event_ids: list[int]              # row -> stable event id (shared, append-only; read only [:num_events])
    supersedes: tuple[torch.Tensor, torch.Tensor]  # (later, earlier) event of each supersession
    text_tokens: torch.Tensor         # [num_events] tokens of each event's text (tokens.py count_tokens)

    def episode_embeddings(self) -> torch.Tensor:
        """[num_episodes, d] unit episode embeddings."""
        s = self.episode_sums.float()
        return s / torch.linalg.vector_norm(s, dim=1, keepdim=True).clamp(min=1e-12)


class MemoryStore:
    def __init__(self, dim: int, device: torch.device | str = "cpu", vector_backend: str = "auto",
                 bm25_k1: float = 1.5, bm25_b: float = 0.75, chain_span: int = 4, scan_dtype: str = "auto"):
        # The memory's config was checked as a whole; a store built directly is checked here, by the same schema.
        check(MemoryConfig, {"vector_backend": vector_backend, "chain_span": chain_span, "scan_dtype": scan_dtype},
              "MemoryStore")
        check(Bm25Config, {"k1": bm25_k1, "b": bm25_b}, "MemoryStore.bm25")
        self.device = torch.device(device)
        self.dim = dim
        scan = auto_scan_dtype(self.device) if scan_dtype == "auto" else (
            scan_dtype if scan_dtype == packed_half.NAME else getattr(torch, scan_dtype))
        if scan == packed_half.NAME and (self.device.type != "cpu" or not packed_half.available()):
            # A speed setting, not the data's: a memory saved on an x86 CPU opens on any machine.
            scan = auto_scan_dtype(self.device)
            log.warning("MemoryStore.scan_dtype: %s needs FBGEMM on the CPU (x86 builds of torch), not %s with "
                        "engines %s; taking auto's copy, %s", packed_half.NAME, self.device.type,
                        ", ".join(torch.backends.quantized.supported_engines), scan)
        self.events = EventTable(dim, device, chain_span=chain_span, scan_dtype=scan)
        self.entities = EntityTable(dim, device)
        self.episodes = EpisodeTable(dim, device)
        self.graph = MultiGraph(device)
        self.vector_index = VectorIndex(dim, device, vector_backend)
        self.keyword_index = KeywordIndex(bm25_k1, bm25_b)
        self.episode_keywords = KeywordIndex(bm25_k1, bm25_b)   # an episode's document: its events' terms
        self.lock = threading.RLock()
        # Serialises fast-path calls from validation to write, so two concurrent adds cannot
        # both pass the duplicate/ordering checks; readers and the slow path never take it.
        self.ingest_lock = threading.Lock()

    def __len__(self) -> int:
        return len(self.events)

    def append_events(self, rows: list[EventRow], embeddings: torch.Tensor, tokens: list[list[str]],
                      event_ids: list[int] | None = None) -> list[int]:
        """Add event nodes to the table and both indexes (caller holds the lock); returns their rows."""
        ids = self.events.append(rows, embeddings, event_ids)
        self.vector_index.add(embeddings, self.events.embeddings.data)
        self.keyword_index.add(tokens)
        return ids

    def entity_id(self, name: str) -> int | None:
        return self.entities.by_name.get(name)

    def snapshot(self) -> StoreSnapshot:
        with self.lock:
            n, m, p = len(self.events), len(self.entities), len(self.episodes)
            s, d, _ = self.graph.edges("causal")
            later, earlier, _ = self.graph.edges("supersedes")
            return StoreSnapshot(n, m, p, self.events.embeddings.data, self.events.scan_embeddings.data,
                                 self.events.timestamps.data, self.events.date_spans.data,
                                 self.events.prev.data, self.events.chain_dots.data, self.events.next.data,
                                 self.graph.snapshot(n, m, p), self.events.rows, self.entities.names,
                                 self.entities.embeddings.data,
                                 self.vector_index, self.keyword_index, (s, d), self.events.episode.data,
                                 self.events.speaker.data, self.events.speaker_names, self.episodes.first.data,
                                 self.episodes.sums.data, self.episode_keywords, self.events.ids, (later, earlier),
                                 self.events.text_tokens.data)

    def hetero_data(self) -> HeteroData:
        """The live multigraph as PyG ``HeteroData``, every tensor a view of the store's (no copy).

        Node types ``event`` (``x``: unit embeddings [N, d], ``time``: epoch seconds, float64),
        ``entity`` (``x``: embedding of the name) and ``episode`` (``x``: the *sum* of its
        events' embeddings, unnormalised); edge types ``graph.EDGE_TYPES`` in their stored
        direction plus ``graph.REVERSED``, each with an ``EdgeIndex`` and an ``edge_weight``.

        A snapshot: taken under the lock, it holds the nodes and edges there were at that
        moment. Later adds never show up in it and never change it (they write past its end or
        into a new buffer), with two exceptions that write in place: a stream's open episode
        (its ``x`` grows as events join it) and a failed write's rollback, whose rows the next
        write reuses. Call ``hetero_data()`` again for a newer graph.
        """
        with self.lock:
            n, m, p = len(self.events), len(self.entities), len(self.episodes)
            data = self.graph.to_hetero_data(n, m, p)
            data["event"].x = self.events.embeddings.data
            data["event"].time = self.events.timestamps.data
            data["entity"].x = self.entities.embeddings.data
            data["episode"].x = self.episodes.sums.data
            return data

    def adopt(self, other: "MemoryStore") -> None:
        """Take ``other``'s contents (a rebuilt copy of this store, e.g. after a forget); the caller
        holds ``lock``. Snapshots taken before keep the old objects, which are never written again."""
        for name in ("events", "entities", "episodes", "graph", "vector_index", "keyword_index",
                     "episode_keywords"):
            setattr(self, name, getattr(other, name))

    def stats(self) -> dict:
        with self.lock:
            return {"events": len(self.events), "entities": len(self.entities), "episodes": len(self.episodes),
                    "edges": self.graph.counts()}
