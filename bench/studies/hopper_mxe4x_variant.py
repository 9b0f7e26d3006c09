"""MXFP4 on e4m3 tensor-core operands throughout (design log step 104): ``hopper_mxe4_variant.py``'s
dataflow without f16 products, for ``hopper_variants.py``.

``hopper_mxe4_variant`` takes f16 keys for the score product and converts the e4m3 value tile back
to f16 for the value product (128 conversions per thread and tile). Here the codes decode to e4m3
bytes (one exponent per token, ``mxfp4_e4m3_decoder.MXFP4_TO_E4M3``) and both products take those
bytes themselves (``wgmma ... .e4m3.e4m3``, A from registers):

- Scores: the key bytes go into the A operand as they are decoded (a register renaming: no data
  moves), their columns in the 8-bit operand's order (stored column ``16q + 4h + i`` of a chunk, the
  16 bytes thread q decoded, is operand column ``16h + 4q + i``); the query is staged as two e4m3
  terms per head, ``hi + lo`` of the row times a power of two (one term misses the bar: step 93),
  the two as the product's 32 columns, summed after it.
- Values: the e4m3 value tile as in ``hopper_mxe4_variant``; its transposed 8x8 loads give each
  thread two 16-bit column pairs of tokens t, t+1 and t+8, t+9 of one pair of columns, and one
  byte permute per register makes the even and the odd column's four bytes, the 8-bit A operand
  with its k slots in token order ``16a + 8b + 2q + e -> 16a + 4q + 2b + e``. P'' is stored in the
  same order, as two e4m3 terms of ``256 P''`` (each term its own product; the output divides by
  256). Each tile's value products start from zero and are added to the float32 accumulators
  after them (with the softmax rescale, one ``ffma`` per accumulator register): Hopper's e4m3
  products accumulate more narrowly than float32, so the sums over a long request stay out of them.

Accuracy of that arithmetic: ``mxfp4_token_exponent.py`` ('two e4m3'), 4.6e-4 on the benchmark's
inputs with float32 accumulation; Hopper's e4m3 products accumulate more narrowly, which only the
GPU shows. The e4m3 tables are exact to 13 binades (each token and block's f16 table by
arithmetic, rounded to e4m3 by the hardware: ``mxfp4_e4m3_decoder.E4M3_TABLES_FROM_F16``); beyond
that the table is zeros, as the exact one is.

``TRITON_INTERPRET=0 PYTHONPATH=src:bench/studies:tests python bench/studies/hopper_mxe4x_variant.py --compile``;
on the H200, ``hopper_variants.py OUT bench/studies/hopper_mxe4x_variant.py``.
"""

import sys

from triton.experimental import gluon
from triton.runtime.jit import constexpr_function
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, warpgroup_mma, warpgroup_mma_wait

from mixmla.kernels.constants import FMT_FP8, FMT_MXFP4, LOG2E
from mixmla.kernels.gluon import mxfp4, paging
from mixmla.kernels.gluon.decode import (_finish, _load_tile, _opaque_zero, _piece_tiles, _program_units,
                                         _request_bounds, _tile_pages, _tile_rows, _write_request)
from mixmla.kernels.gluon.decode_tma import PAIR_COLUMNS, _value_columns
from mixmla.kernels.gluon.layouts import (CHUNK, NUM_CHUNKS, TILE, VALUE_CHUNKS, chunk_word_layout, key_operand_layout,
                                          score_layout, staged_chunks_layout)

from hopper_mxe4_variant import chunk_tables, tile_max_pair, token_exponents
from mxfp4_e4m3_decoder import MXFP4_TO_E4M3

FORMATS = ("mxfp4", )
WORDS_ASM = gl.constexpr(MXFP4_TO_E4M3)
#: One 32-bit word as four 8-bit elements (``pack=4`` over a word broadcast four times).
BYTES_ASM = gl.constexpr("mov.b32 $0, $1;")
#: Two registers of 16-bit column pairs (tokens t, t+1 and t+8, t+9 of columns 2j, 2j+1) -> the
#: four bytes of column 2j (``$0``) and of column 2j+1 (``$1``).
SPLIT_ASM = gl.constexpr("prmt.b32 $0, $2, $3, 0x6420;\nprmt.b32 $1, $2, $3, 0x7531;")
#: P'' (at most 1) is scaled by this before its two e4m3 terms (1 lands on 256, below 448).
P_SCALE = gl.constexpr(256.0)


