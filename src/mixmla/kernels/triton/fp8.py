"""fp8 caches (one e4m3 byte per value and one float32 scale for the whole tensor).

Decoding returns the stored fp8 values exactly, as f16: every e4m3fn and e4m3fnuz value is an f16,
and the hardware converts e4m3fn pairs to f16 in one instruction (bf16 would need extra bit moves).
The tensor scale is not applied here: the decode kernel folds it into the softmax and output scales
instead of multiplying every element. Rows are read like bf16 rows (``bf16.load_span``).

The packed-PTX conversion is declared impure (``is_pure=False``) on purpose: Triton would otherwise
move it after the shared-memory load into the matrix-operand layout, where fp8 bytes are read one at
a time and the register tile cannot be shared by the two products. Kept in place, the decode runs on
16-byte vectors straight from the asynchronous-copy buffer and its 16-bit result goes to shared
memory once, for both products (docs/PERF.md, design log step 8).
"""

import triton
import triton.language as tl
from triton.language.target_info import cuda_capability_geq

from ..ptx import FP8_E4M3_TO_F16X2

_TO_F16X2 = tl.constexpr(FP8_E4M3_TO_F16X2)


@triton.jit
def e4m3fn_to_f16(x, INTERPRETED: tl.constexpr):
    """f16 values of e4m3fn ``x`` (float8e4nv, or its bits as uint8), exact. Packed PTX on CUDA
    targets from sm_89, portable Triton elsewhere and in the interpreter."""
    if cuda_capability_geq(8, 9) and not INTERPRETED:  # cvt.rn.f16x2.e4m3x2 needs sm_89
        if x.dtype == tl.float8e4nv:
            x = x.to(tl.uint8, bitcast=True)
        return tl.inline_asm_elementwise(_TO_F16X2, "=r,=r,r", [x], dtype=tl.float16, is_pure=False, pack=4)
    else:
        if x.dtype != tl.float8e4nv:
            x = x.to(tl.float8e4nv, bitcast=True)
        return x.to(tl.float32).to(tl.float16)


@triton.jit
def e4m3fnuz_to_f16(x):
    """f16 values of e4m3fnuz bits ``x`` (uint8), exact, on every backend."""
    # e4m3fnuz (AMD) differs from e4m3fn in its exponent bias (8) and in having no NaN at 0x7F
    # (that is its maximum, 240), so the hardware e4m3fn conversion cannot be borrowed: build the
    # value as (implicit bit + mantissa) * 2**exponent with exact integer-to-float steps.
    b = x.to(tl.int32)
    exp_field = (b >> 3) & 0xF
    mant = b & 0x7
    significand = tl.where(exp_field == 0, mant, mant + 8).to(tl.float32)
    pow2 = ((tl.maximum(exp_field, 1) - 11 + 127) << 23).to(tl.float32, bitcast=True)
    val = significand * pow2
    return tl.where((b & 0x80) != 0, -val, val).to(tl.float16)


@triton.jit
def decode_span(half_a, half_b, FNUZ: tl.constexpr, INTERPRETED: tl.constexpr):
    """f16 values of a span's two halves as ``bf16.load_span`` read them (e4m3fn elements, or
    e4m3fnuz bits as uint8 when FNUZ)."""
    if FNUZ:
        return e4m3fnuz_to_f16(half_a), e4m3fnuz_to_f16(half_b)
    else:
        return e4m3fn_to_f16(half_a, INTERPRETED), e4m3fn_to_f16(half_b, INTERPRETED)
