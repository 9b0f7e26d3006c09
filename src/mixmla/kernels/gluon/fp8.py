"""fp8 (e4m3fn) chunks for the Hopper kernel (``decode_tma``): convert a chunk's staged words to f16.

A chunk is 64 consecutive key columns (64 bytes) of 64 tokens; thread q of a row holds words
``4q .. 4q+3`` (``chunk_word_layout(4)``). The conversion is exact (every e4m3fn value is an
f16), so the tensor scale is applied once, in the softmax scale and the output.
"""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl

from .layouts import TILE

from ..ptx import HOPPER_FP8_ROW_PAIRS_TO_F16X2, HOPPER_FP8_TO_F16X2

DECODE_ASM = gl.constexpr(HOPPER_FP8_TO_F16X2)
COLUMNS_ASM = gl.constexpr(HOPPER_FP8_ROW_PAIRS_TO_F16X2)
#: 32-bit words of a chunk's row (64 one-byte codes), and chunks per copy of the staged kernel
#: (``decode_tma``: two chunks are the 64 column pairs one transposed load covers).
CHUNK_WORDS = gl.constexpr(16)
CHUNKS_PER_COPY = gl.constexpr(2)

#: How ``decode_chunk`` relabels the joined outputs (TILE, 16 words, 2, 2) into stored column order:
#: split the word axis into (pair, word in pair), then order (pair, b, a, byte in register).
JOIN_SHAPE = gl.constexpr((64, 8, 2, 2, 2))
JOIN_ORDER = gl.constexpr((0, 1, 4, 3, 2))


@gluon.jit
def decode_chunk(words):
    """f16 values (TILE, 64), stored column order, of a chunk's words (TILE, 16) int32."""
    x0, x1, x2, x3 = gl.inline_asm_elementwise(DECODE_ASM, "=r,=r,=r,=r,r,r", [words], dtype=(gl.float16, ) * 4,
                                               is_pure=True, pack=2)
    # x_k at word 2u + m holds byte 2k + m of bytes 8u .. 8u+7. A join adds a minor axis, so
    # j[..., w, a, b] = x_(a + 2 b) at word w.
    j = gl.join(gl.join(x0, x1), gl.join(x2, x3))
    j = gl.permute(gl.reshape(j, JOIN_SHAPE.value), JOIN_ORDER.value)
    return gl.reshape(j, [TILE, 64])


@gluon.jit
def decode_columns(pairs):
    """The values of ``pairs`` (J, T) int16, element (j, t) = the bytes of columns 2j, 2j+1 of row t
    (a transposed view of the raw rows), in a layout that keeps rows t, t+1 (t even) of one j in
    one register (the wgmma A operand's ``k_width=2``): ``(even, odd)`` (J, T) f16, the values of
    columns 2j and 2j+1, in the same layout."""
    return gl.inline_asm_elementwise(COLUMNS_ASM, "=r,=r,r", [pairs], dtype=(gl.float16, gl.float16), is_pure=True,
                                     pack=2)
