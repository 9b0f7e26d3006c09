"""MXFP4 chunks for the Hopper kernel: load a chunk's code words and scales, decode to bf16.

A chunk is 64 consecutive key columns of 64 tokens: 32 bytes (two E2M1 codes each, low nibble
first) and two E8M0 scale bytes per token. Thread q of a row loads code words ``2q, 2q+1`` (one
8-byte load, ``chunk_word_layout(2)``) and the scale of their block. ``decode_chunk`` returns the
values in stored column order, each bf16x2 register holding the two values of one byte, which is
what the wgmma operand and the 16-byte shared-memory stores of the value tile take as they are.
"""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl

from ..ptx import HOPPER_MXFP4_COLUMNS_TO_BF16X2, HOPPER_MXFP4_TABLES, HOPPER_MXFP4_TO_BF16X2
from .layouts import TILE, chunk_word_layout, key_operand_layout, mxfp4_scale_layout, value_scale_layout

DECODE_ASM = gl.constexpr(HOPPER_MXFP4_TO_BF16X2)
COLUMNS_ASM = gl.constexpr(HOPPER_MXFP4_COLUMNS_TO_BF16X2)
#: 32-bit words of a chunk's row (64 four-bit codes), and chunks per copy of the staged kernel
#: (``decode_tma``: four chunks are the 256 value columns one transposed load covers).
CHUNK_WORDS = gl.constexpr(8)
CHUNKS_PER_COPY = gl.constexpr(4)
HI_TABLE_0 = gl.constexpr(HOPPER_MXFP4_TABLES[0])
HI_TABLE_1 = gl.constexpr(HOPPER_MXFP4_TABLES[1])
LO_TABLE_0 = gl.constexpr(HOPPER_MXFP4_TABLES[2])
LO_TABLE_1 = gl.constexpr(HOPPER_MXFP4_TABLES[3])

#: ``$0`` <- the E8M0 byte at ``$1`` where ``$2`` is nonzero, else 127 (2**0): a byte load that
#: zero-extends into 32 bits, where a masked ``gl.load`` of uint8 fills a 16-bit register and its
#: conversion to int32 costs a mask per chunk and row.
SCALE_LOAD_ASM = gl.constexpr("{ .reg .pred p; setp.ne.b32 p, $2, 0; mov.b32 $0, 127; @p ld.global.u8 $0, [$1]; }")

#: ``$0`` <- 0 after L2 line prefetches of one token's rows, nothing unless ``$3``: lane q of the
#: four that hold a row (``chunk_word_layout(2)``: q = lane % 4) asks for byte ``min(96 q, 287)`` of
#: its 288-byte code row at ``$1``, so each 128-byte line the row may touch gets one, and lanes 0
#: and 1 for the first and last byte of its 18-byte scale row at ``$2``.
PREFETCH_ASM = gl.constexpr(
    "{ .reg .pred p, q; .reg .u32 ln; .reg .u64 o, a; mov.u32 ln, %laneid; and.b32 ln, ln, 3; "
    "setp.ne.u32 p, $3, 0; mul.wide.u32 o, ln, 96; min.u64 o, o, 287; add.u64 a, $1, o; "
    "@p prefetch.global.L2 [a]; setp.lt.and.u32 q, ln, 2, p; mul.wide.u32 o, ln, 17; add.u64 a, $2, o; "
    "@q prefetch.global.L2 [a]; mov.u32 $0, 0; }")

#: How ``decode_chunk`` relabels the joined outputs (TILE, 8 words, 2, 2, 2) into stored column
#: order: split the word axis into (lane, word in pair), then order (lane, b4, b2, a, nibble).
JOIN_SHAPE = gl.constexpr((64, 4, 2, 2, 2, 2))
JOIN_ORDER = gl.constexpr((0, 1, 5, 4, 3, 2))


