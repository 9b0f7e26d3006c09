"""bf16 caches: rows are stored as the kernel uses them, so decoding is the identity.

A span (the 512 nope columns or the 64 rope columns of each token) is read as its two halves
(``pieces``' "halves" order); fp8 rows, one byte per value, are read the same way.
"""

import triton
import triton.language as tl

from .pieces import load_columns


@triton.jit
def load_span(kv_ptr, kv_stride, tok, tok_mask, COL0: tl.constexpr, WIDTH: tl.constexpr):
    """The two halves ``(T, WIDTH)`` each of the span starting at column COL0 (0: nope with WIDTH
    256; 512: rope with WIDTH 32) of the token rows ``tok`` (T,) int64, as stored. kv_stride: row
    stride in elements. Masked rows read as zeros."""
    row_ptr = kv_ptr + tok * kv_stride
    half_a = load_columns(row_ptr, COL0, WIDTH, tok_mask, 0.0)
    half_b = load_columns(row_ptr, COL0 + WIDTH, WIDTH, tok_mask, 0.0)
    return half_a, half_b


@triton.jit
def decode_span(half_a, half_b):
    """bf16 values of ``load_span``'s halves: the stored values."""
    return half_a, half_b
