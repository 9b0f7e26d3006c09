"""NVIDIA inline PTX of the packed decoders, shared by the Triton and Gluon kernels.

Plain strings for ``inline_asm_elementwise``; each kernel wraps them as a constexpr of its
language. The Triton kernel's decoders take ``pack=4`` (four elements per 32-bit register); the
Hopper kernel's (``HOPPER_*``) take ``pack=2`` on 32-bit words, so that one output register holds
two values of one byte (MXFP4) or two neighbouring bytes (fp8), the pairs the ``wgmma`` operand
layout takes. They need a CUDA target: e4m3 conversions from sm_89, ``fma.rn.bf16x2`` from sm_80,
``mul.rn.bf16x2`` from sm_90; callers check the target and fall back to portable code.
"""

import re


def with_operands(asm: str, mapping: dict[int, int]) -> str:
    """``asm`` with operand ``$k`` renamed ``$mapping[k]`` (all at once, so renames may overlap)."""
    return re.sub(r"\$(\d+)", lambda m: f"${mapping.get(int(m.group(1)), int(m.group(1)))}", asm)

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


#: Two words ``$4 $5`` (8 e4m3fn bytes) -> four f16x2 registers ``$0 .. $3``, register k = bytes
#: 2k, 2k+1 (``FP8_E4M3_TO_F16X2`` once per word). Constraints ``"=r,=r,=r,=r,r,r"``.
HOPPER_FP8_TO_F16X2 = ("{" + with_operands(FP8_E4M3_TO_F16X2, {2: 4}) + with_operands(FP8_E4M3_TO_F16X2, {0: 2, 1: 3, 2: 5})
                       + "}")

# One code word $N (8 E2M1 codes) -> four bf16x2 registers, register k = the values of byte k
# (low nibble, high nibble), times the block scale $M (bf16x2 bits of 2**(scale - 127), twice).
# Magnitudes by table as in MXFP4_TO_BF16X2, but the two table prmts give the high and low bytes
# of four values and two more interleave them into two registers; the four sign bits (bit 3 of
# each nibble) become the top bits of the high bytes by one byte permute of (word << 4, word) and
# one lop3. Exact as MXFP4_TO_BF16X2 (scale byte 0 gives zeros, the NaN byte 255 infinities or NaN).
_HOPPER_MXFP4_HALF = """
prmt.b32 sg, c4, $N, SIGNS;
prmt.b32 hi4, ht0, ht1, sel;
lop3.b32 hi4, hi4, sg, 0x80808080, 0xF8;
prmt.b32 lo4, lt0, lt1, sel;
prmt.b32 FIRST, lo4, hi4, PICK1;
prmt.b32 SECOND, lo4, hi4, PICK2;
"""


def _hopper_mxfp4_word(picks: tuple[str, str]) -> str:
    """``_HOPPER_MXFP4_HALF`` on the word's first two bytes (nibbles 0..3, their signs picked by
    0x5140), then on the last two; ``picks``: the two selectors that interleave the low and high
    bytes of the four values into two registers."""
    def half(signs, first, second):
        return (_HOPPER_MXFP4_HALF.replace("SIGNS", signs).replace("FIRST", first).replace("SECOND", second)
                .replace("PICK1", picks[0]).replace("PICK2", picks[1]))

    return ("\nand.b32 sel, $N, 0x77777777;\nshl.b32 c4, $N, 4;" + half("0x5140", "$A", "$B")
            + "shr.b32 sel, sel, 16;" + half("0x7362", "$C", "$D")
            + "".join(f"mul.rn.bf16x2 {r}, {r}, $M;\n" for r in ("$A", "$B", "$C", "$D")))


# Values 0, 1 of the four (one byte), then values 2, 3.
_HOPPER_MXFP4_WORD = _hopper_mxfp4_word(("0x5140", "0x7362"))


