"""The embeddings' float16 copy packed for FBGEMM's half-precision GEMM (``scan_dtype: float16_packed``).

FBGEMM (in every x86 torch wheel) multiplies float32 activations by float16 weights that it keeps
packed in its own layout, widening them in registers (F16C) and summing in float32. For one
question against 10^5 events that reads half the bytes of the float32 columns, without the
per-value conversions torch's own float16 product makes on CPUs that lack native fp16
arithmetic: on the AVX2-only AMD EPYC VM 2.5-3.0 ms against 6.1-7.6 for the columns and 4.3-5.7
for torch's float16 rows (BENCHMARKS.md). Only the question's events are rounded, not the
question or the sums, so the bound on its error is about a quarter of the float16 scan's.

FBGEMM packs a whole matrix at once, so the copy is built in blocks as the table fills them
(``PackedHalfRows``); the events after the last block are scored from the float32 rows, exactly.
Snapshots hold the blocks that existed when they were taken (``PackedView``), which later appends
never change.
"""
from __future__ import annotations

import functools
import math
import warnings
from dataclasses import dataclass

import torch

NAME = "float16_packed"     # the ``memory.scan_dtype`` that asks for this copy
# FBGEMM packs a whole matrix at once, some 5 µs a row, and each product call costs more than its
# share of one call over all rows: at 10^5 events one question took 2.9 ms from one block and
# 3.4-4.3 from blocks of 8,192 rows. So events are packed in SMALL_ROWS blocks as the table fills
# them, and every LARGE_ROWS events again in one block that replaces its small ones (the add that
# completes one pays its packing, ~0.2 s; a bulk add packs large blocks directly): 2.9-3.7 ms at
# 10^5 events. At most SMALL_ROWS - 1 events (12 MB of float32 rows at d = 384) are scored unpacked.
SMALL_ROWS = 8192
LARGE_ROWS = 4 * SMALL_ROWS


PACKING_ENGINES = ("x86", "fbgemm")   # torch's quantized engines whose float16 prepack is FBGEMM's


def available() -> bool:
    """Whether this torch can pack with FBGEMM's float16 GEMM now: an x86 build (not ARM, not CUDA), with
    an FBGEMM engine selected (another library may select qnnpack or onednn for the process, and prepack
    then refuses; before, that choice was cached for good)."""
    return torch.backends.quantized.engine in PACKING_ENGINES and _fbgemm_packs()


@functools.cache
def _fbgemm_packs() -> bool:
    if "fbgemm" not in torch.backends.quantized.supported_engines:
        return False
    try:
        torch.ops.quantized.linear_prepack_fp16(torch.zeros(1, 8), None)
    except RuntimeError:
        return False
    return True


def pack(rows: torch.Tensor):
    """FBGEMM's packed float16 copy of the float32 ``rows`` [n, d] (rounded to float16 first, so the
    packed values are the float16 rounding of each value, which ``unpack`` gives back)."""
    return torch.ops.quantized.linear_prepack_fp16(rows.half().float(), None)


def unpack(packed, dim: int) -> torch.Tensor:
    """[rows, dim] float32: the values a block holds, as its product with the identity (exact: each sum has
    one nonzero term). FBGEMM's own unpack refuses under another quantized engine; the product runs
    under any (another library may select one for the process), so ``check()`` does too."""
    return torch.ops.quantized.linear_dynamic_fp16(torch.eye(dim), packed).T


@dataclass(frozen=True)
class PackedView:
    """The packed copy of a table's first ``num_rows`` events, as a snapshot holds it."""

    blocks: tuple            # packed float16 blocks of consecutive events, in order
    packed_rows: int         # the events they hold, the first ones of the table
    num_rows: int
    dim: int

    dtype = torch.float16    # what each packed value is, for records and byte counts

    def product(self, queries: torch.Tensor, embeddings: torch.Tensor) -> torch.Tensor:
        """[B, num_rows] float32 approximate cosines of the ``queries`` with the events: the packed
        blocks', then the unpacked events' from their float32 rows ``embeddings``."""
        q = queries.float().contiguous()
        parts = [torch.ops.quantized.linear_dynamic_fp16(q, block) for block in self.blocks]
        parts.append(q @ embeddings[self.packed_rows:self.num_rows].float().T)
        return torch.cat(parts, dim=1)

    def error_bound(self, queries: torch.Tensor) -> torch.Tensor:
        """[B] a bound on |product - exact cosine| for every event of a unit-norm table.

        A float16 rounding moves each value by at most u = 2^-11 of it (2^-25 below float16's
        normal range), so q.e moves by at most |q|(u + sqrt(d) 2^-25); FBGEMM's float32 sum and
        the exact value's own float32 sum each add at most gamma_d |q| |e|, gamma_d = d 2^-24 /
        (1 - d 2^-24) (the unpacked rows' product, float32 both ways, stays within the latter)."""
        unit = 2.0 ** -24
        gamma = self.dim * unit / (1 - self.dim * unit)
        rounding = 2.0 ** -11 + math.sqrt(self.dim) * 2.0 ** -25
        return torch.linalg.vector_norm(queries.float(), dim=1) * (rounding + 2 * gamma * (1 + rounding))

    def unpacked(self) -> torch.Tensor:
        """[packed_rows, d] float32: the values the blocks hold (integrity checks, tests)."""
        return torch.cat([unpack(b, self.dim) for b in self.blocks]) if self.blocks else torch.empty(0, self.dim)


class PackedHalfRows:
    """The growing packed copy of an event table's embeddings: large blocks, then small ones."""

    def __init__(self, dim: int):
        self.dim = dim
        self.large: list = []
        self.small: list = []
        self._len = 0

    def __len__(self) -> int:
        return self._len

    @property
    def packed_rows(self) -> int:
        return len(self.large) * LARGE_ROWS + len(self.small) * SMALL_ROWS

    def cover(self, embeddings: torch.Tensor) -> None:
        """Cover the table's float32 ``embeddings`` [n, d] (all of its rows; n never smaller than
        before): pack every large block they now fill, in place of its small ones, then every small one."""
        n = embeddings.shape[0]
        try:
            while (len(self.large) + 1) * LARGE_ROWS <= n:
                start = len(self.large) * LARGE_ROWS
                self.large.append(pack(embeddings[start:start + LARGE_ROWS]))
                self.small = []
            while self.packed_rows + SMALL_ROWS <= n:
                start = self.packed_rows
                self.small.append(pack(embeddings[start:start + SMALL_ROWS]))
        except RuntimeError as err:
            # Prepack refused (another quantized engine selected in this process, or no memory): the rows
            # stay unpacked, scored exactly from the float32 ones, and the next cover packs them. Before, the
            # error failed the add halfway, its rows' embeddings stored and the rest of the event not.
            warnings.warn(f"{NAME}: FBGEMM did not pack events {self.packed_rows}-{n - 1} (quantized engine "
                          f"{torch.backends.quantized.engine!r}): they are scored from the float32 rows until it "
                          f"does ({str(err).splitlines()[0]})", RuntimeWarning, stacklevel=2)
        self._len = n

    @property
    def data(self) -> PackedView:
        return PackedView((*self.large, *self.small), self.packed_rows, self._len, self.dim)
