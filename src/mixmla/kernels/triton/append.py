"""The cache writer: quantize new token rows to the cache's format and store each at its slot.

One program writes one token. Slot ``s`` is row ``s`` of the cache's rows (for a paged pool,
``page * page_size + row``); a slot outside ``[0, num_slots)``, vLLM's ``-1`` padding included,
writes nothing, so no slot value can make the kernel write outside the cache.

The encoders use integer and exactly rounded float operations only (on CUDA from sm_89 e4m3fn
bytes come from the hardware's correctly rounded conversion instead), so every backend (the CPU
interpreter too, whose float8 casts are not correctly rounded) writes the bits of the torch
quantizers: fp8 ``clamp(x / scale)`` rounded to nearest-even (``formats.fp8.encode_fp8``), MXFP4
the benchmark producer's block exponent and E2M1 codes (``formats.mxfp4``).
"""

import triton
import triton.language as tl
from triton.language.target_info import cuda_capability_geq

from ..constants import FMT_FP8, FMT_FP8_FNUZ, FMT_MXFP4

#: e4m3fn bytes of four float32 values (``$1 .. $4``, first in the lowest byte), nearest-even,
#: saturating at 448: the hardware conversion (sm_89 on) in place of ``encode_e4m3``'s 20-odd
#: dependent integer steps per value.
_TO_E4M3X4 = tl.constexpr("{ .reg .b16 lo, hi; cvt.rn.satfinite.e4m3x2.f32 lo, $2, $1; "
                          "cvt.rn.satfinite.e4m3x2.f32 hi, $4, $3; mov.b32 $0, {lo, hi}; }")

ROW = tl.constexpr(576)
ROW_POW2 = tl.constexpr(1024)
MX_BLOCKS = tl.constexpr(18)  # E8M0 scales per row


@triton.jit
def _round_half_even(q):
    """Nearest integer (float32) to non-negative float32 ``q``, ties to even."""
    fl = tl.floor(q)
    frac = q - fl
    odd = (fl - 2.0 * tl.floor(fl * 0.5)) == 1.0
    return fl + tl.where((frac > 0.5) | ((frac == 0.5) & odd), 1.0, 0.0)


@triton.jit
def encode_e4m3(y, FNUZ: tl.constexpr):
    """E4M3 bits (int32, 0..255) of float32 ``y`` already within the format's range, nearest-even:
    e4m3fn (bias 7, negative zero 0x80) or, with FNUZ, e4m3fnuz (bias 8, no negative zero)."""
    if FNUZ:
        MIN_NORMAL: tl.constexpr = 0.0078125  # 2**-7
        SUB_UNITS: tl.constexpr = 1024.0  # subnormals count 2**-10
        OFFSET: tl.constexpr = (127 - 8) << 3
    else:
        MIN_NORMAL: tl.constexpr = 0.015625  # 2**-6
        SUB_UNITS: tl.constexpr = 512.0  # subnormals count 2**-9
        OFFSET: tl.constexpr = (127 - 7) << 3
    bits = y.to(tl.int32, bitcast=True)
    sign = (bits >> 31) & 1
    a = tl.abs(y)
    abits = a.to(tl.int32, bitcast=True)
    # Normal: keep float32's exponent and 3 mantissa bits, rounded to nearest-even; a carry into the
    # exponent is the right result. Rebias the exponent by subtracting OFFSET from (exp << 3 | m).
    rounded = (abits + 0x7FFFF + ((abits >> 20) & 1)) >> 20
    normal = rounded - OFFSET
    # Subnormal: a count of the smallest step; a count of 8 is the smallest normal, whose code is 8.
    sub = _round_half_even(a * SUB_UNITS).to(tl.int32)
    code = tl.where(a < MIN_NORMAL, sub, normal)
    if FNUZ:
        return tl.where(code == 0, 0, code | (sign << 7))
    else:
        return code | (sign << 7)


@triton.jit
def _pow2(k):
    """float32 ``2**k`` for int32 k in [-127, 127] (2**-127 is subnormal)."""
    return tl.where(k >= -126, ((k + 127) << 23).to(tl.float32, bitcast=True),
                    tl.full(k.shape, 0x00400000, tl.int32).to(tl.float32, bitcast=True))


@triton.jit
def encode_e2m1(v):
    """E2M1 codes (int32, 0..15) of float32 values already divided by their block scale: nearest,
    ties to the even code, saturating at 6, sign copied (as ``formats.mxfp4.e2m1_encode``)."""
    a = tl.abs(v)
    code = ((a > 0.25).to(tl.int32) + (a >= 0.75).to(tl.int32) + (a > 1.25).to(tl.int32) + (a >= 1.75).to(tl.int32)
            + (a > 2.5).to(tl.int32) + (a >= 3.5).to(tl.int32) + (a > 5.0).to(tl.int32))
    return code | (((v.to(tl.int32, bitcast=True) >> 31) & 1) << 3)


