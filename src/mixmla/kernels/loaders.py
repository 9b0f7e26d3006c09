"""Tile loaders, one per cache format, all with the same shape of result.

A cached token is 576 values. Triton tiles must be powers of two, so every loader splits a token
into four pieces (bf16, or f16 for fp8 caches), returned as ``(nope_a, nope_b, rope_a, rope_b)``
of shapes (T, 256), (T, 256), (T, 32), (T, 32). ``column_map`` says which of the 576 values each piece
holds, so that the query is loaded and the output stored with the same columns:

- bf16 and fp8 ("halves"): nope_a = values 0..255, nope_b = 256..511, rope_a = 512..543,
  rope_b = 544..575.
- MXFP4 ("interleaved"): a byte holds two neighbouring values, so nope_a = the even values
  0, 2, .., 510 (low nibbles), nope_b = the odd values (high nibbles), and likewise for the rope.
  Keeping them apart avoids interleaving registers, which Triton would do through shared memory.

The fp8 loader returns the stored fp8 values exactly, as f16 (one hardware conversion per pair;
bf16 would need extra bit moves); the per-tensor scale is folded into the softmax scale and the
output instead of multiplying every element. bf16 and MXFP4 loaders return true values as bf16
(MXFP4 applies its per-block scale while decoding).

The packed-PTX decoders are declared impure (``is_pure=False``) on purpose: Triton would otherwise
move the conversion after the shared-memory load into the matrix-operand layout, where fp8 bytes
are read one at a time and the register tile cannot be shared by the two products. Kept in
place, the decode runs on 16-byte vectors straight from the asynchronous-copy buffer and its
16-bit result goes to shared memory once, for both products (``ldmatrix`` for keys and values).
For 32-token tiles this took the fp8 loop from 1508 to 522 SASS instructions (bf16: 504);
docs/PERF.md has the measurements.
"""

import triton
import triton.language as tl
from triton.language.target_info import cuda_capability_geq

FMT_BF16 = tl.constexpr(0)
FMT_FP8 = tl.constexpr(1)
FMT_MXFP4 = tl.constexpr(2)
FMT_FP8_FNUZ = tl.constexpr(3)

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
def _load_plain(row_ptr, col0, WIDTH: tl.constexpr, mask, other, EVICT: tl.constexpr):
    cols = col0 + tl.arange(0, WIDTH)
    return tl.load(row_ptr[:, None] + cols[None, :], mask=mask[:, None], other=other, eviction_policy=EVICT)


# $0, $1 <- the 4 e4m3fn bytes of $2 as two f16x2: the hardware conversion is exact (every e4m3fn
# value, subnormals included, is an f16), so the loader's values are the stored values.
_FP8_ASM = tl.constexpr("""
{
.reg .b16 lo, hi;
mov.b32 {lo, hi}, $2;
cvt.rn.f16x2.e4m3x2 $0, lo;
cvt.rn.f16x2.e4m3x2 $1, hi;
}
""")


@triton.jit
def _fp8_to_f16(x, INTERPRETED: tl.constexpr):
    """f16 values of e4m3fn ``x`` (float8e4nv, or its bits as uint8), exact."""
    if cuda_capability_geq(8, 9) and not INTERPRETED:  # cvt.rn.f16x2.e4m3x2 needs sm_89
        if x.dtype == tl.float8e4nv:
            x = x.to(tl.uint8, bitcast=True)
        return tl.inline_asm_elementwise(_FP8_ASM, "=r,=r,r", [x], dtype=tl.float16, is_pure=False, pack=4)
    else:
        if x.dtype != tl.float8e4nv:
            x = x.to(tl.float8e4nv, bitcast=True)
        return x.to(tl.float32).to(tl.float16)


