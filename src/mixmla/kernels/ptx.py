"""NVIDIA inline PTX of the packed decoders, shared by the Triton and Gluon kernels.

Plain strings for ``inline_asm_elementwise`` with ``pack=4`` (four elements per 32-bit register);
each kernel wraps them as a constexpr of its language. They need a CUDA target: e4m3 conversions
from sm_89, ``fma.rn.bf16x2`` from sm_80; callers check the target and fall back to portable code.
"""

#: ``$0, $1`` <- the 4 e4m3fn bytes of ``$2`` as two f16x2. The hardware conversion is exact
#: (every e4m3fn value, subnormals included, is an f16), so the result is the stored values.
#: Constraints ``"=r,=r,r"``.
FP8_E4M3_TO_F16X2 = """
{
.reg .b16 lo, hi;
mov.b32 {lo, hi}, $2;
cvt.rn.f16x2.e4m3x2 $0, lo;
cvt.rn.f16x2.e4m3x2 $1, hi;
}
"""

# One half of the MXFP4 decode: the code bytes selected by PAIR (a byte-permute selector, "0x4140"
# for bytes 0 and 1, "0x4342" for bytes 2 and 3) become even values EVEN and odd values ODD (bf16x2).
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

#: ``($0, $1)`` even and ``($2, $3)`` odd values of the 8 E2M1 codes in the 4 bytes of ``$4``, as
#: bf16x2, scaled by the E8M0 bytes in ``$5`` (one per code byte: the 4 elements Triton packs into
#: a register need not share a row, so each carries its own scale). Constraints
#: ``"=r,=r,=r,=r,r,r"``. A code's 3 magnitude bits are exactly a byte-permute selector, so two
#: permutes look up four bf16 magnitudes at once in 8-entry tables (their high and low bytes), a
#: third puts the bytes in place, the sign bit is shifted into bit 15, and one bf16x2 multiply by
#: 2**(scale - 127) (the bf16 bits ``scale << 7``) applies the block scale. Exact for scales
#: 1..252: the products are E2M1 values times a power of two, subnormal ones included. Scale 0
#: (2**-127, for blocks whose values are all below 2**-125) decodes as zeros, and 255 (NaN) as
#: infinities, and NaN where the code is zero.
MXFP4_TO_BF16X2 = """
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
"""
