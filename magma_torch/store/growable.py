"""Capacity-doubling tensors: amortised O(1) appends for columns and edge lists."""
from __future__ import annotations

import torch


class GrowableTensor:
    """A tensor that grows along dim 0 by doubling its capacity.

    ``data`` is a view of the first ``len(self)`` rows; a view taken earlier stays
    valid and unchanged after later appends (appends write past it or into a new
    buffer), which is what lets readers hold snapshots without locks.
    """

    def __init__(self, tail_shape: tuple[int, ...] = (), dtype: torch.dtype = torch.float32,
                 device: torch.device | str = "cpu", capacity: int = 1024):
        self._buf = torch.empty((max(capacity, 1), *tail_shape), dtype=dtype, device=device)
        self._len = 0

    def __len__(self) -> int:
        return self._len

    @property
    def data(self) -> torch.Tensor:
        return self._buf[: self._len]

    @property
    def capacity(self) -> int:
        return self._buf.shape[0]

    def extend(self, rows: torch.Tensor) -> None:
        rows = rows.to(device=self._buf.device, dtype=self._buf.dtype)
        need = self._len + rows.shape[0]
        if need > self.capacity:
            cap = self.capacity
            while cap < need:
                cap *= 2
            grown = torch.empty((cap, *self._buf.shape[1:]), dtype=self._buf.dtype, device=self._buf.device)
            grown[: self._len] = self._buf[: self._len]
            self._buf = grown
        self._buf[self._len: need] = rows
        self._len = need

    def truncate(self, length: int) -> None:
        """Forget rows past ``length`` (rollback of a failed batch)."""
        self._len = min(self._len, length)
