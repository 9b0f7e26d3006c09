"""MXFP4 chunks for the Hopper kernel: load a chunk's code words and scales, decode to bf16.

A chunk is 64 consecutive key columns of 64 tokens: 32 bytes (two E2M1 codes each, low nibble
first) and two E8M0 scale bytes per token. Thread q of a row loads code words ``2q, 2q+1`` (one
8-byte load, ``chunk_word_layout(2)``) and the scale of their block. ``decode_chunk`` returns the
values in stored column order, each bf16x2 register holding the two values of one byte, which is
what the wgmma operand and the 16-byte shared-memory stores of the value tile take as they are.
"""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl

from .layouts import TILE, chunk_word_layout, mxfp4_scale_layout

# One code word $N (8 E2M1 codes) -> four bf16x2 registers, register k = the values of byte k
# (low nibble, high nibble), times the block scale $M (bf16x2 bits of 2**(scale - 127), twice).
# Magnitudes by table: a code's 3 magnitude bits are a byte-permute selector, so one prmt looks up
# the high bytes and one the low bytes of four bf16 values (E2M1 values are exact in bf16), and two
# more interleave them into two registers. The four sign bits (bit 3 of each nibble) become the top
# bits of the high bytes by one byte permute of (word << 4, word) and one lop3. Exact: E2M1 values
# times a power of two (scale byte 0 gives zeros, the NaN byte 255 infinities or NaN).
_WORD = """
and.b32 sel, $N, 0x77777777;
shl.b32 c4, $N, 4;
prmt.b32 sg, c4, $N, 0x5140;
prmt.b32 hi4, ht0, ht1, sel;
lop3.b32 hi4, hi4, sg, 0x80808080, 0xF8;
prmt.b32 lo4, lt0, lt1, sel;
prmt.b32 $A, lo4, hi4, 0x5140;
prmt.b32 $B, lo4, hi4, 0x7362;
shr.b32 sel, sel, 16;
prmt.b32 sg, c4, $N, 0x7362;
prmt.b32 hi4, ht0, ht1, sel;
lop3.b32 hi4, hi4, sg, 0x80808080, 0xF8;
prmt.b32 lo4, lt0, lt1, sel;
prmt.b32 $C, lo4, hi4, 0x5140;
prmt.b32 $D, lo4, hi4, 0x7362;
mul.rn.bf16x2 $A, $A, $M;
mul.rn.bf16x2 $B, $B, $M;
mul.rn.bf16x2 $C, $C, $M;
mul.rn.bf16x2 $D, $D, $M;
"""
# Operands: $0..$7 outputs (one bf16x2 register of each of the 8 output tensors), $8 $9 the two code
# words, $10 $11 their scale multipliers (the same value: both words are in one block), then the
# four table words (``HI_TABLE_*``, ``LO_TABLE_*``), each given twice. The tables come in as registers: written in the
# asm, ptxas keeps them in uniform registers and copies them out before every use.
HI_TABLE_0 = gl.constexpr(0x3F3F3F00)
HI_TABLE_1 = gl.constexpr(0x40404040)
LO_TABLE_0 = gl.constexpr(0xC0800000 - (1 << 32))
LO_TABLE_1 = gl.constexpr(0xC0804000 - (1 << 32))
DECODE_ASM = gl.constexpr("""{
.reg .b32 sel, hi4, lo4, c4, sg, ht0, ht1, lt0, lt1;
mov.b32 ht0, $12;
mov.b32 ht1, $14;
mov.b32 lt0, $16;
mov.b32 lt1, $18;
""" + _WORD.replace("$N", "$8").replace("$M", "$10").replace("$A", "$0").replace("$B", "$1").replace(
    "$C", "$2").replace("$D", "$3") + _WORD.replace("$N", "$9").replace("$M", "$11").replace("$A", "$4").replace(
        "$B", "$5").replace("$C", "$6").replace("$D", "$7") + "}")


