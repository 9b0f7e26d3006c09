"""Tile loaders, one per cache format, all with the same shape of result.

A cached token is 576 values. Triton tiles must be powers of two, so every loader splits a token
into four bf16 pieces, returned as ``(nope_a, nope_b, rope_a, rope_b)`` of shapes
(T, 256), (T, 256), (T, 32), (T, 32). ``column_map`` says which of the 576 values each piece
holds, so that the query is loaded and the output stored with the same columns:

- bf16 and fp8 ("halves"): nope_a = values 0..255, nope_b = 256..511, rope_a = 512..543,
  rope_b = 544..575.
- MXFP4 ("interleaved"): a byte holds two neighbouring values, so nope_a = the even values
  0, 2, .., 510 (low nibbles), nope_b = the odd values (high nibbles), and likewise for the rope.
  Keeping them apart avoids interleaving registers, which Triton would do through shared memory.

The fp8 loader returns the stored fp8 values times 2**-112 (see ``FP8_OUTPUT_EXPONENT``); that
factor and the per-tensor scale are folded into the softmax scale and the output instead of
multiplying every element. bf16 and MXFP4 loaders return true values (MXFP4 applies its
per-block exponent while decoding).
"""

import triton
import triton.language as tl

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


#: The fp8 loader returns value * 2**-112: the e4m3 -> f16 conversion is one hardware instruction
#: per pair, and moving the f16 exponent/mantissa bits into bf16 positions is then two logic
#: operations, which rebias the exponent by 2**-112. Every e4m3 value, subnormals included, stays a
#: normal bf16 (>= 2**-121); the kernel folds 2**112 into the softmax and output scales.
FP8_OUTPUT_EXPONENT = -112

# $0, $1 <- 4 e4m3fn bytes in $2, as two bf16x2 (value * 2**-112). cvt.rn.f16x2.e4m3x2 is exact
# (subnormals too); f16 bits >> 3 put exponent and mantissa where bf16 keeps them, the sign stays.
_FP8_ASM = tl.constexpr("""
{
.reg .b16 lo, hi;
.reg .b32 h0, h1, t0, t1;
mov.b32 {lo, hi}, $2;
cvt.rn.f16x2.e4m3x2 h0, lo;
cvt.rn.f16x2.e4m3x2 h1, hi;
shr.b32 t0, h0, 3;
shr.b32 t1, h1, 3;
and.b32 t0, t0, 0x0FFF0FFF;
and.b32 t1, t1, 0x0FFF0FFF;
and.b32 h0, h0, 0x80008000;
and.b32 h1, h1, 0x80008000;
or.b32 $0, t0, h0;
or.b32 $1, t1, h1;
}
""")


@triton.jit
def _fp8_to_bf16(x, USE_ASM: tl.constexpr):
    """bf16 ``value * 2**-112`` of e4m3fn bytes ``x`` (uint8), exact."""
    if USE_ASM:
        return tl.inline_asm_elementwise(_FP8_ASM, "=r,=r,r", [x], dtype=tl.bfloat16, is_pure=True, pack=4)
    else:
        # The same numbers with portable operations (the interpreter and non-NVIDIA backends).
        v = x.to(tl.float8e4nv, bitcast=True).to(tl.float32) * 1.925929944387236e-34  # 2**-112
        return v.to(tl.bfloat16)


@triton.jit
def _fp8_fnuz_to_bf16(x):
    # e4m3fnuz (AMD) differs from e4m3fn in its exponent bias (8) and in having no NaN at 0x7F
    # (that is its maximum, 240), so the hardware e4m3fn conversion cannot be borrowed: build the
    # value as (implicit bit + mantissa) * 2**exponent with exact integer-to-float steps.
    b = x.to(tl.int32)
    exp_field = (b >> 3) & 0xF
    mant = b & 0x7
    significand = tl.where(exp_field == 0, mant, mant + 8).to(tl.float32)
    pow2 = ((tl.maximum(exp_field, 1) - 11 + 127) << 23).to(tl.float32, bitcast=True)
    val = significand * pow2
    return tl.where((b & 0x80) != 0, -val, val).to(tl.bfloat16)


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