@gluon.jit
def load_chunk(kv_ptr, row_off, sc_ptr, sc_row_off, tok_ok, C: gl.constexpr):
    """Code words (TILE, 8) int32 and E8M0 block scale bytes (TILE, 2) int32 of chunk ``C`` (0..8)
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
    scale = gl.inline_asm_elementwise(SCALE_LOAD_ASM, "=r,l,r", [sc_ptr + sc_rows[:, None] + (2 * C + blk)[None, :],
                                                              sc_ok[:, None].to(gl.int32)],
                                      dtype=gl.int32, is_pure=True, pack=1)
    return codes, scale


@gluon.jit
def prefetch_rows(kv_ptr, row_off, sc_ptr, sc_row_off, tok_ok):
    """Asks L2 for the code and scale rows that ``load_chunk`` would read for these token rows (the
    same arguments, without a chunk): every line of them, whatever the row's alignment. For rows
    scattered over a pool, a tile or more before their loads."""
    sc_rows = gl.convert_layout(sc_row_off, row_off.type.layout, assert_trivial=True)
    gl.inline_asm_elementwise(PREFETCH_ASM, "=r,l,l,r",
                              [(kv_ptr + row_off).to(gl.pointer_type(gl.uint8), bitcast=True), sc_ptr + sc_rows,
                               tok_ok.to(gl.int32)], dtype=gl.int32, is_pure=False, pack=1)


@gluon.jit
def zero_buffer():
    """An int32 0 in shared memory (allocated by the kernel before its work) for ``shared_zero``."""
    one: gl.constexpr = gl.BlockedLayout([1], [32], [4], [0])
    return gl.allocate_shared_memory(gl.int32, [1], gl.SwizzledSharedLayout(1, 1, 1, [0]),
                                     gl.zeros([1], gl.int32, one))


@gluon.jit
def shared_zero(zero_smem):
    """The 0 of ``zero_buffer`` as read from shared memory: tables made from it (``decode_tables``,
    ``tables_like``) live in ordinary registers (prmt reads its table operands from them; in
    uniform registers they are copied out before every use)."""
    one: gl.constexpr = gl.BlockedLayout([1], [32], [4], [0])
    return gl.sum(zero_smem.load(one), axis=0)


@gluon.jit
def decode_tables(zero):
    """The magnitude tables of ``DECODE_ASM`` as (TILE, 8) int32 tensors, made from ``zero``
    (an int32 0 the compiler cannot see through, so they live in ordinary registers)."""
    return tables_like(zero, gl.full([TILE, 8], 0, gl.int32, chunk_word_layout(2)))


@gluon.jit
def tables_like(zero, like):
    """The magnitude tables of ``DECODE_ASM`` and ``COLUMNS_ASM`` as int32 tensors of ``like``'s shape
    and layout, made from ``zero`` (as ``decode_tables``)."""
    base = gl.full(like.shape, 0, gl.int32, like.type.layout) + zero
    return base + HI_TABLE_0, base + HI_TABLE_1, base + LO_TABLE_0, base + LO_TABLE_1


@gluon.jit
def decode_chunk(codes, scale, tables):
    """bf16 values (TILE, 64), stored column order, of ``load_chunk``'s code words and scale bytes;
    ``tables`` from ``decode_tables``."""
    word_l: gl.constexpr = chunk_word_layout(2)
    # bf16x2 bits of 2**(scale - 127) twice: (scale << 7) | (scale << 23) for a byte, one multiply.
    mult = gl.reshape(gl.expand_dims(scale * 0x800080, 2).broadcast_to([TILE, 2, 4]), [TILE, 8])
    mult = gl.convert_layout(mult, word_l, assert_trivial=True)
    x0, x1, x2, x3, x4, x5, x6, x7 = gl.inline_asm_elementwise(
        DECODE_ASM, "=r,=r,=r,=r,=r,=r,=r,=r,r,r,r,r,r,r,r,r,r,r,r,r", [codes, mult, tables[0], tables[1], tables[2], tables[3]],
        dtype=(gl.bfloat16, ) * 8, is_pure=True, pack=2)
    # x_b at word 2u + m holds nibble m of byte b of the thread's 8 bytes (u = lane % 4). A join
    # adds a minor axis, so j[..., w, a, b2, b4] = x_(a + 2 b2 + 4 b4) at word w.
    j = gl.join(gl.join(gl.join(x0, x1), gl.join(x2, x3)), gl.join(gl.join(x4, x5), gl.join(x6, x7)))
    j = gl.permute(gl.reshape(j, JOIN_SHAPE.value), JOIN_ORDER.value)
    return gl.reshape(j, [TILE, 64])


@gluon.jit
def value_scales(scales, ROWS: gl.constexpr):
    """The block scales of a value operand of 256 columns (``decode_columns``), (64 column quads,
    TILE tokens) int16 in ``key_operand_layout(ROWS)``: element (j, t) is the E8M0 byte of token t's
    block of columns 4j .. 4j+3. ``scales``: the 8 blocks' bytes as int16 (8, TILE), a shared-memory
    view; each thread reads those of its own blocks and tokens, two tokens per load."""
    s = scales.load(gl.SliceLayout(1, value_scale_layout()))
    s = gl.reshape(gl.expand_dims(s, 1).broadcast_to([8, 8, TILE]), [64, TILE])
    return gl.convert_layout(s, key_operand_layout(ROWS), assert_trivial=True)


@gluon.jit
def decode_columns(quads, scales, tables):
    """The values of ``quads`` (64, TILE) int16, element (j, t) = the code bytes of columns 4j .. 4j+3
    of token t (a transposed view of the raw rows), in a layout that keeps tokens t, t+1 (t even) of
    one j in one register (the wgmma A operand's ``k_width=2``), scaled by ``scales`` (same shape
    and layout, ``value_scales``): four (64, TILE) bf16 tensors, the values of columns 4j + i,
    i = 0..3, in the same layout; ``tables`` from ``tables_like`` of an int32 tensor of that
    layout."""
    return gl.inline_asm_elementwise(COLUMNS_ASM, "=r,=r,=r,=r,r,r,r,r,r,r,r,r,r,r",
                                     [quads, scales, tables[0], tables[1], tables[2], tables[3]],
                                     dtype=(gl.bfloat16, ) * 4, is_pure=True, pack=2)