@triton.jit
def _fp8_fnuz_to_f16(x):
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
def _mx_exponent_base(scale_bytes):
    """Per E8M0 byte ``b``: the bf16 bit pattern ``(b - 1) << 7`` that, plus ``magnitude << 6``,
    is the bf16 of ``E2M1(magnitude) * 2**(b - 127)`` for magnitudes 2..7 (b in 2..252). Markers:
    -2 for b < 2, whose values (at most 6 * 2**-126) this portable path flushes to zero, as
    flush-to-zero arithmetic would (all-zero blocks get b = 0 from the quantizer); -1 for b > 252
    (including the NaN byte 255), whose values leave the bf16 range and decode as NaN."""
    b = scale_bytes.to(tl.int32)
    return tl.where(b > 252, -1, tl.where(b >= 2, (b - 1) << 7, -2))


@triton.jit
def _mx_decode(codes, base):
    """bf16 values of E2M1 codes (int32, low 4 bits) given their block's ``_mx_exponent_base``.

    Pure integer work: magnitude m >= 2 is ``base + (m << 6)``, m == 1 (0.5) is ``base``, m == 0
    is zero; no subnormal is ever formed, so the result is exact on every backend. An unsupported
    block scale gives NaN, so it cannot pass as a wrong number.
    """
    mag = codes & 0x7
    bits = tl.where(mag >= 2, base + (mag << 6), tl.where(mag == 1, base, 0))
    bits = tl.where(base == -1, 0x7FC0, tl.where(base == -2, 0, bits)) | ((codes & 0x8) << 12)
    return bits.to(tl.uint16).to(tl.bfloat16, bitcast=True)


# ($0,$1) even and ($2,$3) odd values of the 8 E2M1 codes in the 4 bytes of $4, as bf16x2, scaled
# by the E8M0 bytes in $5 (one per code byte: the 4 elements Triton packs into a register need not
# share a row, so each carries its own scale). A code's 3 magnitude bits are exactly a byte-permute
# selector, so two permutes look up four bf16 magnitudes at once in 8-entry tables (their high and
# low bytes), a third puts the bytes in place, the sign bit is shifted into bit 15, and one bf16x2
# multiply by 2**(scale - 127) (the bf16 bits ``scale << 7``) applies the block scale. Exact for
# scales 1..252: the products are E2M1 values times a power of two, subnormal ones included.
# Scale 0 (2**-127, for blocks whose values are all below 2**-125) decodes as zeros, and 255 (NaN)
# as infinities, and NaN where the code is zero.
# One half of the decode: the code bytes selected by PAIR (a byte-permute selector, "0x4140" for
# bytes 0 and 1, "0x4342" for bytes 2 and 3) become even values EVEN and odd values ODD (bf16x2).
_MXFP4_HALF = """
prmt.b32 hi, ht0, ht1, sel;
prmt.b32 lo, lt0, lt1, sel;
prmt.b32 x, $4, zero, PAIR;
prmt.b32 m, $5, zero, PAIR;
shl.b32 m, m, 7;
prmt.b32 v, lo, hi, 0x6240;
shl.b32 s, x, 12;
and.b32 s, s, 0x80008000;
or.b32 v, v, s;
fma.rn.bf16x2 EVEN, v, m, nz;
prmt.b32 v, lo, hi, 0x7351;
shl.b32 s, x, 8;
and.b32 s, s, 0x80008000;
or.b32 v, v, s;
fma.rn.bf16x2 ODD, v, m, nz;
"""
_MXFP4_ASM = tl.constexpr("""
{
.reg .b32 sel, hi, lo, x, s, v, m, ht0, ht1, lt0, lt1, zero, nz;
mov.b32 ht0, 0x3F3F3F00;
mov.b32 ht1, 0x40404040;
mov.b32 lt0, 0xC0800000;
mov.b32 lt1, 0xC0804000;
mov.b32 zero, 0;
mov.b32 nz, 0x80008000;
and.b32 sel, $4, 0x77777777;""" + _MXFP4_HALF.replace("PAIR", "0x4140").replace("EVEN", "$0").replace("ODD", "$2") + """
shr.b32 sel, sel, 16;""" + _MXFP4_HALF.replace("PAIR", "0x4342").replace("EVEN", "$1").replace("ODD", "$3") + """
}
""")