# ($0,$1) even and ($2,$3) odd values of the 8 E2M1 codes in the 4 bytes of $4, as bf16x2, times the
# fp32 block multipliers $5..$8 (= 2**(byte - 121)), one per byte: the 4 elements Triton packs into
# a register need not share a row, so each keeps its own scale. Each nibble s.mmm becomes the e4m3 byte
# s.0mm.m00 (the same value times 2**-6, 0.5 as an e4m3 subnormal), four per register; the hardware
# converts pairs to f16 exactly; f32 multiplies by the block scale (exact: a power of two); the
# pack to bf16 is exact (at most 3 significant bits).
_MXFP4_ASM = tl.constexpr("""
{
.reg .b32 ev, od, t, p0, p1, p2, p3;
.reg .b16 e0, e1, o0, o1, h<8>;
.reg .f32 f<8>;
shl.b32 t, $4, 2;
and.b32 t, t, 0x1C1C1C1C;
shl.b32 ev, $4, 4;
and.b32 ev, ev, 0x80808080;
or.b32 ev, ev, t;
shr.b32 t, $4, 2;
and.b32 t, t, 0x1C1C1C1C;
and.b32 od, $4, 0x80808080;
or.b32 od, od, t;
mov.b32 {e0, e1}, ev;
mov.b32 {o0, o1}, od;
cvt.rn.f16x2.e4m3x2 p0, e0;
cvt.rn.f16x2.e4m3x2 p1, e1;
cvt.rn.f16x2.e4m3x2 p2, o0;
cvt.rn.f16x2.e4m3x2 p3, o1;
mov.b32 {h0, h1}, p0;
mov.b32 {h2, h3}, p1;
mov.b32 {h4, h5}, p2;
mov.b32 {h6, h7}, p3;
cvt.f32.f16 f0, h0;
cvt.f32.f16 f1, h1;
cvt.f32.f16 f2, h2;
cvt.f32.f16 f3, h3;
cvt.f32.f16 f4, h4;
cvt.f32.f16 f5, h5;
cvt.f32.f16 f6, h6;
cvt.f32.f16 f7, h7;
mul.f32 f0, f0, $5;
mul.f32 f1, f1, $6;
mul.f32 f2, f2, $7;
mul.f32 f3, f3, $8;
mul.f32 f4, f4, $5;
mul.f32 f5, f5, $6;
mul.f32 f6, f6, $7;
mul.f32 f7, f7, $8;
cvt.rn.bf16x2.f32 $0, f1, f0;
cvt.rn.bf16x2.f32 $1, f3, f2;
cvt.rn.bf16x2.f32 $2, f5, f4;
cvt.rn.bf16x2.f32 $3, f7, f6;
}
""")


@triton.jit
def _mx_asm_multiplier(scale_bytes):
    """fp32 ``2**(byte - 121)`` per E8M0 byte (the block scale times the 2**6 that the e4m3 detour
    divides by); NaN for bytes above 248 (block scales above 2**121), whose multiplier would
    overflow float32. Bytes 0 and 1 are exact here (float32 keeps subnormal products)."""
    b = scale_bytes.to(tl.int32)
    return tl.where(b <= 248, (b + 6) << 23, 0x7FC00000).to(tl.float32, bitcast=True)


@triton.jit
def _per_byte(block_values, WIDTH: tl.constexpr):
    """(T, WIDTH // 16) per-block values repeated over the 16 bytes (32 values) of each block."""
    T: tl.constexpr = block_values.shape[0]
    NBLK: tl.constexpr = WIDTH // 16
    return tl.reshape(tl.broadcast_to(block_values[:, :, None], (T, NBLK, 16)), (T, WIDTH))


@triton.jit
def _load_mxfp4_piece(row_ptr, srow_ptr, byte0, scale0, WIDTH: tl.constexpr, mask, EVICT: tl.constexpr,
                      USE_ASM: tl.constexpr):
    """Decode WIDTH packed bytes (2*WIDTH values) into (even values, odd values), each (T, WIDTH)
    bf16."""
    packed = _load_plain(row_ptr, byte0, WIDTH, mask, 0, EVICT)
    NBLK: tl.constexpr = WIDTH // 16
    # Masked rows get the neutral byte 127 so they decode to zeros, not NaN (0 * NaN would poison P @ V).
    scale_bytes = _load_plain(srow_ptr, scale0, NBLK, mask, 127, EVICT)  # (T, NBLK)
    if USE_ASM:
        mult = _per_byte(_mx_asm_multiplier(scale_bytes), WIDTH)
        even, odd = tl.inline_asm_elementwise(_MXFP4_ASM, "=r,=r,=r,=r,r,r,r,r,r", [packed, mult],
                                              dtype=(tl.bfloat16, tl.bfloat16), is_pure=True, pack=4)
        return even, odd
    else:
        base = _per_byte(_mx_exponent_base(scale_bytes), WIDTH)
        codes = packed.to(tl.int32)
        return _mx_decode(codes, base), _mx_decode(codes >> 4, base)


