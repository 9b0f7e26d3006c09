"""MXFP4 caches: two E2M1 codes per byte (value 2j in the low nibble of byte j, 2j+1 in the high
one) and one E8M0 scale byte per 32 values, in rows of their own.

Decoding gives bf16 true values (the block scale applied) as the even and odd columns of a span
(``pieces``' "interleaved" order). Packed PTX on CUDA targets (from sm_80), otherwise a portable
integer decode, exact on every backend; both give the same bits for scale bytes 2..252. The PTX
is impure for the reason given in ``fp8``.
"""

import triton
import triton.language as tl
from triton.language.target_info import cuda_capability_geq

from ..ptx import MXFP4_TO_BF16X2
from .pieces import load_columns

_TO_BF16X2 = tl.constexpr(MXFP4_TO_BF16X2)


@triton.jit
def load_span(kv_ptr, kv_stride, scale_ptr, scale_stride, tok, tok_mask, BYTE0: tl.constexpr, WIDTH: tl.constexpr):
    """``(packed (T, WIDTH) code bytes, scale bytes (T, WIDTH // 16))`` of the span starting at
    byte BYTE0 (0: nope with WIDTH 256; 256: rope with WIDTH 32) of the token rows ``tok`` (T,)
    int64. kv_stride, scale_stride: row strides in bytes. Masked rows read as zero codes."""
    packed = load_columns(kv_ptr + tok * kv_stride, BYTE0, WIDTH, tok_mask, 0)
    # Masked rows get the neutral byte 127 so they decode to zeros, not NaN (0 * NaN would poison P @ V).
    scale_bytes = load_columns(scale_ptr + tok * scale_stride, BYTE0 // 16, WIDTH // 16, tok_mask, 127)
    return packed, scale_bytes


@triton.jit
def _exponent_base(scale_bytes):
    """Per E8M0 byte ``b``: the bf16 bit pattern ``(b - 1) << 7`` that, plus ``magnitude << 6``,
    is the bf16 of ``E2M1(magnitude) * 2**(b - 127)`` for magnitudes 2..7 (b in 2..252). Markers:
    -2 for b < 2, whose values (at most 6 * 2**-126) this portable path flushes to zero, as
    flush-to-zero arithmetic would (all-zero blocks get b = 0 from the quantizer); -1 for b > 252
    (including the NaN byte 255), whose values leave the bf16 range and decode as NaN."""
    b = scale_bytes.to(tl.int32)
    return tl.where(b > 252, -1, tl.where(b >= 2, (b - 1) << 7, -2))


@triton.jit
def _decode_codes(codes, base):
    """bf16 values of E2M1 codes (int32, low 4 bits) given their block's ``_exponent_base``.

    Pure integer work: magnitude m >= 2 is ``base + (m << 6)``, m == 1 (0.5) is ``base``, m == 0
    is zero; no subnormal is ever formed, so the result is exact on every backend. An unsupported
    block scale gives NaN, so it cannot pass as a wrong number.
    """
    mag = codes & 0x7
    bits = tl.where(mag >= 2, base + (mag << 6), tl.where(mag == 1, base, 0))
    bits = tl.where(base == -1, 0x7FC0, tl.where(base == -2, 0, bits)) | ((codes & 0x8) << 12)
    return bits.to(tl.uint16).to(tl.bfloat16, bitcast=True)


@triton.jit
def _per_byte(block_values, WIDTH: tl.constexpr):
    """(T, WIDTH // 16) per-block values repeated over the 16 bytes (32 values) of each block."""
    T: tl.constexpr = block_values.shape[0]
    NBLK: tl.constexpr = WIDTH // 16
    return tl.reshape(tl.broadcast_to(block_values[:, :, None], (T, NBLK, 16)), (T, WIDTH))


@triton.jit
def decode_span(packed, scale_bytes, INTERPRETED: tl.constexpr):
    """(even values, odd values), each (T, WIDTH) bf16, of ``load_span``'s WIDTH code bytes per
    row and their (T, WIDTH // 16) E8M0 scale bytes."""
    WIDTH: tl.constexpr = packed.shape[1]
    if cuda_capability_geq(8, 0) and not INTERPRETED:  # fma.rn.bf16x2 needs sm_80
        even, odd = tl.inline_asm_elementwise(_TO_BF16X2, "=r,=r,=r,=r,r,r", [packed, _per_byte(scale_bytes, WIDTH)],
                                              dtype=(tl.bfloat16, tl.bfloat16), is_pure=False, pack=4)
        return even, odd
    else:
        base = _per_byte(_exponent_base(scale_bytes), WIDTH)
        codes = packed.to(tl.int32)
        return _decode_codes(codes, base), _decode_codes(codes >> 4, base)