@triton.jit
def block_exponent(amax):
    """The benchmark producer's block exponent (int32 in [-127, 127]) of float32 block maxima:
    ``floor(log2(round_up(amax))) - 2`` where rounding up adds 0x200000 to the bits and keeps the
    exponent (as ``formats.mxfp4.block_exponent``)."""
    field = ((amax.to(tl.int32, bitcast=True) + 0x200000) >> 23) & 0xFF
    return tl.where(field == 255, 127, tl.minimum(tl.maximum(field - 129, -127), 127))


@triton.jit
def _bf16_bits_to_f32(bits):
    """float32 values of bf16 bit patterns (int16): exact, subnormals included (the interpreter's
    own bf16 conversion flushes them wrongly)."""
    return (bits.to(tl.int32) << 16).to(tl.float32, bitcast=True)


@triton.jit
def append_kv_kernel(kv_ptr, kv_stride, slots, num_slots, out_ptr, out_stride, scale_ptr, scale_stride,
                     FORMAT: tl.constexpr, INTERPRETED: tl.constexpr):
    """Grid: (tokens,). kv (n, 576) bf16 rows as int16 bits, row stride kv_stride; slots (n,)
    int32/int64. out: the cache's rows as bytes (fp8, MXFP4 codes) or int16 (bf16 bits), row
    stride out_stride; scale_ptr:
    fp8's float32 scale (read), or MXFP4's E8M0 rows (written) with row stride scale_stride.
    INTERPRETED: running in Triton's interpreter (integer encoders only)."""
    i = tl.program_id(0)
    slot = tl.load(slots + i).to(tl.int64)
    ok = (slot >= 0) & (slot < num_slots)
    src = kv_ptr + i.to(tl.int64) * kv_stride
    dst = out_ptr + slot * out_stride
    # The source row is read whatever the slot (row i always exists), so its load does not wait
    # for the slot's: only the stores depend on it.
    cols = tl.arange(0, ROW_POW2)
    x = tl.load(src + cols, mask=cols < ROW, other=0)
    if FORMAT == FMT_MXFP4:
        # The row as 32 blocks of 32 values (18 used): a reshape of the row's one load, so each
        # thread holds 8 consecutive values of a block and a block's maximum takes shuffles within
        # 4 lanes, no shared memory; then its even and odd values, which share a byte (low and
        # high nibble), 4 bytes in a row per thread, the layout of the store.
        blocks = tl.reshape(_bf16_bits_to_f32(x), [32, 32])
        e = block_exponent(tl.max(tl.abs(blocks), axis=1))
        even, odd = tl.split(tl.reshape(blocks * _pow2(-e)[:, None], [32, 16, 2]))
        byte = encode_e2m1(even) | (encode_e2m1(odd) << 4)
        blk = tl.arange(0, 32)[:, None]
        j = tl.arange(0, 16)[None, :]
        tl.store(dst + blk * 16 + j, byte.to(tl.uint8), mask=(blk < MX_BLOCKS) & ok)
        blk1 = tl.arange(0, 32)
        tl.store(scale_ptr + slot * scale_stride + blk1, (e + 127).to(tl.uint8), mask=(blk1 < MX_BLOCKS) & ok)
    else:
        m = (cols < ROW) & ok
        if FORMAT == FMT_FP8 or FORMAT == FMT_FP8_FNUZ:
            FNUZ: tl.constexpr = FORMAT == FMT_FP8_FNUZ
            FMAX: tl.constexpr = 240.0 if FNUZ else 448.0
            # x / scale rounded once to float32, as torch divides, without a division per value:
            # IEEE division's slow-path branch keeps the compiler from overlapping one value's
            # chain with another's. The product of x (at most 8 significant bits) and the float64
            # reciprocal is within 2**-52 of x / scale (relative), while x / scale, a ratio of 8-
            # and 24-bit significands, is never on a float32 rounding midpoint nor within 2**-49
            # of one; so the product rounds to float32 as the quotient does.
            inv = 1.0 / tl.load(scale_ptr).to(tl.float64)
            y = (_bf16_bits_to_f32(x).to(tl.float64) * inv).to(tl.float32)
            y = tl.minimum(tl.maximum(y, -FMAX), FMAX)
            if cuda_capability_geq(8, 9) and not FNUZ and not INTERPRETED:
                code = tl.inline_asm_elementwise(_TO_E4M3X4, "=r,r,r,r,r", [y], dtype=tl.uint8, is_pure=True, pack=4)
            else:
                code = encode_e4m3(y, FNUZ).to(tl.uint8)
            tl.store(dst + cols, code, mask=m)
        else:
            tl.store(dst + cols, x, mask=m)
