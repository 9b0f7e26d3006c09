"""Register and shared-memory layouts of the Hopper kernel, and the column order they imply.

The kernel computes ``S^T = K Q^T`` with 64 cached tokens in the matrix unit's M slot and the query
rows (heads x query tokens) in N, taking the key tile K straight from registers: each thread decodes
the cache bytes it loaded into the A-operand layout of ``wgmma`` (``DotOperandLayout``), so no
decoded key ever goes through shared memory for the scores.

A-operand registers hold, per thread and per 16-wide k step, the column pairs ``2q, 2q+1`` and
``2q+8, 2q+9`` (q = lane % 4): in stored order those are 4 bytes apart, which would mean byte-sized
loads. A dot product does not care about the order of its k index, so within every 64-column chunk
the kernel uses its own order (``chunk_column``): thread q of a row holds stored columns
``16q .. 16q+15`` of the chunk, i.e. 16 contiguous fp8 bytes or 8 contiguous MXFP4 bytes, one
vector load. The query is staged in shared memory in the same order, so the scores are exact. The
values keep the stored order (they are written to shared memory as decoded, ``v_layout``).

Layouts are built by ``gl.constexpr_function`` helpers so the kernel and the compile checks agree.
"""

from triton.experimental import gluon
from triton.runtime.jit import constexpr_function
from triton.experimental.gluon import language as gl

TILE = gl.constexpr(64)  #: cached tokens per tile (the M of wgmma)
CHUNK = gl.constexpr(64)  #: key columns per chunk (one warpgroup_mma call of k = 64)
NUM_CHUNKS = gl.constexpr(9)  #: 576 key columns
VALUE_CHUNKS = gl.constexpr(8)  #: the first 512 columns are also the values


@constexpr_function
def score_layout(rows):
    """Accumulator layout of the scores S^T (TILE, rows) float32 and of the output O^T (512, rows)."""
    return gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, rows, 16])


@constexpr_function
def key_operand_layout(rows):
    """wgmma A-operand layout of a (TILE, CHUNK) 16-bit key chunk."""
    return gl.DotOperandLayout(operand_index=0, parent=score_layout(rows), k_width=2)


@constexpr_function
def chunk_word_layout(words_per_thread):
    """Layout of one chunk's stored bytes as 32-bit words (TILE, 4 * words_per_thread): thread
    (warp w, lane l) holds rows 16w + l // 4 and 16w + l // 4 + 8 and words
    ``(l % 4) * words_per_thread ..`` of the chunk, contiguous (one 8-byte load per row for MXFP4,
    16-byte for fp8). These are the rows and, in ``chunk_column`` order, the columns of the key
    operand layout. Words, not bytes, so that a tile carried in registers stays packed."""
    reg = [[0, 1 << i] for i in range(words_per_thread.bit_length() - 1)] + [[8, 0]]
    lane = [[0, words_per_thread], [0, 2 * words_per_thread], [1, 0], [2, 0], [4, 0]]
    return gl.DistributedLinearLayout(reg_bases=reg, lane_bases=lane, warp_bases=[[16, 0], [32, 0]], block_bases=[],
                                      shape=[TILE, 4 * words_per_thread])


@constexpr_function
def mxfp4_scale_layout():
    """(TILE, 2, 4) view of an MXFP4 chunk's 8 words as (row, scale block, word in block), in
    ``chunk_word_layout(2)``; its slice along the last axis holds each thread's block scale."""
    return gl.DistributedLinearLayout(
        reg_bases=[[0, 0, 1], [8, 0, 0]],
        lane_bases=[[0, 0, 2], [0, 1, 0], [1, 0, 0], [2, 0, 0], [4, 0, 0]],
        warp_bases=[[16, 0, 0], [32, 0, 0]], block_bases=[], shape=[TILE, 2, 4])


@constexpr_function
def value_scale_layout():
    """``key_operand_layout`` of a (64, TILE) value operand of 256 MXFP4 columns as (8 scale
    blocks, 8 column quads per block, TILE tokens): its slice along the quads holds each thread's
    block scales, one per block and token."""
    return gl.DistributedLinearLayout(
        reg_bases=[[0, 0, 1], [1, 0, 0], [0, 0, 8], [0, 0, 16], [0, 0, 32]],
        lane_bases=[[0, 0, 2], [0, 0, 4], [0, 1, 0], [0, 2, 0], [0, 4, 0]],
        warp_bases=[[2, 0, 0], [4, 0, 0]], block_bases=[], shape=[8, 8, 64])