def _word(n, m, a, b, c, d):
    return (_HOPPER_MXFP4_WORD.replace("$N", n).replace("$M", m).replace("$A", a).replace("$B", b)
            .replace("$C", c).replace("$D", d))


#: The magnitude tables of ``HOPPER_MXFP4_TO_BF16X2``: high and low bytes of the bf16 of E2M1
#: magnitudes 0..7 (0, 0.5, 1, 1.5, 2, 3, 4, 6), four per word, as signed 32-bit values.
HOPPER_MXFP4_TABLES = (0x3F3F3F00, 0x40404040, 0xC0800000 - (1 << 32), 0xC0804000 - (1 << 32))

#: ``$0 .. $7``: one bf16x2 register per byte of the code words ``$8 $9`` (low nibble, high
#: nibble), scaled by ``$10`` (``$11`` equal: both words are in one block); the tables come in as
#: ``$12 $14 $16 $18`` (each given twice): written in the asm, ptxas keeps them in uniform registers
#: and copies them out before every use. Constraints 8 x ``=r`` then 12 x ``r``.
HOPPER_MXFP4_TO_BF16X2 = ("{\n.reg .b32 sel, hi4, lo4, c4, sg, ht0, ht1, lt0, lt1;\n"
                          "mov.b32 ht0, $12;\nmov.b32 ht1, $14;\nmov.b32 lt0, $16;\nmov.b32 lt1, $18;"
                          + _word("$8", "$10", "$0", "$1", "$2", "$3") + _word("$9", "$11", "$4", "$5", "$6", "$7")
                          + "}")


#: ``$0 .. $3`` <- four value columns of two cache rows as bf16x2: ``$4`` holds two 16-bit code
#: pairs (row t: columns 4j .. 4j+3, row t+1: the same columns), what a transposed ``ldmatrix`` of
#: the raw bytes gives; register ``$0 + i`` = column 4j + i of rows t, t+1, each scaled by its row's
#: block scale: ``$5`` holds the two E8M0 bytes, one per 16-bit half (one shift makes them the
#: bf16x2 bits of 2**(scale - 127)). A byte permute puts each row's byte b beside the other row's,
#: then ``_HOPPER_MXFP4_HALF`` with selectors that pair value k of one row with value k of the
#: other. The tables come in as ``$6 $8 $10 $12`` (each given twice). Constraints 4 x ``=r`` then
#: 10 x ``r``.
HOPPER_MXFP4_COLUMNS_TO_BF16X2 = ("{\n.reg .b32 w, m, sel, hi4, lo4, c4, sg, ht0, ht1, lt0, lt1;\n"
                                  "mov.b32 ht0, $6;\nmov.b32 ht1, $8;\nmov.b32 lt0, $10;\nmov.b32 lt1, $12;\n"
                                  "prmt.b32 w, $4, 0, 0x3120;\nshl.b32 m, $5, 7;"
                                  + _hopper_mxfp4_word(("0x6240", "0x7351")).replace("$N", "w").replace("$M", "m")
                                  .replace("$A", "$0").replace("$B", "$1").replace("$C", "$2").replace("$D", "$3")
                                  + "}")


#: ``$0, $1`` <- the even and odd columns of two cache rows as f16x2: ``$2`` holds the 4 e4m3fn
#: bytes (row t: columns 2j, 2j+1; row t+1: the same columns), the 16-bit pairs a transposed
#: ``ldmatrix`` of the raw bytes gives; register ``$0`` = column 2j of rows t, t+1, ``$1`` =
#: column 2j+1. One byte permute, then ``FP8_E4M3_TO_F16X2`` on the permuted word.
#: Constraints ``"=r,=r,r"``.
HOPPER_FP8_ROW_PAIRS_TO_F16X2 = ("{\n.reg .b32 rows;\nprmt.b32 rows, $2, 0, 0x3120;"
                                 + FP8_E4M3_TO_F16X2.replace("$2", "rows") + "}")
