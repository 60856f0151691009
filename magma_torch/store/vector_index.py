"""Exact inner-product search: FAISS when installed (GPU index on CUDA), else torch.

Embeddings are L2-normalised, so inner product is cosine similarity.
"""
from __future__ import annotations

import importlib
import logging
import threading

import torch

from magma_torch.config.schema import MemoryConfig, check
from magma_torch.errors import MissingDependencyError

log = logging.getLogger(__name__)


def _import_faiss():
    try:
        return importlib.import_module("faiss")
    except ImportError:
        return None


class VectorIndex:
    """Flat (exact) index that grows incrementally.

    backend: "auto" (faiss if importable, else torch), "faiss" or "torch". On CUDA the
    faiss backend needs faiss-gpu; without it "auto" falls back to the torch
    matmul + topk path on the same device.
    """

    def __init__(self, dim: int, device: torch.device | str = "cpu", backend: str = "auto"):
        check(MemoryConfig, {"vector_backend": backend}, "VectorIndex")   # "faise" fell back to torch in silence
        self.dim = dim
        self.device = torch.device(device)
        faiss = _import_faiss() if backend in ("auto", "faiss") else None
        if backend == "faiss" and faiss is None:
            raise MissingDependencyError("vector_backend=faiss needs faiss: pip install 'magma-torch[faiss]' "
                                         "(or faiss-gpu on a cluster; vector_backend=auto runs without it)")
        self._index = None
        if faiss is not None:
            self._index = faiss.IndexFlatIP(dim)
            if self.device.type == "cuda":
                if hasattr(faiss, "StandardGpuResources"):
                    self._res = faiss.StandardGpuResources()
                    self._index = faiss.index_cpu_to_gpu(self._res, self.device.index or 0, self._index)
                elif backend == "faiss":
                    raise MissingDependencyError("vector_backend=faiss on cuda needs faiss-gpu (from conda or the "
                                                 "cluster; pip's faiss-cpu has no GPU index)")
                else:
                    self._index = None
        self.backend = "faiss" if self._index is not None else "torch"
        self._vectors: torch.Tensor | None = None  # torch backend reads the event table's tensor
        # A faiss index must not be searched while it grows (its storage is reallocated), and
        # a snapshot's upto == ntotal check must hold for the search that follows it.
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return self._index.ntotal if self._index is not None else (0 if self._vectors is None else len(self._vectors))

    def add(self, vectors: torch.Tensor, all_vectors: torch.Tensor) -> None:
        """Index new rows. ``all_vectors`` is the full embedding column (torch backend
        searches it directly instead of keeping a second copy)."""
        with self._lock:
            if self._index is not None:
                self._index.add(vectors.detach().float().cpu().numpy())
            self._vectors = all_vectors

    def search(self, queries: torch.Tensor, k: int, upto: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Top-k (scores, ids) per query row; ids are -1 where fewer than k exist.

        ``upto`` restricts the search to ids < upto (a reader's snapshot).
        """
        b = queries.shape[0]
        with self._lock:
            n = len(self) if upto is None else min(upto, len(self))
            k_eff = min(k, n)
            if k_eff == 0:
                return (torch.full((b, k), float("-inf"), device=queries.device),
                        torch.full((b, k), -1, dtype=torch.long, device=queries.device))
            if self._index is not None and n == self._index.ntotal:
                scores, ids = self._index.search(queries.detach().float().cpu().numpy(), k_eff)
                scores = torch.from_numpy(scores).to(queries.device)
                ids = torch.from_numpy(ids).to(queries.device)
                vectors = None
            else:
                vectors = self._vectors[:n]
        if vectors is not None:  # exact torch path on a view that later adds never change
            sims = queries.to(vectors.dtype) @ vectors.T
            scores, ids = torch.topk(sims.float(), k_eff, dim=1)
        if k_eff < k:
            pad = k - k_eff
            scores = torch.cat([scores, torch.full((b, pad), float("-inf"), device=scores.device)], 1)
            ids = torch.cat([ids, torch.full((b, pad), -1, dtype=torch.long, device=ids.device)], 1)
        return scores, ids
