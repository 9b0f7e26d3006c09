"""MXFP4 through an e4m3 value tile with one exponent per token (design log step 103): a variant
of the shipped ``kernels/gluon/decode.py`` for ``hopper_variants.py``.

What binds the shipped MXFP4 loop is not its decode's instruction count (step 77: 15% fewer
instructions, no time) but, by elimination, the shared-memory side: the value tile is written once
and read once in bf16 (2 KB per token), the value products read their A operand from shared memory
(20 cycles each at N = 16 against 13 from registers), and the tile maximum's exchange waits
behind that traffic. This variant halves the value tile and takes the value operand from
registers, keeping everything else of ``decode`` (its work split, loads, merge, two programs of
one warpgroup per SM, one copy of the tile loop):

- Keys: per token ``t`` the largest block exponent ``r(t)``; each block's codes decode to the f16
  values ``c * 2**(s - r(t))`` by one table lookup per four values (the table depends on ``D =
  r(t) - s`` only, and is exact by arithmetic up to 13 binades: ``mxfp4_e4m3_decoder.py``) for
  the score product (A from registers, as today), and the first 512 columns also to their e4m3
  bytes (the hardware's rounding of the exact values). The query is staged in f16 with a power
  of two per row, as for fp8; the scores' accumulator rows take ``2**(r(t) - 127)``.
- Values: the e4m3 bytes of the first 512 columns are the value tile (32 KB instead of 64),
  stored as ``decode_tma`` stages a raw fp8 tile (pairs of chunks, 64-byte rows, 64-byte swizzle),
  so its value path applies unchanged: transposed 8x8 loads, one byte permute and two exact
  conversions per register into f16 A operands (``decode_tma._value_products`` for fp8).
- Softmax: two maxima per query row, ``m`` of the base-2 scores ``x`` (the normalizer) and ``m'``
  of ``x + r(t) - 127``; the value product's weights are ``P'' = 2**(x + r(t) - 127 - m')`` (at
  most 1, f16), and the output is ``2**(m' - m) * acc / l``. ``mxfp4_token_exponent.py`` ('two
  f16') measures this arithmetic against the float64 reference: 1.5e-4 on the benchmark's inputs.

Exact as ``mxfp4_token_exponent.py``'s 'two f16' emulates it, except for blocks more than 13 binades
below their token's largest, whose keys decode to zeros (their e4m3 bytes are zeros in any case).
MXFP4 only (contiguous and paged as ``decode`` reads them).

``TRITON_INTERPRET=0 PYTHONPATH=src:bench/studies python bench/studies/hopper_mxe4_variant.py --compile`` prints
registers, spills, shared memory and the tile loop's length and opcodes on any machine; on the
H200, ``hopper_variants.py OUT bench/studies/hopper_mxe4_variant.py`` times it beside the shipped
kernel with the strict check.
"""

import sys

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (fence_async_shared, warpgroup_mma, warpgroup_mma_init,
                                                               warpgroup_mma_wait)

from mixmla.kernels.constants import FMT_FP8, FMT_MXFP4, LOG2E
from mixmla.kernels.gluon import mxfp4, paging
from mixmla.kernels.gluon.decode import (_finish, _load_query, _load_tile, _opaque_zero, _piece_tiles, _program_units,
                                         _request_bounds, _stage_query, _tile_pages, _tile_rows,
                                         _write_request)
from mixmla.kernels.gluon.decode_tma import PAIR_COLUMNS, _value_products
from mixmla.kernels.gluon.layouts import (CHUNK, NUM_CHUNKS, TILE, VALUE_CHUNKS, chunk_word_layout, p_layout, q_layout,
                                          score_layout, staged_chunks_layout, to_key_operand)

from mxfp4_e4m3_decoder import E4M3_TABLES_FROM_F16, F16_BASE, F16_SHIFTS, F16_STEP, MXFP4_TO_F16X2_E4M3

DECODE_ASM = gl.constexpr(MXFP4_TO_F16X2_E4M3)
TABLES_ASM = gl.constexpr(E4M3_TABLES_FROM_F16)
#: f16 table words (``mxfp4_e4m3_decoder.f16_tables``, exact to 13 binades).
F16_BASE0 = gl.constexpr(F16_BASE[0])
F16_BASE1 = gl.constexpr(F16_BASE[1])
F16_STEP0 = gl.constexpr(F16_STEP[0])
F16_STEP1 = gl.constexpr(F16_STEP[1])
F16_MAX_SHIFT = gl.constexpr(F16_SHIFTS)
FORMATS = ("mxfp4", )


@gluon.jit
def token_exponents(raw):
    """The largest E8M0 byte of each token row of a tile's chunks (``_load_tile``), (TILE,) int32 in
    ``SliceLayout(1, SliceLayout(2, mxfp4_scale_layout()))``."""
    top = raw[0][1]
    for c in gl.static_range(1, NUM_CHUNKS):
        top = gl.maximum(top, raw[c][1])
    return gl.max(top, axis=1)