@constexpr_function
def _pairs_layout(rows):
    """``key_operand_layout(rows)`` of a (64, TILE) 16-bit value operand with its registers in the
    order (token bit 0, token bit 3, row bit 3, token bits 4, 5), so that four consecutive elements
    are tokens t, t+1, t+8, t+9 of one row (a renaming: no data moves)."""
    return gl.DistributedLinearLayout(reg_bases=[[0, 1], [0, 8], [8, 0], [0, 16], [0, 32]],
                                      lane_bases=[[0, 2], [0, 4], [1, 0], [2, 0], [4, 0]],
                                      warp_bases=[[16, 0], [32, 0]], block_bases=[], shape=[64, TILE.value])


@constexpr_function
def _fp8_acc_layout(rows):
    """``score_layout(rows)`` for 8-bit products (their instruction's k is 32): the same registers."""
    return gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, rows, 32])


@constexpr_function
def _fp8_operand_layout(rows):
    """The 8-bit A operand of a (64, 64) tile against ``rows`` columns."""
    return gl.DotOperandLayout(operand_index=0, parent=_fp8_acc_layout(rows), k_width=4)


@gluon.jit
def _as_bytes(words):
    """(TILE, 16) int32 words in ``chunk_word_layout(4)`` as (TILE, 64) float8e4nv, byte i of word w
    at column 4w + i (stored column order)."""
    l3: gl.constexpr = gl.DistributedLinearLayout(
        reg_bases=[[0, 0, 1], [0, 0, 2], [0, 1, 0], [0, 2, 0], [8, 0, 0]],
        lane_bases=[[0, 4, 0], [0, 8, 0], [1, 0, 0], [2, 0, 0], [4, 0, 0]],
        warp_bases=[[16, 0, 0], [32, 0, 0]], block_bases=[], shape=[TILE, 16, 4])
    w = gl.convert_layout(words, gl.SliceLayout(2, l3), assert_trivial=True)
    w4 = gl.reshape(gl.expand_dims(w, 2).broadcast_to([TILE, 16, 4]), [TILE, 64])
    return gl.inline_asm_elementwise(BYTES_ASM, "=r,r,r,r,r", [w4], dtype=gl.float8e4nv, is_pure=True, pack=4)


@gluon.jit
def _fp8_operand_order(x):
    """(R, 64) columns in stored order -> the 8-bit operand's order (stored ``16q + 4h + i`` at
    ``16h + 4q + i``): a relabelling."""
    R: gl.constexpr = x.shape[0]
    return gl.reshape(gl.permute(gl.reshape(x, [R, 4, 4, 4]), (0, 2, 1, 3)), [R, 64])


@gluon.jit
def _token_order(x):
    """(R, TILE) tokens -> the value operand's k slots (token ``16a + 8b + 2q + e`` at ``16a + 4q +
    2b + e``): a relabelling."""
    R: gl.constexpr = x.shape[0]
    return gl.reshape(gl.permute(gl.reshape(x, [R, 4, 2, 4, 2]), (0, 1, 3, 2, 4)), [R, TILE])


@gluon.jit
def _decode_chunk(codes, scale, r, ROWS: gl.constexpr):
    """``(keys, words)``: the chunk's e4m3 key operand (TILE, 64) (8-bit operand order) and its bytes
    as (TILE, 16) int32 words in stored order (``chunk_word_layout(4)``)."""
    t0, t1 = chunk_tables(scale, r, True)
    lo, hi = gl.inline_asm_elementwise(WORDS_ASM, "=r,=r,r,r,r", [codes, t0, t1], dtype=(gl.int32, gl.int32),
                                       is_pure=True, pack=1)
    words = gl.convert_layout(gl.reshape(gl.join(lo, hi), [TILE, 16]), chunk_word_layout(4), assert_trivial=True)
    keys = gl.convert_layout(_fp8_operand_order(_as_bytes(words)), _fp8_operand_layout(2 * ROWS),
                             assert_trivial=True)
    return keys, words