@triton.jit
def _per_byte(block_values, WIDTH: tl.constexpr):
    """(T, WIDTH // 16) per-block values repeated over the 16 bytes (32 values) of each block."""
    T: tl.constexpr = block_values.shape[0]
    NBLK: tl.constexpr = WIDTH // 16
    return tl.reshape(tl.broadcast_to(block_values[:, :, None], (T, NBLK, 16)), (T, WIDTH))


@triton.jit
def _decode_mxfp4(packed, scale_bytes, INTERPRETED: tl.constexpr):
    """(even values, odd values), each (T, WIDTH) bf16, of WIDTH packed bytes per row and their
    (T, WIDTH // 16) E8M0 scale bytes."""
    WIDTH: tl.constexpr = packed.shape[1]
    if cuda_capability_geq(8, 0) and not INTERPRETED:  # fma.rn.bf16x2 needs sm_80
        even, odd = tl.inline_asm_elementwise(_MXFP4_ASM, "=r,=r,=r,=r,r,r", [packed, _per_byte(scale_bytes, WIDTH)],
                                              dtype=(tl.bfloat16, tl.bfloat16), is_pure=False, pack=4)
        return even, odd
    else:
        base = _per_byte(_mx_exponent_base(scale_bytes), WIDTH)
        codes = packed.to(tl.int32)
        return _mx_decode(codes, base), _mx_decode(codes >> 4, base)