@gluon.jit
def tile_max_pair(s, sr, red_smem, ROWS: gl.constexpr):
    """``decode._tile_max`` of two score tiles at once, one exchange through shared memory (one
    barrier): the column maxima (ROWS,) of ``s`` and of ``sr`` (TILE, ROWS), ``red_smem`` (4, ROWS,
    2) float32."""
    acc_l: gl.constexpr = score_layout(ROWS)
    per_warp = gl.max(gl.reshape(gl.join(s, sr), [4, 16, ROWS, 2]), axis=1)
    red_smem.store(per_warp)
    gl.thread_barrier()
    all_l: gl.constexpr = gl.DistributedLinearLayout(
        reg_bases=[[0, 0, 1], [0, 1, 0], [0, 8, 0], [1, 0, 0], [2, 0, 0]],
        lane_bases=[[0, 2, 0], [0, 4, 0], [0, 0, 0], [0, 0, 0], [0, 0, 0]],
        warp_bases=[[0, 0, 0], [0, 0, 0]], block_bases=[], shape=[4, ROWS, 2])
    m, m2 = gl.split(gl.max(red_smem.load(all_l), axis=0))
    return gl.convert_layout(m, gl.SliceLayout(0, acc_l)), gl.convert_layout(m2, gl.SliceLayout(0, acc_l))


@gluon.jit
def chunk_tables(scale, r, TO_E4M3: gl.constexpr):
    """The decode tables (two (TILE, 8) int32 words per code word, ``chunk_word_layout(2)``) of a
    chunk's block scales ``scale`` (``mxfp4.load_chunk``) under token exponents ``r``
    (``token_exponents``): ``mxfp4_e4m3_decoder.f16_tables`` of ``D = r - scale``; with TO_E4M3,
    made into the exact e4m3 ones (``mxfp4_e4m3_decoder.E4M3_TABLES_FROM_F16``), once per token
    and block."""
    word_l: gl.constexpr = chunk_word_layout(2)
    d = gl.expand_dims(r, 1) - scale
    live = d <= F16_MAX_SHIFT
    t0 = gl.where(live, F16_BASE0 - d * F16_STEP0, 0)
    t1 = gl.where(live, F16_BASE1 - d * F16_STEP1, 0)
    if TO_E4M3:
        t0, t1 = gl.inline_asm_elementwise(TABLES_ASM, "=r,=r,r,r", [t0, t1], dtype=(gl.int32, gl.int32),
                                           is_pure=True, pack=1)
    t0 = gl.convert_layout(gl.reshape(gl.expand_dims(t0, 2).broadcast_to([TILE, 2, 4]), [TILE, 8]), word_l,
                           assert_trivial=True)
    t1 = gl.convert_layout(gl.reshape(gl.expand_dims(t1, 2).broadcast_to([TILE, 2, 4]), [TILE, 8]), word_l,
                           assert_trivial=True)
    return t0, t1


