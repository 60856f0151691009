"""MemoryStore: event and entity tables, the multigraph and both indexes, behind one lock.

Writers (the fast path and the slow-path worker) mutate under ``lock``; readers take a
``snapshot()`` under the lock and then work without it: every tensor in a snapshot is
a view that later appends never modify.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass

import torch

from magma_torch.store.graph import GraphSnapshot, MultiGraph
from magma_torch.store.keyword_index import KeywordIndex
from magma_torch.store.tables import EntityTable, EventRow, EventTable
from magma_torch.store.vector_index import VectorIndex


@dataclass(frozen=True)
class StoreSnapshot:
    num_events: int
    num_entities: int
    embeddings: torch.Tensor          # [num_events, d]
    scan_embeddings: torch.Tensor     # [num_events, d] half-precision copy for the query path's scan
    timestamps: torch.Tensor          # [num_events] float64 epoch seconds
    date_spans: torch.Tensor          # [num_events, 2] mentioned-date span, NaN when none
    prev: torch.Tensor                # [num_events] temporal-chain predecessor, -1 at a stream's start
    chain_dots: torch.Tensor          # [num_events, span] cosine with the 1st..span-th predecessor (0: none)
    next: torch.Tensor                # [num_events] successor; may point past num_events
    graph: GraphSnapshot
    rows: list[EventRow]              # the shared append-only list; read only [:num_events]
    entity_names: list[str]
    vector_index: VectorIndex
    keyword_index: KeywordIndex
    causal_edges: tuple[torch.Tensor, torch.Tensor]


class MemoryStore:
    def __init__(self, dim: int, device: torch.device | str = "cpu", vector_backend: str = "auto",
                 bm25_k1: float = 1.5, bm25_b: float = 0.75, chain_span: int = 4, scan_dtype: str = "float16"):
        self.device = torch.device(device)
        self.dim = dim
        self.events = EventTable(dim, device, chain_span=chain_span, scan_dtype=getattr(torch, scan_dtype))
        self.entities = EntityTable(dim, device)
        self.graph = MultiGraph(device)
        self.vector_index = VectorIndex(dim, device, vector_backend)
        self.keyword_index = KeywordIndex(bm25_k1, bm25_b)
        self.lock = threading.RLock()
        # Serialises fast-path calls from validation to write, so two concurrent adds cannot
        # both pass the duplicate/ordering checks; readers and the slow path never take it.
        self.ingest_lock = threading.Lock()

    def __len__(self) -> int:
        return len(self.events)

    def append_events(self, rows: list[EventRow], embeddings: torch.Tensor, tokens: list[list[str]]) -> list[int]:
        """Add event nodes to the table and both indexes (caller holds the lock)."""
        ids = self.events.append(rows, embeddings)
        self.vector_index.add(embeddings, self.events.embeddings.data)
        self.keyword_index.add(tokens)
        return ids

    def entity_id(self, name: str) -> int | None:
        return self.entities.by_name.get(name)

    def snapshot(self) -> StoreSnapshot:
        with self.lock:
            n, m = len(self.events), len(self.entities)
            s, d, _ = self.graph.edges("causal")
            return StoreSnapshot(n, m, self.events.embeddings.data, self.events.scan_embeddings.data,
                                 self.events.timestamps.data, self.events.date_spans.data,
                                 self.events.prev.data, self.events.chain_dots.data, self.events.next.data,
                                 self.graph.snapshot(n, m), self.events.rows, self.entities.names,
                                 self.vector_index, self.keyword_index, (s, d))

    def stats(self) -> dict:
        with self.lock:
            return {"events": len(self.events), "entities": len(self.entities), "edges": self.graph.counts()}
