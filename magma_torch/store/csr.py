"""Incrementally maintained CSR adjacency with vectorised neighbourhood gathers.

New edges land in a small sorted delta; the delta is merged into the main CSR when it
grows past a fraction of it, so the cost of keeping the view current is amortised
O(log E) per edge instead of a full rebuild per append.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from magma_torch.store.growable import GrowableTensor


@dataclass(frozen=True)
class CSRSnapshot:
    """An immutable view for readers: main CSR plus the sorted delta at one moment."""

    rowptr: torch.Tensor      # [rows + 1] of the main part
    col: torch.Tensor
    rel: torch.Tensor
    delta_row: torch.Tensor   # sorted by row
    delta_col: torch.Tensor
    delta_rel: torch.Tensor

    def gather(self, rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """All out-edges of ``rows``: (position in ``rows``, neighbour, relation id), the main part's
        edges first, then the pending delta's: a caller that needs each position's edges together
        sorts by position (the beam search and the re-ranker key edges by it and need no order)."""
        main = _gather_csr(self.rowptr, self.col, self.rel, rows)
        if self.delta_row.numel() == 0:
            return main
        lo = torch.searchsorted(self.delta_row, rows, right=False)
        hi = torch.searchsorted(self.delta_row, rows, right=True)
        delta = _expand(lo, hi - lo, self.delta_col, self.delta_rel)
        return tuple(torch.cat(pair) for pair in zip(main, delta, strict=True))

    def degree(self, rows: torch.Tensor) -> torch.Tensor:
        start, deg = _row_bounds(self.rowptr, rows)
        if self.delta_row.numel():
            deg = deg + torch.searchsorted(self.delta_row, rows, right=True) - torch.searchsorted(self.delta_row, rows)
        return deg


def _row_bounds(rowptr, rows):
    """(start, degree) per row; rows the main CSR does not cover yet have degree 0."""
    inside = rows < rowptr.numel() - 1
    start = rowptr.index_select(0, torch.where(inside, rows, torch.zeros_like(rows)))
    end = rowptr.index_select(0, torch.where(inside, rows + 1, torch.zeros_like(rows)))
    return start, end - start


def _gather_csr(rowptr, col, rel, rows):
    start, deg = _row_bounds(rowptr, rows)
    return _expand(start, deg, col, rel)


def _expand(start, deg, col, rel):
    seg = torch.repeat_interleave(deg)                      # row i repeated deg[i] times
    # entry j of row i sits at start[i] + j, where j = position - (entries before row i)
    idx = (start - torch.cumsum(deg, 0) + deg).index_select(0, seg) + torch.arange(seg.numel(), device=deg.device)
    return seg, col.index_select(0, idx), rel.index_select(0, idx)


class IncrementalCSR:
    """Directed adjacency (row -> col, relation id) kept as main CSR + sorted delta.

    Hand-written rather than PyG's ``EdgeIndex``: an ``EdgeIndex`` cannot grow in place (each
    add would rebuild its cached CSR), and it has no gather of many rows' neighbourhoods at
    once, which the beam does at every depth (``CSRSnapshot.gather``).
    """

    def __init__(self, device: torch.device | str = "cpu", merge_fraction: float = 0.125,
                 min_merge: int = 4096):
        self.device = torch.device(device)
        self.merge_fraction = merge_fraction
        self.min_merge = min_merge
        self._row = GrowableTensor((), torch.long, device)
        self._col = GrowableTensor((), torch.long, device)
        self._rel = GrowableTensor((), torch.long, device)
        self._main_edges = 0
        empty = torch.zeros(0, dtype=torch.long, device=self.device)
        self._snapshot = CSRSnapshot(torch.zeros(1, dtype=torch.long, device=self.device),
                                     empty, empty, empty, empty, empty)
        self._stale = False

    def __len__(self) -> int:
        return len(self._row)

    def add(self, row: torch.Tensor, col: torch.Tensor, rel: torch.Tensor) -> None:
        self._row.extend(row)
        self._col.extend(col)
        self._rel.extend(rel)
        self._stale = True

    def snapshot(self, num_rows: int) -> CSRSnapshot:
        if self._stale:
            delta = len(self._row) - self._main_edges
            if self._main_edges == 0 or delta > max(self.min_merge, self.merge_fraction * self._main_edges):
                self._snapshot = self._build_main(num_rows)
            else:
                self._snapshot = self._with_delta()
            self._stale = False
        return self._snapshot

    def _build_main(self, num_rows: int) -> CSRSnapshot:
        row, col, rel = self._row.data, self._col.data, self._rel.data
        order = torch.argsort(row * 8 + rel, stable=True)  # group by row, then relation
        # Cover every row that has an edge, even past num_rows: edges left out here would
        # be counted as merged and never show up again.
        num_rows = max(num_rows, int(row.max()) + 1) if row.numel() else num_rows
        rowptr = torch.zeros(num_rows + 1, dtype=torch.long, device=self.device)
        rowptr[1:] = torch.cumsum(torch.bincount(row, minlength=num_rows)[:num_rows], 0)
        self._main_edges = row.numel()
        empty = torch.zeros(0, dtype=torch.long, device=self.device)
        return CSRSnapshot(rowptr, col[order].clone(), rel[order].clone(), empty, empty, empty)

    def _with_delta(self) -> CSRSnapshot:
        start = self._main_edges
        row = self._row.data[start:]
        order = torch.argsort(row, stable=True)
        s = self._snapshot
        return CSRSnapshot(s.rowptr, s.col, s.rel, row[order].clone(),
                           self._col.data[start:][order].clone(), self._rel.data[start:][order].clone())