@triton.jit
def _load_span_raw(kv_ptr, kv_stride, scale_ptr, scale_stride, tok, tok_mask, BYTE0: tl.constexpr,
                   WIDTH: tl.constexpr, FORMAT: tl.constexpr, EVICT: tl.constexpr):
    """The stored bits of the nope span (BYTE0 = 0, WIDTH = 256) or the rope span (BYTE0 = 256,
    WIDTH = 32) of the token rows, undecoded: MXFP4 ``(packed (T, WIDTH) bytes, scale bytes
    (T, WIDTH // 16))``, otherwise its two halves (T, WIDTH) as stored. BYTE0/WIDTH count MXFP4
    bytes, and half-rows otherwise."""
    row_ptr = kv_ptr + tok * kv_stride
    if FORMAT == FMT_MXFP4:
        packed = _load_plain(row_ptr, BYTE0, WIDTH, tok_mask, 0, EVICT)
        # Masked rows get the neutral byte 127 so they decode to zeros, not NaN (0 * NaN would poison P @ V).
        scale_bytes = _load_plain(scale_ptr + tok * scale_stride, BYTE0 // 16, WIDTH // 16, tok_mask, 127, EVICT)
        return packed, scale_bytes
    else:
        half_a = _load_plain(row_ptr, 2 * BYTE0, WIDTH, tok_mask, 0.0, EVICT)
        half_b = _load_plain(row_ptr, 2 * BYTE0 + WIDTH, WIDTH, tok_mask, 0.0, EVICT)
        return half_a, half_b


@triton.jit
def decode_span(raw_a, raw_b, FORMAT: tl.constexpr, INTERPRETED: tl.constexpr):
    """The two pieces (T, WIDTH) of a span from ``_load_span_raw``'s result (for the nope span of
    ``load_raw_tile``: the values)."""
    if FORMAT == FMT_MXFP4:
        return _decode_mxfp4(raw_a, raw_b, INTERPRETED)
    elif FORMAT == FMT_FP8:
        return _fp8_to_f16(raw_a, INTERPRETED), _fp8_to_f16(raw_b, INTERPRETED)
    elif FORMAT == FMT_FP8_FNUZ:
        return _fp8_fnuz_to_f16(raw_a), _fp8_fnuz_to_f16(raw_b)
    else:
        return raw_a, raw_b


@triton.jit
def load_raw_tile(kv_ptr, kv_stride, scale_ptr, scale_stride, tok, tok_mask, FORMAT: tl.constexpr):
    """The stored bits of cached tokens ``tok`` (T,) int64 rows, masked by ``tok_mask`` (T,), as
    four tensors for ``decode_tile`` (nope span, then rope span; see ``_load_span_raw``).

    kv_ptr: bf16 elements (bf16), float8e4nv elements (fp8 e4m3fn), bytes (fp8 e4m3fnuz bits,
    MXFP4 packed codes); kv_stride: row stride in those units. scale_ptr/scale_stride: MXFP4 E8M0
    bytes and their row stride (unused otherwise). Masked rows decode to zeros.
    """
    nope_x, nope_y = _load_span_raw(kv_ptr, kv_stride, scale_ptr, scale_stride, tok, tok_mask, 0, NOPE_HALF, FORMAT,
                                    "")
    rope_x, rope_y = _load_span_raw(kv_ptr, kv_stride, scale_ptr, scale_stride, tok, tok_mask, NOPE_HALF, ROPE_HALF,
                                    FORMAT, "")
    return nope_x, nope_y, rope_x, rope_y


@triton.jit
def decode_tile(nope_x, nope_y, rope_x, rope_y, FORMAT: tl.constexpr, INTERPRETED: tl.constexpr):
    """``(nope_a, nope_b, rope_a, rope_b)`` (see the module doc) of ``load_raw_tile``'s result."""
    nope_a, nope_b = decode_span(nope_x, nope_y, FORMAT, INTERPRETED)
    rope_a, rope_b = decode_span(rope_x, rope_y, FORMAT, INTERPRETED)
    return nope_a, nope_b, rope_a, rope_b


@triton.jit
def load_key_tile(kv_ptr, kv_stride, scale_ptr, scale_stride, tok, tok_mask, FORMAT: tl.constexpr,
                  INTERPRETED: tl.constexpr):
    """Load and decode cached tokens as keys: ``decode_tile(load_raw_tile(...))``."""
    nope_x, nope_y, rope_x, rope_y = load_raw_tile(kv_ptr, kv_stride, scale_ptr, scale_stride, tok, tok_mask, FORMAT)
    return decode_tile(nope_x, nope_y, rope_x, rope_y, FORMAT, INTERPRETED)


@triton.jit
def load_query_piece(q_row_ptr, row_mask, IS_ROPE: tl.constexpr, SECOND: tl.constexpr,
                     FORMAT: tl.constexpr, WIDTH: tl.constexpr):
    """Query values matching one key piece: (R, WIDTH) bf16 from rows ``q_row_ptr`` (R,)."""
    cols = column_map(tl.arange(0, WIDTH), IS_ROPE, SECOND, FORMAT)
    return tl.load(q_row_ptr[:, None] + cols[None, :], mask=row_mask[:, None], other=0.0)


@triton.jit
def store_value_rows(row_ptr, part_a, part_b, row_mask, FORMAT: tl.constexpr):
    """Store the two output pieces (R, 256) of ``load_key_tile``'s value columns as 512 contiguous
    values per row at ``row_ptr`` (R,), in true column order, cast to the pointer's dtype."""
    if FORMAT == FMT_MXFP4:
        cols = tl.arange(0, 2 * NOPE_HALF)
        vals = tl.interleave(part_a, part_b)
        tl.store(row_ptr[:, None] + cols[None, :], vals.to(row_ptr.dtype.element_ty), mask=row_mask[:, None])
    else:
        cols = tl.arange(0, NOPE_HALF)
        tl.store(row_ptr[:, None] + cols[None, :], part_a.to(row_ptr.dtype.element_ty), mask=row_mask[:, None])
        tl.store(row_ptr[:, None] + NOPE_HALF + cols[None, :], part_b.to(row_ptr.dtype.element_ty),
                 mask=row_mask[:, None])
