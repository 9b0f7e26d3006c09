"""A tile of cached tokens in any format: load its stored bits and decode them into the four pieces
that ``pieces`` describes (bf16 values for bf16 and MXFP4 caches, f16 stored values for fp8),
dispatching on the ``FORMAT`` constexpr to the per-format modules."""

import triton
import triton.language as tl

from . import bf16, fp8, mxfp4
from ..constants import FMT_FP8, FMT_FP8_FNUZ, FMT_MXFP4
from .pieces import NOPE_HALF, ROPE_HALF


@triton.jit
def load_raw_tile(kv_ptr, kv_stride, scale_ptr, scale_stride, tok, tok_mask, FORMAT: tl.constexpr):
    """The stored bits of cached tokens ``tok`` (T,) int64 rows, masked by ``tok_mask`` (T,), as
    four tensors for ``decode_tile`` (nope span, then rope span: each a pair of halves, or MXFP4's
    code bytes and scale bytes).

    kv_ptr: bf16 elements (bf16), float8e4nv elements (fp8 e4m3fn), bytes (fp8 e4m3fnuz bits,
    MXFP4 packed codes); kv_stride: row stride in those units. scale_ptr/scale_stride: MXFP4 E8M0
    bytes and their row stride (unused otherwise). Masked rows decode to zeros.
    """
    if FORMAT == FMT_MXFP4:
        nope_x, nope_y = mxfp4.load_span(kv_ptr, kv_stride, scale_ptr, scale_stride, tok, tok_mask, 0, NOPE_HALF)
        rope_x, rope_y = mxfp4.load_span(kv_ptr, kv_stride, scale_ptr, scale_stride, tok, tok_mask, NOPE_HALF,
                                         ROPE_HALF)
    else:
        nope_x, nope_y = bf16.load_span(kv_ptr, kv_stride, tok, tok_mask, 0, NOPE_HALF)
        rope_x, rope_y = bf16.load_span(kv_ptr, kv_stride, tok, tok_mask, 2 * NOPE_HALF, ROPE_HALF)
    return nope_x, nope_y, rope_x, rope_y


@triton.jit
def decode_span(raw_x, raw_y, FORMAT: tl.constexpr, INTERPRETED: tl.constexpr):
    """The two pieces of a span of ``load_raw_tile``'s result."""
    if FORMAT == FMT_MXFP4:
        return mxfp4.decode_span(raw_x, raw_y, INTERPRETED)
    elif FORMAT == FMT_FP8:
        return fp8.decode_span(raw_x, raw_y, False, INTERPRETED)
    elif FORMAT == FMT_FP8_FNUZ:
        return fp8.decode_span(raw_x, raw_y, True, INTERPRETED)
    else:
        return bf16.decode_span(raw_x, raw_y)


@triton.jit
def load_key_tile(kv_ptr, kv_stride, scale_ptr, scale_stride, tok, tok_mask, FORMAT: tl.constexpr,
                  INTERPRETED: tl.constexpr):
    """``(nope_a, nope_b, rope_a, rope_b)`` of cached tokens ``tok``: (T, 256), (T, 256), (T, 32),
    (T, 32), bf16 (f16 for fp8), columns as ``pieces.column_map`` says; the nope pieces are also the
    values. Arguments as for ``load_raw_tile``."""
    nope_x, nope_y, rope_x, rope_y = load_raw_tile(kv_ptr, kv_stride, scale_ptr, scale_stride, tok, tok_mask, FORMAT)
    nope_a, nope_b = decode_span(nope_x, nope_y, FORMAT, INTERPRETED)
    rope_a, rope_b = decode_span(rope_x, rope_y, FORMAT, INTERPRETED)
    return nope_a, nope_b, rope_a, rope_b