#: How ``decode_chunk`` relabels the joined outputs (TILE, 8 words, 2, 2, 2) into stored column
#: order: split the word axis into (lane, word in pair), then order (lane, b4, b2, a, nibble).
JOIN_SHAPE = gl.constexpr((64, 4, 2, 2, 2, 2))
JOIN_ORDER = gl.constexpr((0, 1, 5, 4, 3, 2))


@gluon.jit
def load_chunk(kv_ptr, row_off, sc_ptr, sc_row_off, tok_ok, C: gl.constexpr):
    """Code words (TILE, 8) int32 and E8M0 block scale bytes (TILE, 2) uint8 of chunk ``C`` (0..8)
    of the token rows.

    kv_ptr: int32 view of the cache; row_off: (TILE,) int64 word offsets of the token rows in
    ``SliceLayout(1, chunk_word_layout(2))``; sc_ptr/sc_row_off: E8M0 bytes and byte offsets of the
    scale rows (same layout); tok_ok: (TILE,) int1 rows to load (others: zero codes, scale 1).
    """
    word_l: gl.constexpr = chunk_word_layout(2)
    sc_l: gl.constexpr = gl.SliceLayout(2, mxfp4_scale_layout())
    cols = gl.arange(0, 8, layout=gl.SliceLayout(0, word_l))
    codes = gl.load(kv_ptr + row_off[:, None] + (8 * C + cols)[None, :], mask=tok_ok[:, None], other=0)
    blk = gl.arange(0, 2, layout=gl.SliceLayout(0, sc_l))
    sc_rows = gl.convert_layout(sc_row_off, gl.SliceLayout(1, sc_l), assert_trivial=True)
    sc_ok = gl.convert_layout(tok_ok, gl.SliceLayout(1, sc_l), assert_trivial=True)
    # Left as loaded: anything computed from a load here would wait for it, a tile early.
    scale = gl.load(sc_ptr + sc_rows[:, None] + (2 * C + blk)[None, :], mask=sc_ok[:, None], other=127)
    return codes, scale


@gluon.jit
def decode_tables(zero):
    """The magnitude tables of ``DECODE_ASM`` as (TILE, 8) int32 tensors, made from ``zero``
    (an int32 0 the compiler cannot see through, so they live in ordinary registers)."""
    word_l: gl.constexpr = chunk_word_layout(2)
    base = gl.full([TILE, 8], 0, gl.int32, word_l) + zero
    return base + HI_TABLE_0, base + HI_TABLE_1, base + LO_TABLE_0, base + LO_TABLE_1


@gluon.jit
def decode_chunk(codes, scale, tables):
    """bf16 values (TILE, 64), stored column order, of ``load_chunk``'s code words and scale bytes;
    ``tables`` from ``decode_tables``."""
    word_l: gl.constexpr = chunk_word_layout(2)
    scale = scale.to(gl.int32)
    mult = gl.reshape(gl.expand_dims((scale << 7) | (scale << 23), 2).broadcast_to([TILE, 2, 4]), [TILE, 8])
    mult = gl.convert_layout(mult, word_l, assert_trivial=True)
    x0, x1, x2, x3, x4, x5, x6, x7 = gl.inline_asm_elementwise(
        DECODE_ASM, "=r,=r,=r,=r,=r,=r,=r,=r,r,r,r,r,r,r,r,r,r,r,r,r", [codes, mult, tables[0], tables[1], tables[2], tables[3]],
        dtype=(gl.bfloat16, ) * 8, is_pure=True, pack=2)
    # x_b at word 2u + m holds nibble m of byte b of the thread's 8 bytes (u = lane % 4). A join
    # adds a minor axis, so j[..., w, a, b2, b4] = x_(a + 2 b2 + 4 b4) at word w.
    j = gl.join(gl.join(gl.join(x0, x1), gl.join(x2, x3)), gl.join(gl.join(x4, x5), gl.join(x6, x7)))
    j = gl.permute(gl.reshape(j, JOIN_SHAPE.value), JOIN_ORDER.value)
    return gl.reshape(j, [TILE, 64])