@triton.jit
def _load_span(kv_ptr, kv_stride, scale_ptr, scale_stride, tok, tok_mask, BYTE0: tl.constexpr,
               WIDTH: tl.constexpr, FORMAT: tl.constexpr, EVICT: tl.constexpr, USE_ASM: tl.constexpr):
    """Two bf16 pieces (T, WIDTH) of the token rows: the nope span (BYTE0 = 0, WIDTH = 256) or the
    rope span (BYTE0 = 256, WIDTH = 32); BYTE0/WIDTH count MXFP4 bytes, and half-rows otherwise."""
    row_ptr = kv_ptr + tok * kv_stride
    if FORMAT == FMT_MXFP4:
        srow_ptr = scale_ptr + tok * scale_stride
        piece_a, piece_b = _load_mxfp4_piece(row_ptr, srow_ptr, BYTE0, BYTE0 // 16, WIDTH, tok_mask, EVICT, USE_ASM)
    else:
        piece_a = _load_plain(row_ptr, 2 * BYTE0, WIDTH, tok_mask, 0, EVICT)
        piece_b = _load_plain(row_ptr, 2 * BYTE0 + WIDTH, WIDTH, tok_mask, 0, EVICT)
        if FORMAT == FMT_FP8:
            piece_a = _fp8_to_bf16(piece_a, USE_ASM)
            piece_b = _fp8_to_bf16(piece_b, USE_ASM)
        elif FORMAT == FMT_FP8_FNUZ:
            piece_a = _fp8_fnuz_to_bf16(piece_a)
            piece_b = _fp8_fnuz_to_bf16(piece_b)
    return piece_a, piece_b


@triton.jit
def load_key_tile(kv_ptr, kv_stride, scale_ptr, scale_stride, tok, tok_mask, FORMAT: tl.constexpr,
                  USE_ASM: tl.constexpr):
    """Load and decode cached tokens ``tok`` (T,) int64 rows, masked by ``tok_mask`` (T,), as keys.

    kv_ptr: bf16 elements (bf16), bytes (fp8 e4m3fn bits, MXFP4 packed codes); kv_stride: row
    stride in those units. scale_ptr/scale_stride: MXFP4 E8M0 bytes and their row stride (unused
    otherwise). Returns ``(nope_a, nope_b, rope_a, rope_b)`` bf16 as described in the module doc.
    Masked rows are zeros.
    """
    nope_a, nope_b = _load_span(kv_ptr, kv_stride, scale_ptr, scale_stride, tok, tok_mask, 0, NOPE_HALF, FORMAT, "",
                                USE_ASM)
    rope_a, rope_b = _load_span(kv_ptr, kv_stride, scale_ptr, scale_stride, tok, tok_mask, NOPE_HALF, ROPE_HALF,
                                FORMAT, "", USE_ASM)
    return nope_a, nope_b, rope_a, rope_b


@triton.jit
def load_value_tile(kv_ptr, kv_stride, scale_ptr, scale_stride, tok, tok_mask, FORMAT: tl.constexpr,
                    USE_ASM: tl.constexpr):
    """The value columns (first 512) of the same tokens: ``(nope_a, nope_b)`` bf16 (T, 256) each.

    Compressed formats are loaded a second time for their values rather than kept from the key
    load: a load that feeds a single matrix product is software-pipelined by Triton (asynchronous
    copies into shared memory), one that feeds two is not, and the second read hits L2.
    """
    # The second read is the last use: evict_first also keeps the compiler from merging it with the first.
    return _load_span(kv_ptr, kv_stride, scale_ptr, scale_stride, tok, tok_mask, 0, NOPE_HALF, FORMAT, "evict_first",
                      USE_ASM)


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
