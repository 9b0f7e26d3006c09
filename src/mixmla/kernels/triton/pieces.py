"""How the kernels split a cached token's 576 values into power-of-two pieces.

Triton tiles must be powers of two, so a token (and a query row) is held as four pieces
``(nope_a, nope_b, rope_a, rope_b)`` of widths 256, 256, 32, 32. ``column_map`` says which of the
576 columns each piece holds, so that the query is loaded and the output stored with the columns of
the decoded cache tile:

- bf16 and fp8 ("halves"): nope_a = columns 0..255, nope_b = 256..511, rope_a = 512..543,
  rope_b = 544..575.
- MXFP4 ("interleaved"): a byte holds two neighbouring values, so nope_a = the even columns
  0, 2, .., 510 (low nibbles), nope_b = the odd columns (high nibbles), and likewise for the rope.
  Keeping them apart avoids interleaving registers, which Triton would do through shared memory.

The format ids are the decode kernel's ``FORMAT`` constexpr.
"""

import triton
import triton.language as tl

from ..constants import FMT_MXFP4

NOPE_HALF = tl.constexpr(256)
ROPE_HALF = tl.constexpr(32)


@triton.jit
def column_map(i, IS_ROPE: tl.constexpr, SECOND: tl.constexpr, FORMAT: tl.constexpr):
    """Column (0..575) of the key/query/output held at position ``i`` of a piece."""
    if FORMAT == FMT_MXFP4:
        base = 512 if IS_ROPE else 0
        return base + 2 * i + (1 if SECOND else 0)
    else:
        if IS_ROPE:
            return 512 + i + (ROPE_HALF if SECOND else 0)
        else:
            return i + (NOPE_HALF if SECOND else 0)


@triton.jit
def load_columns(row_ptr, col0, WIDTH: tl.constexpr, mask, other):
    """``WIDTH`` consecutive elements from column ``col0`` of the rows ``row_ptr`` (T,), masked by
    row: (T, WIDTH) of the pointer's dtype."""
    cols = col0 + tl.arange(0, WIDTH)
    return tl.load(row_ptr[:, None] + cols[None, :], mask=mask[:, None], other=other, eviction_policy="")


@triton.jit
def load_query_piece(q_row_ptr, row_mask, IS_ROPE: tl.constexpr, SECOND: tl.constexpr,
                     FORMAT: tl.constexpr, WIDTH: tl.constexpr):
    """Query values matching one key piece: (R, WIDTH) bf16 from rows ``q_row_ptr`` (R,)."""
    cols = column_map(tl.arange(0, WIDTH), IS_ROPE, SECOND, FORMAT)
    return tl.load(q_row_ptr[:, None] + cols[None, :], mask=row_mask[:, None], other=0.0)


@triton.jit
def store_value_rows(row_ptr, part_a, part_b, row_mask, FORMAT: tl.constexpr):
    """Store the two value pieces (R, 256) (nope_a, nope_b) as 512 contiguous values per row at
    ``row_ptr`` (R,), in true column order, cast to the pointer's dtype."""
    if FORMAT == FMT_MXFP4:
        cols = tl.arange(0, 2 * NOPE_HALF)
        vals = tl.interleave(part_a, part_b)
        tl.store(row_ptr[:, None] + cols[None, :], vals.to(row_ptr.dtype.element_ty), mask=row_mask[:, None])
    else:
        cols = tl.arange(0, NOPE_HALF)
        tl.store(row_ptr[:, None] + cols[None, :], part_a.to(row_ptr.dtype.element_ty), mask=row_mask[:, None])
        tl.store(row_ptr[:, None] + NOPE_HALF + cols[None, :], part_b.to(row_ptr.dtype.element_ty),
                 mask=row_mask[:, None])
