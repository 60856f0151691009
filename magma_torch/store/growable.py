"""Capacity-doubling tensors: amortised O(1) appends for columns and edge lists."""
from __future__ import annotations

import torch


class GrowableTensor:
    """A tensor that grows along one dimension by doubling its capacity.

    The buffer is ``[*lead_shape, capacity, *tail_shape]`` and grows along the capacity
    dimension: rows of a column (``lead_shape=()``), or columns of an edge list
    (``lead_shape=(2,)``, so that ``data`` is a ``[2, E]`` view whose rows are contiguous,
    as PyG's ``edge_index`` and ``EdgeIndex`` want).

    ``data`` is a view of the first ``len(self)`` entries; a view taken earlier stays
    valid and unchanged after later appends (appends write past it or into a new
    buffer), which is what lets readers hold snapshots without locks.
    """

    def __init__(self, tail_shape: tuple[int, ...] = (), dtype: torch.dtype = torch.float32,
                 device: torch.device | str = "cpu", capacity: int = 1024, lead_shape: tuple[int, ...] = ()):
        self._dim = len(lead_shape)
        self._buf = torch.empty((*lead_shape, max(capacity, 1), *tail_shape), dtype=dtype, device=device)
        self._len = 0

    def __len__(self) -> int:
        return self._len

    @property
    def data(self) -> torch.Tensor:
        return self._buf.narrow(self._dim, 0, self._len)

    @property
    def capacity(self) -> int:
        return self._buf.shape[self._dim]

    def extend(self, rows: torch.Tensor) -> None:
        """Append ``rows``, shaped like ``data`` but for their count along the growing dimension."""
        rows = rows.to(device=self._buf.device, dtype=self._buf.dtype)
        need = self._len + rows.shape[self._dim]
        if need > self.capacity:
            cap = self.capacity
            while cap < need:
                cap *= 2
            shape = list(self._buf.shape)
            shape[self._dim] = cap
            grown = torch.empty(shape, dtype=self._buf.dtype, device=self._buf.device)
            grown.narrow(self._dim, 0, self._len).copy_(self.data)
            self._buf = grown
        self._buf.narrow(self._dim, self._len, need - self._len).copy_(rows)
        self._len = need