@constexpr_function
def v_layout():
    """Shared-memory layout of the decoded values (TILE, 512): 128-byte swizzle, so the value
    product reads it transposed (V^T, MN-major) and the decoders' 16-byte stores do not conflict."""
    return gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=16, rank=2)


@constexpr_function
def staged_chunks_layout(words=16):
    """Shared-memory layout of a staged tile's chunks (chunks, TILE, words) int32, as the copy engine
    writes them: one row per cached token and chunk (64 bytes for fp8, 32 for MXFP4), swizzled
    over the row's width. Both reads of it are free of bank conflicts: the key path's row loads
    (16 or 8 bytes a thread; the swizzle spreads a quarter or half warp's rows over all banks) and
    the value path's transposed 8x8 loads (``ldmatrix.trans``: 8 rows of one 16-byte column, which
    it spreads over all banks)."""
    return gl.NVMMASharedLayout(swizzle_byte_width=4 * words, element_bitwidth=32, rank=3)


@constexpr_function
def staged_rows_layout(words=16):
    """The same bytes as ``staged_chunks_layout``, viewed as (chunks * TILE, words) words."""
    return gl.NVMMASharedLayout(swizzle_byte_width=4 * words, element_bitwidth=32, rank=2)


@constexpr_function
def staged_columns_layout(words=16):
    """The same bytes as ``staged_chunks_layout``, viewed as (chunks, TILE, 2 * words) int16."""
    return gl.NVMMASharedLayout(swizzle_byte_width=4 * words, element_bitwidth=16, rank=3)


@constexpr_function
def q_layout():
    """Shared-memory layout of the query chunks (NUM_CHUNKS, rows, CHUNK)."""
    return gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=16, rank=2)


@constexpr_function
def p_layout(rows):
    """Shared-memory layout of the probabilities P^T (TILE, rows), the value product's B operand."""
    return gl.NVMMASharedLayout(swizzle_byte_width=min(128, 2 * rows), element_bitwidth=16, rank=2)


#: ``operand_order``'s relabelling of a chunk's columns: stored column 16q + 4b + 2h + e -> operand
#: column 16b + 8h + 2q + e (q: lane % 4; b: 16-wide k step; h: its second half; e: element of a
#: register pair). Split the columns by KEY_SPLIT, reorder the axes by KEY_ORDER.
KEY_SPLIT = gl.constexpr((4, 4, 2, 2))
KEY_ORDER = gl.constexpr((0, 2, 3, 1, 4))


@gluon.jit
def operand_order(x):
    """(R, CHUNK) columns in stored order -> the same values in ``chunk_column`` order (a relabelling
    of the tensor; no data moves)."""
    R: gl.constexpr = x.shape[0]
    split = gl.reshape(x, [R, KEY_SPLIT[0], KEY_SPLIT[1], KEY_SPLIT[2], KEY_SPLIT[3]])
    return gl.reshape(gl.permute(split, KEY_ORDER.value), [R, CHUNK])


@gluon.jit
def to_key_operand(phys, ROWS: gl.constexpr):
    """(TILE, CHUNK) decoded chunk in stored column order, as ``chunk_word_layout`` rows/threads
    give it, relabelled into the key operand (``chunk_column`` order). No data moves."""
    return gl.convert_layout(operand_order(phys), key_operand_layout(ROWS), assert_trivial=True)


@gluon.jit
def chunk_column(k):
    """Stored column (within a chunk) of key-operand column ``k`` (int tensor, 0..63): the inverse
    of the relabelling in ``to_key_operand``."""
    return 16 * ((k >> 1) & 3) + 4 * (k >> 4) + 2 * ((k >> 3) & 1) + (k & 1)


def chunk_column_host(k):
    """``chunk_column`` for Python ints or integer tensors (tests, the reference permutation)."""
    return 16 * ((k >> 1) & 3) + 4 * (k >> 4) + 2 * ((k >> 3) & 1) + (k & 1)