@gluon.jit
def _decode_chunk(codes, scale, r):
    """Chunk ``(codes, scale)`` of a tile (``mxfp4.load_chunk``) with token exponents ``r``
    (``token_exponents``): ``(keys, words)``, the f16 values (TILE, 64) in stored column order and
    their e4m3 bytes as (TILE, 16) int32 words in ``chunk_word_layout(4)`` (row t's 64 bytes)."""
    t0, t1 = chunk_tables(scale, r, False)
    x0, x1, x2, x3, x4, x5, x6, x7, lo, hi = gl.inline_asm_elementwise(
        DECODE_ASM, "=r,=r,=r,=r,=r,=r,=r,=r,=r,=r,=r,=r,r,r,r,r,r,r", [codes, t0, t1],
        dtype=(gl.float16, ) * 8 + (gl.int32, gl.int32), is_pure=True, pack=2)
    # As mxfp4.decode_chunk: x_b at word 2u + m holds nibble m of byte b of the thread's 8 bytes.
    j = gl.join(gl.join(gl.join(x0, x1), gl.join(x2, x3)), gl.join(gl.join(x4, x5), gl.join(x6, x7)))
    keys = gl.reshape(gl.permute(gl.reshape(j, mxfp4.JOIN_SHAPE.value), mxfp4.JOIN_ORDER.value), [TILE, 64])
    # Word 2w + h of the row's e4m3 bytes: values 4h .. 4h+3 of code word w.
    words = gl.convert_layout(gl.reshape(gl.join(lo, hi), [TILE, 16]), chunk_word_layout(4), assert_trivial=True)
    return keys, words


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
    q_smem = gl.allocate_shared_memory(gl.float16, [NUM_CHUNKS, ROWS, CHUNK], q_layout())
    # The value tile as decode_tma stages an fp8 tile (one slot): pair p of chunks at index p.
    v_raw = gl.allocate_shared_memory(gl.int32, [VALUE_CHUNKS // 2, 2, TILE, 16], staged_chunks_layout(16))
    p_all = gl.allocate_shared_memory(gl.float16, [1, TILE, ROWS], p_layout(ROWS))
    red_smem = gl.allocate_shared_memory(gl.float32, [4, ROWS, 2], gl.SwizzledSharedLayout(1, 1, 1, [2, 1, 0]))

    pid = gl.program_id(0)
    num_programs = gl.num_programs(0)
    bi, cost, cum, total, u_begin, u_end = _program_units(pid, num_programs, kv_indptr, page_indptr, max_pages,
                                                          page_shift, batch, BLOCK_B, C0, PAGED)
    n = gl.arange(0, ROWS, layout=gl.SliceLayout(0, acc_l))
    dcol = 2 * gl.arange(0, CHUNK, layout=gl.SliceLayout(1, acc_l))
    r_s = gl.arange(0, TILE, layout=gl.SliceLayout(1, acc_l))
    rows_acc: gl.constexpr = gl.SliceLayout(1, acc_l)

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

            q_rows = _load_query(q_ptr, stride_qt, stride_qh, q_lo, q_len, H, ROWS)
            page = _tile_pages(PAGED, pages_ptr, first_row, kv_len, t_begin, t_begin < t_end, page_shift)
            row_off, sc_off, ok = _tile_rows(PAGED, first_row, kv_len, t_begin, t_begin < t_end, page, num_pages,
                                             page_shift, kv_stride, sc_stride)
            raw = _load_tile(kv_ptr, sc_ptr, row_off, sc_off, ok)
            page = _tile_pages(PAGED, pages_ptr, first_row, kv_len, t_begin + 1, t_begin + 1 < t_end, page_shift)
            page2 = _tile_pages(PAGED, pages_ptr, first_row, kv_len, t_begin + 2, t_begin + 2 < t_end, page_shift)
            # The f16 query of the fp8 kernels: each row times a power of two (q_mult).
            q_mult = _stage_query(FMT_FP8, q_smem, q_rows, ROWS)
            qk = (sm_scale * LOG2E) / gl.convert_layout(q_mult, gl.SliceLayout(0, acc_l))
            last_visible = kv_len - q_len + n // H
            row_ok = n < q_len * H

            m_i = gl.full([ROWS], float("-inf"), gl.float32, gl.SliceLayout(0, acc_l))
            m2_i = gl.full([ROWS], float("-inf"), gl.float32, gl.SliceLayout(0, acc_l))
            l_acc = gl.zeros([TILE, ROWS], gl.float32, acc_l)
            st = gl.zeros([TILE, ROWS], gl.float32, acc_l)
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
                    keys, words = _decode_chunk(raw[c][0], raw[c][1], r)
                    keys = to_key_operand(keys, ROWS)
                    nxt = nxt + (mxfp4.load_chunk(kv_ptr, row_off, sc_ptr, sc_off, ok, c), )
                    if c < VALUE_CHUNKS:
                        if c % 2 == 0:
                            pending = words
                        else:
                            # One store per pair of chunks: stores to two slices of one buffer would
                            # be ordered by a barrier between them.
                            pair = gl.permute(gl.join(pending, words), (2, 0, 1))
                            v_raw.index(c // 2 + _opaque_zero(t)).store(pair)
                    q_c = q_smem.index(c + _opaque_zero(t))
                    st = warpgroup_mma(keys, q_c.permute((1, 0)), st, use_acc=c > 0, is_async=True)
                    if c > 0:
                        st = warpgroup_mma_wait(1, deps=(st, ))
                raw = nxt
                st = warpgroup_mma_wait(0, deps=(st, ))
                pos = t * TILE + r_s
                visible = (pos[:, None] < kv_len) & (pos[:, None] <= last_visible[None, :])
                # 2**(r - 127) as float32 bits; r - 127 the token's exponent.
                r_acc = gl.convert_layout(r, rows_acc)
                row_mult = (r_acc << 23).to(gl.float32, bitcast=True)
                s = gl.where(visible, st * row_mult[:, None] * qk[None, :], float("-inf"))
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
                p_smem = p_all.index(_opaque_zero(t))
                p_smem.store(gl.exp2(sr - m2_safe[None, :]).to(gl.float16))
                fence_async_shared()
                acc = _value_products(FMT_FP8, v_raw, _opaque_zero(t), q_smem, p_smem, scaled, (), ROWS)
            inv_l, lse2 = _finish(m_i, gl.sum(l_acc, axis=0))
            m_safe = gl.where(m_i == float("-inf"), 0.0, m_i)
            m2_safe = gl.where(m2_i == float("-inf"), 0.0, m2_i)
            _write_request(acc, inv_l, lse2, gl.exp2(m2_safe - m_safe), n, dcol, PAIR_COLUMNS, row_ok, b, b_first, pid,
                           num_programs, total, u_begin, start_b, first, nparts, q_lo, q_len, out_ptr, stride_ot,
                           stride_oh, lse_ptr, stride_lt, part_o_ptr, part_lse_ptr, counter_ptr, batch, H, ROWS,
                           WRITE_LSE)


if __name__ == "__main__":
    if "--compile" in sys.argv:
        from hopper_variants import print_compile_facts

        print_compile_facts(__file__, [(FMT_MXFP4.value, 0), (FMT_MXFP4.value, 1)],
                            ops=("PRMT", "F2FP", "LOP3", "IMAD", "HGMMA", "LDSM", "STS", "LDG", "BAR", "HMUL2", "SHFL"))