@gluon.jit
def _load_query_rows(q_ptr, stride_qt, stride_qh, q_lo, q_len, H: gl.constexpr, ROWS: gl.constexpr):
    """The request's query rows as NUM_CHUNKS (ROWS, CHUNK) float32 chunks in stored column order,
    rows past ``q_len * H`` zero."""
    ql: gl.constexpr = gl.BlockedLayout([ROWS // 16, 8], [4, 8], [4, 1], [1, 0])
    rows = gl.arange(0, ROWS, layout=gl.SliceLayout(1, ql))
    cols = gl.arange(0, CHUNK, layout=gl.SliceLayout(0, ql))
    ok = rows < q_len * H
    row_ptr = q_ptr + (q_lo + rows // H).to(gl.int64) * stride_qt + (rows % H) * stride_qh
    chunks = ()
    for c in gl.static_range(NUM_CHUNKS):
        chunks = chunks + (gl.load(row_ptr[:, None] + (CHUNK * c + cols)[None, :], mask=ok[:, None],
                                   other=0.0).to(gl.float32), )
    return chunks


@gluon.jit
def _stage_query(q_smem, chunks, ROWS: gl.constexpr):
    """The query as two e4m3 terms into ``q_smem`` (NUM_CHUNKS, 2 ROWS, CHUNK): row ``ROWS * k + n``
    is term k of row n times the power of two that puts the row's largest magnitude in [128, 256);
    returns that multiplier (ROWS,) float32."""
    rows_l: gl.constexpr = gl.SliceLayout(1, chunks[0].type.layout)
    amax = gl.zeros([ROWS], gl.float32, rows_l)
    for c in gl.static_range(NUM_CHUNKS):
        amax = gl.maximum(amax, gl.max(gl.abs(chunks[c]), axis=1))
    exponent = gl.maximum((amax.to(gl.int32, bitcast=True) >> 23) & 0xFF, 7)
    mult = ((261 - exponent) << 23).to(gl.float32, bitcast=True)
    for c in gl.static_range(NUM_CHUNKS):
        y = chunks[c] * mult[:, None]
        hi = y.to(gl.float8e4nv)
        lo = (y - hi.to(gl.float32)).to(gl.float8e4nv)
        both = gl.reshape(gl.permute(gl.join(_fp8_operand_order(hi), _fp8_operand_order(lo)), (2, 0, 1)),
                          [2 * ROWS, CHUNK])
        q_smem.index(c).store(both)
    fence_async_shared()
    return mult


@gluon.jit
def _p_terms(w, p_hi, p_lo):
    """The value product's weights ``w`` (TILE, ROWS) (at most 1) as two e4m3 terms of ``P_SCALE *
    w``, each stored (ROWS, TILE) K-major with its tokens in ``_token_order``."""
    y = w * P_SCALE
    hi = y.to(gl.float8e4nv)
    lo = (y - hi.to(gl.float32)).to(gl.float8e4nv)
    p_hi.store(_token_order(gl.permute(hi, (1, 0))))
    p_lo.store(_token_order(gl.permute(lo, (1, 0))))


@gluon.jit
def _value_products(v_raw, slot, p_hi, p_lo, scaled, ROWS: gl.constexpr):
    """``O^T = scaled + V^T P''^T`` from the e4m3 value tile (``decode_tma``'s fp8 staging): per
    chunk pair the even and the odd columns' 8-bit operands, each against both terms of P'', the
    products from zero and added to ``scaled`` in float32."""
    a_l: gl.constexpr = _fp8_operand_layout(ROWS)
    acc8_l: gl.constexpr = _fp8_acc_layout(ROWS)
    acc_l: gl.constexpr = score_layout(ROWS)
    acc = ()
    for p in gl.static_range(VALUE_CHUNKS // 2):
        cols = gl.convert_layout(_value_columns(FMT_FP8, v_raw, slot, p, ROWS), _pairs_layout(ROWS),
                                 assert_trivial=True)
        even, odd = gl.inline_asm_elementwise(SPLIT_ASM, "=r,=r,r,r", [cols], dtype=(gl.float8e4nv, gl.float8e4nv),
                                              is_pure=True, pack=4)
        even = gl.convert_layout(_token_order(even), a_l, assert_trivial=True)
        odd = gl.convert_layout(_token_order(odd), a_l, assert_trivial=True)
        zero = gl.zeros([CHUNK, ROWS], gl.float32, acc8_l)
        e = warpgroup_mma(even, p_hi.permute((1, 0)), zero, use_acc=False, is_async=True)
        o = warpgroup_mma(odd, p_hi.permute((1, 0)), zero, use_acc=False, is_async=True)
        e = warpgroup_mma(even, p_lo.permute((1, 0)), e, is_async=True)
        o = warpgroup_mma(odd, p_lo.permute((1, 0)), o, is_async=True)
        e, o = warpgroup_mma_wait(0, deps=(e, o))
        acc = acc + (scaled[2 * p] + gl.convert_layout(e, acc_l, assert_trivial=True),
                     scaled[2 * p + 1] + gl.convert_layout(o, acc_l, assert_trivial=True))
    return acc


@gluon.jit
def mla_decode_hopper_kernel(
    q_ptr, stride_qt, stride_qh,
    kv_ptr, kv_stride, sc_ptr, sc_stride, fp8_scale_ptr,
    kv_indptr, qo_indptr,
    pages_ptr, page_indptr, page_stride, max_pages, num_pages, page_shift,
    out_ptr, stride_ot, stride_oh, lse_ptr, stride_lt,
    part_o_ptr, part_lse_ptr, counter_ptr,
    batch, sm_scale,
    H: gl.constexpr, ROWS: gl.constexpr, FORMAT: gl.constexpr, BLOCK_B: gl.constexpr, C0: gl.constexpr,
    WRITE_LSE: gl.constexpr, PAGED: gl.constexpr, SMALL_PAGES: gl.constexpr,
):
    """``decode.mla_decode_hopper_kernel``'s arguments and grid; MXFP4 only."""
    gl.static_assert(ROWS == 16, "the Hopper kernel covers 16 query rows per request")
    gl.static_assert(FORMAT == FMT_MXFP4, "an MXFP4 variant")
    acc_l: gl.constexpr = score_layout(ROWS)
    s2_l: gl.constexpr = _fp8_acc_layout(2 * ROWS)
    b_l: gl.constexpr = gl.NVMMASharedLayout(swizzle_byte_width=64, element_bitwidth=8, rank=2)
    q_smem = gl.allocate_shared_memory(gl.float8e4nv, [NUM_CHUNKS, 2 * ROWS, CHUNK], b_l)
    v_raw = gl.allocate_shared_memory(gl.int32, [VALUE_CHUNKS // 2, 2, TILE, 16], staged_chunks_layout(16))
    p_hi = gl.allocate_shared_memory(gl.float8e4nv, [ROWS, TILE], b_l)
    p_lo = gl.allocate_shared_memory(gl.float8e4nv, [ROWS, TILE], b_l)
    red_smem = gl.allocate_shared_memory(gl.float32, [4, ROWS, 2], gl.SwizzledSharedLayout(1, 1, 1, [2, 1, 0]))

    pid = gl.program_id(0)
    num_programs = gl.num_programs(0)
    bi, cost, cum, total, u_begin, u_end = _program_units(pid, num_programs, kv_indptr, page_indptr, max_pages,
                                                          page_shift, batch, BLOCK_B, C0, PAGED)
    n = gl.arange(0, ROWS, layout=gl.SliceLayout(0, acc_l))
    dcol = 2 * gl.arange(0, CHUNK, layout=gl.SliceLayout(1, acc_l))
    r_s = gl.arange(0, TILE, layout=gl.SliceLayout(1, acc_l))

    if u_begin < u_end:
        b_first = gl.sum((cum <= u_begin).to(gl.int32), axis=0)
        b_last = gl.sum((cum < u_end).to(gl.int32), axis=0)
        for b in range(b_first, b_last + 1):
            start_b, cum_b, first, nparts = _request_bounds(b, bi, cum, cost, num_programs, total)
            first_row, kv_len = paging.request_tokens(b, kv_indptr, page_indptr, page_stride, max_pages, page_shift,
                                                      PAGED)
            q_lo = gl.load(qo_indptr + b)
            q_len = gl.load(qo_indptr + b + 1) - q_lo
            t_begin, t_end = _piece_tiles(u_begin, u_end, start_b, cum_b, kv_len, C0)

            q_rows = _load_query_rows(q_ptr, stride_qt, stride_qh, q_lo, q_len, H, ROWS)
            page = _tile_pages(PAGED, pages_ptr, first_row, kv_len, t_begin, t_begin < t_end, page_shift)
            row_off, sc_off, ok = _tile_rows(PAGED, first_row, kv_len, t_begin, t_begin < t_end, page, num_pages,
                                             page_shift, kv_stride, sc_stride)
            raw = _load_tile(kv_ptr, sc_ptr, row_off, sc_off, ok)
            page = _tile_pages(PAGED, pages_ptr, first_row, kv_len, t_begin + 1, t_begin + 1 < t_end, page_shift)
            page2 = _tile_pages(PAGED, pages_ptr, first_row, kv_len, t_begin + 2, t_begin + 2 < t_end, page_shift)
            q_mult = _stage_query(q_smem, q_rows, ROWS)
            qk = (sm_scale * LOG2E) / gl.convert_layout(q_mult, gl.SliceLayout(0, acc_l))
            last_visible = kv_len - q_len + n // H
            row_ok = n < q_len * H

            m_i = gl.full([ROWS], float("-inf"), gl.float32, gl.SliceLayout(0, acc_l))
            m2_i = gl.full([ROWS], float("-inf"), gl.float32, gl.SliceLayout(0, acc_l))
            l_acc = gl.zeros([TILE, ROWS], gl.float32, acc_l)
            st = gl.zeros([TILE, 2 * ROWS], gl.float32, s2_l)
            acc = ()
            for c in gl.static_range(VALUE_CHUNKS):
                acc = acc + (gl.zeros([CHUNK, ROWS], gl.float32, acc_l), )
            for t in range(t_begin, t_end):
                row_off, sc_off, ok = _tile_rows(PAGED, first_row, kv_len, t + 1, t + 1 < t_end, page, num_pages,
                                                 page_shift, kv_stride, sc_stride)
                page = page2
                page2 = _tile_pages(PAGED, pages_ptr, first_row, kv_len, t + 3, t + 3 < t_end, page_shift)
                r = token_exponents(raw)
                nxt = ()
                pending = ()
                for c in gl.static_range(NUM_CHUNKS):
                    keys, words = _decode_chunk(raw[c][0], raw[c][1], r, ROWS)
                    nxt = nxt + (mxfp4.load_chunk(kv_ptr, row_off, sc_ptr, sc_off, ok, c), )
                    if c < VALUE_CHUNKS:
                        if c % 2 == 0:
                            pending = words
                        else:
                            pair = gl.permute(gl.join(pending, words), (2, 0, 1))
                            v_raw.index(c // 2 + _opaque_zero(t)).store(pair)
                    q_c = q_smem.index(c + _opaque_zero(t))
                    st = warpgroup_mma(keys, q_c.permute((1, 0)), st, use_acc=c > 0, is_async=True)
                    if c > 0:
                        st = warpgroup_mma_wait(1, deps=(st, ))
                raw = nxt
                st = warpgroup_mma_wait(0, deps=(st, ))
                # Columns ROWS k + n of the product are term k of query row n.
                hi_t, lo_t = gl.split(gl.permute(gl.reshape(st, [TILE, 2, ROWS]), (0, 2, 1)))
                s_raw = gl.convert_layout(hi_t + lo_t, acc_l, assert_trivial=True)
                pos = t * TILE + r_s
                visible = (pos[:, None] < kv_len) & (pos[:, None] <= last_visible[None, :])
                r_acc = gl.convert_layout(r, gl.SliceLayout(1, acc_l))
                row_mult = (r_acc << 23).to(gl.float32, bitcast=True)
                s = gl.where(visible, s_raw * row_mult[:, None] * qk[None, :], float("-inf"))
                sr = s + (r_acc - 127).to(gl.float32)[:, None]
                tm, tm2 = tile_max_pair(s, sr, red_smem, ROWS)
                m_new = gl.maximum(m_i, tm)
                m2_new = gl.maximum(m2_i, tm2)
                m_safe = gl.where(m_new == float("-inf"), 0.0, m_new)
                m2_safe = gl.where(m2_new == float("-inf"), 0.0, m2_new)
                p = gl.exp2(s - m_safe[None, :])
                alpha = gl.exp2(m_i - m_safe)
                alpha2 = gl.exp2(m2_i - m2_safe)
                l_acc = l_acc * alpha[None, :] + p
                m_i = m_new
                m2_i = m2_new
                scaled = ()
                for c in gl.static_range(VALUE_CHUNKS):
                    scaled = scaled + (acc[c] * alpha2[None, :], )
                _p_terms(gl.exp2(sr - m2_safe[None, :]), p_hi, p_lo)
                fence_async_shared()
                acc = _value_products(v_raw, _opaque_zero(t), p_hi, p_lo, scaled, ROWS)
            inv_l, lse2 = _finish(m_i, gl.sum(l_acc, axis=0))
            m_safe = gl.where(m_i == float("-inf"), 0.0, m_i)
            m2_safe = gl.where(m2_i == float("-inf"), 0.0, m2_i)
            _write_request(acc, inv_l, lse2, gl.exp2(m2_safe - m_safe) / P_SCALE, n, dcol, PAIR_COLUMNS, row_ok, b,
                           b_first, pid, num_programs, total, u_begin, start_b, first, nparts, q_lo, q_len, out_ptr,
                           stride_ot, stride_oh, lse_ptr, stride_lt, part_o_ptr, part_lse_ptr, counter_ptr, batch, H,
                           ROWS, WRITE_LSE)


if __name__ == "__main__":
    if "--compile" in sys.argv:
        from hopper_variants import print_compile_facts

        print_compile_facts(__file__, [(FMT_MXFP4.value, 0), (FMT_MXFP4.value, 1)],
                            ops=("PRMT", "F2FP", "LOP3", "IMAD", "QGMMA", "LDSM", "STS", "LDG", "BAR", "SHFL", "F2I",
                                 "I2F", "MOV", "LDL", "STL"))
