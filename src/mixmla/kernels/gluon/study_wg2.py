"""STUDY VARIANT (issue 13, design-log step 43): the Hopper decode kernel with two warpgroups per
program that split the key and value columns. To be promoted into ``decode`` or deleted after
its GPU round (``bench/studies/hopper_variants.py OUT study_wg2``); nothing in the library
imports it.

Same signature, work split, grid (two programs per SM) and merge as ``decode``; what changes is
the inside of a program. A program is two warpgroups (``gl.warp_specialize``: the default
partition and one worker of 4 warps, both running ``_half``), each holding half of the state of
the shipped program: warpgroup ``h`` loads and decodes key chunks ``KEY_CHUNKS[h]`` (0-3, or 4-7
and the rope chunk 8) one tile ahead in registers, issues their score products into a partial
``S_h^T`` (64 tokens x 16 rows), and owns value columns ``256 h .. 256 h + 255`` (4 accumulators,
32 registers instead of 64). Per tile the two partial scores meet in shared memory (one mbarrier
per tile, double-buffered by tile parity); both warpgroups then add them (the sum is commutative,
so both get the same bits), run the same online softmax on the full scores, and each issues the
value product of its own 256 columns from its own copy of P^T. With 128 registers per thread,
two programs per SM are four warpgroups (16 warps) per SM instead of two, so the dependent chain
of one warpgroup's tile (decode, scores, maximum, probabilities, value product) is hidden by
three others instead of one.

At the end of a request each warpgroup writes its 256 columns (the first also the log-sum-exp);
a request cut into pieces counts two arrivals per piece, and the warpgroup that arrives last
merges all 512 columns with ``decode._merge_parts`` (same order, same bits as the shipped merge).
The scores are the shipped kernel's sum split in two chains (keys 0-255, keys 256-575) and added,
so the outputs are not bitwise the shipped kernel's (``same`` False in the study), only within
the strict check; each run is deterministic.

Launch: ``NUM_WARPS`` (the default partition; the worker adds 4 more) and ``MAX_REGISTERS`` below,
``PROGRAMS_PER_SM`` programs per SM, the shipped workspace.
"""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (fence_async_shared, mbarrier, warpgroup_mma,
                                                               warpgroup_mma_init, warpgroup_mma_wait)

from ..constants import FMT_FP8, FMT_MXFP4, LN2, LOG2E
from . import mxfp4, paging
from .decode import (VALUE_DIM, _add, _decode_chunk, _fence_gpu, _finish, _load_chunk, _merge_parts, _opaque_zero,
                     _piece_count, _program_of, _range_bound, _stage_query, _tile_max, _tile_pages, _tile_rows)
from .layouts import (CHUNK, NUM_CHUNKS, TILE, VALUE_CHUNKS, chunk_column, p_layout, q_layout, score_layout,
                      to_key_operand, v_layout)

#: Launch parameters the study reads (``hopper_variants.py``): warps of the default partition
#: (the kernel has 2 x 4), the register cap of every thread (2 programs x 256 threads x 128 = 64 K),
#: programs per SM.
NUM_WARPS = 4
MAX_REGISTERS = 128
WORKER_REGISTERS = gl.constexpr(128)
PROGRAMS_PER_SM = 2

#: Value chunks per warpgroup; warpgroup h owns value chunks HALF_VALUE_CHUNKS * h .. + 3 and key
#: chunks KEY_LO[h] .. KEY_HI[h] - 1 (the second also the rope chunk).
HALF_VALUE_CHUNKS = gl.constexpr(4)
#: Key chunks whose score product may be in flight while the next one decodes (2: 32 registers
#: of key operands, as shipped; 1: 16, the product waited for before the next decode).
KEY_DEPTH = gl.constexpr(1)
#: How many of a warpgroup's chunks of the next tile are loaded after the tile's softmax instead
#: of right after the same chunk of this tile is decoded.
LATE_LOADS = gl.constexpr(2)
#: The score products of the value chunks read the keys from their stored copy in shared memory
#: (A operand from shared memory) instead of from the decoded registers.
KEYS_FROM_SMEM = gl.constexpr(True)
#: MXFP4 decode tables made from a uniform zero (uniform registers, moved out before each use:
#: more instructions, 4 fewer vector registers) instead of a zero read from shared memory.
UNIFORM_TABLES = gl.constexpr(False)


@gluon.jit
def _pair_sum(p):
    """(TILE, ROWS) scores-layout values -> (TILE // 2, ROWS): token rows 16w + r and 16w + 8 + r
    added, which one thread holds (a register bit of ``score_layout``): no data moves."""
    R: gl.constexpr = p.shape[1]
    return gl.reshape(gl.sum(gl.reshape(p, [4, 2, 8, R]), axis=1), [TILE // 2, R])


@gluon.jit
def _half(HALF: gl.constexpr, q_ptr, stride_qt, stride_qh, kv_ptr, kv_stride, sc_ptr, sc_stride, fp8_scale_ptr,
          kv_indptr, qo_indptr, pages_ptr, page_indptr, page_stride, max_pages, num_pages, page_shift, out_ptr,
          stride_ot, stride_oh, lse_ptr, stride_lt, part_o_ptr, part_lse_ptr, counter_ptr, batch, sm_scale,
          u_begin, u_end, total, b_first, b_last, cum_smem,
          q_smem, v_bufs, p_all, red_smem, x_mine, x_other, bars, l_smem, l_bars, zero_smem,
          H: gl.constexpr, ROWS: gl.constexpr, FORMAT: gl.constexpr, BLOCK_B: gl.constexpr, C0: gl.constexpr,
          WRITE_LSE: gl.constexpr, PAGED: gl.constexpr):
    """One warpgroup's share of a program (``HALF`` 0 or 1): the shipped program's loop over its
    range's segments, with its own key chunks, value columns and buffers (``v_bufs``: its 4 value
    buffers; ``x_mine`` / ``x_other``: (2, TILE, ROWS) float32 partial scores by tile parity)."""
    C_LO: gl.constexpr = HALF_VALUE_CHUNKS * HALF
    C_HI: gl.constexpr = HALF_VALUE_CHUNKS + (NUM_CHUNKS - HALF_VALUE_CHUNKS) * HALF
    acc_l: gl.constexpr = score_layout(ROWS)
    MMA_DT: gl.constexpr = gl.float16 if FORMAT == FMT_FP8 else gl.bfloat16

    pid = gl.program_id(0)
    num_programs = gl.num_programs(0)
    one: gl.constexpr = gl.BlockedLayout([1], [32], [4], [0])

    kscale = 1.0
    tables = ()
    if FORMAT == FMT_FP8:
        kscale = gl.load(fp8_scale_ptr)
    else:
        if UNIFORM_TABLES:
            tables = mxfp4.decode_tables(_opaque_zero(pid))
        else:
            tables = mxfp4.decode_tables(gl.sum(zero_smem.load(one), axis=0))
    n = gl.arange(0, ROWS, layout=gl.SliceLayout(0, acc_l))
    dcol = chunk_column(gl.arange(0, CHUNK, layout=gl.SliceLayout(1, acc_l)))
    r_s = gl.arange(0, TILE, layout=gl.SliceLayout(1, acc_l))
    it = 0  # tiles done by this program so far: the exchange buffers' parity and phase
    rq = 0  # requests done by this program so far: the row-sum hand-over's phase

    if u_begin < u_end:
        for b in range(b_first, b_last + 1):
            cum_b = gl.sum(cum_smem.index(b).load(one), axis=0)
            first_row, kv_len = paging.request_tokens(b, kv_indptr, page_indptr, page_stride, max_pages, page_shift,
                                                      PAGED)
            start_b = cum_b - ((kv_len + TILE - 1) // TILE + C0)
            q_lo = gl.load(qo_indptr + b)
            q_len = gl.load(qo_indptr + b + 1) - q_lo
            n_tiles = (kv_len + TILE - 1) // TILE
            t_begin = gl.minimum(gl.maximum(gl.maximum(u_begin, start_b) - start_b - C0, 0), n_tiles)
            t_end = gl.minimum(gl.maximum(gl.minimum(u_end, cum_b) - start_b - C0, 0), n_tiles)
            first = _program_of(start_b, num_programs, total)
            nparts = _piece_count(first, _program_of(cum_b - 1, num_programs, total), cum_b - start_b, num_programs,
                                  total)

            page = _tile_pages(FORMAT, PAGED, pages_ptr, first_row, kv_len, t_begin, t_begin < t_end, page_shift)
            row_off, sc_off, ok = _tile_rows(FORMAT, PAGED, first_row, kv_len, t_begin, t_begin < t_end, page,
                                             num_pages, page_shift, kv_stride, sc_stride)
            raw = ()
            for c in gl.static_range(C_LO, C_HI):
                raw = raw + (_load_chunk(FORMAT, kv_ptr, sc_ptr, row_off, sc_off, ok, c), )
            page = _tile_pages(FORMAT, PAGED, pages_ptr, first_row, kv_len, t_begin + 1, t_begin + 1 < t_end,
                               page_shift)
            q_mult = _stage_query(FORMAT, q_smem, q_ptr, stride_qt, stride_qh, q_lo, q_len, H, ROWS, C_LO, C_HI)
            qk = (sm_scale * LOG2E * kscale) / gl.convert_layout(q_mult, gl.SliceLayout(0, acc_l))
            last_visible = kv_len - q_len + n // H
            row_ok = n < q_len * H

            m_i = gl.full([ROWS], float("-inf"), gl.float32, gl.SliceLayout(0, acc_l))
            # Row sums, kept as each thread's partial over its two token rows (4 registers, not 8).
            l_acc = _pair_sum(gl.zeros([TILE, ROWS], gl.float32, acc_l))
            st = gl.zeros([TILE, ROWS], gl.float32, acc_l)
            acc = ()
            for c in gl.static_range(HALF_VALUE_CHUNKS):
                acc = acc + (warpgroup_mma_init(gl.zeros([CHUNK, ROWS], gl.float32, acc_l)), )
            for t in range(t_begin, t_end):
                acc = warpgroup_mma_wait(0, deps=acc)
                row_off, sc_off, ok = _tile_rows(FORMAT, PAGED, first_row, kv_len, t + 1, t + 1 < t_end, page,
                                                 num_pages, page_shift, kv_stride, sc_stride)
                page = _tile_pages(FORMAT, PAGED, pages_ptr, first_row, kv_len, t + 2, t + 2 < t_end, page_shift)
                nxt = ()
                if KEYS_FROM_SMEM:
                    # Value chunks: decoded, stored, and their score products read the stored
                    # copy (no key registers live past the store; the rope chunk from registers).
                    for i in gl.static_range(HALF_VALUE_CHUNKS):
                        v_bufs[i].index(0).store(to_key_operand(_decode_chunk(FORMAT, raw[i], tables), ROWS))
                        if i < C_HI - C_LO - LATE_LOADS:
                            nxt = nxt + (_load_chunk(FORMAT, kv_ptr, sc_ptr, row_off, sc_off, ok, C_LO + i), )
                    fence_async_shared()
                    z = _opaque_zero(t)
                    for i in gl.static_range(HALF_VALUE_CHUNKS):
                        st = warpgroup_mma(v_bufs[i].index(z), q_smem.index(C_LO + i + z).permute((1, 0)), st,
                                           use_acc=i > 0, is_async=True)
                    for i in gl.static_range(HALF_VALUE_CHUNKS, C_HI - C_LO):
                        keys = to_key_operand(_decode_chunk(FORMAT, raw[i], tables), ROWS)
                        if i < C_HI - C_LO - LATE_LOADS:
                            nxt = nxt + (_load_chunk(FORMAT, kv_ptr, sc_ptr, row_off, sc_off, ok, C_LO + i), )
                        st = warpgroup_mma(keys, q_smem.index(C_LO + i + z).permute((1, 0)), st, is_async=True)
                        st = warpgroup_mma_wait(0, deps=(st, ))
                else:
                    for i in gl.static_range(C_HI - C_LO):
                        keys = to_key_operand(_decode_chunk(FORMAT, raw[i], tables), ROWS)
                        if i < C_HI - C_LO - LATE_LOADS:
                            nxt = nxt + (_load_chunk(FORMAT, kv_ptr, sc_ptr, row_off, sc_off, ok, C_LO + i), )
                        if C_LO + i < VALUE_CHUNKS:
                            v_bufs[i].index(0).store(keys)
                        q_c = q_smem.index(C_LO + i + _opaque_zero(t))
                        st = warpgroup_mma(keys, q_c.permute((1, 0)), st, use_acc=i > 0, is_async=True)
                        if KEY_DEPTH == 1:
                            st = warpgroup_mma_wait(0, deps=(st, ))
                        elif i > 0:
                            st = warpgroup_mma_wait(1, deps=(st, ))
                st = warpgroup_mma_wait(0, deps=(st, ))
                # The partial scores meet: each warpgroup posts its own, then adds the other's.
                parity = it & 1
                x_mine.index(parity).store(st)
                gl.thread_barrier()
                mbarrier.arrive(bars.index(parity))
                mbarrier.wait(bars.index(parity), (it >> 1) & 1)
                st = st + x_other.index(parity).load(acc_l)
                it += 1
                pos = t * TILE + r_s
                visible = (pos[:, None] < kv_len) & (pos[:, None] <= last_visible[None, :])
                s = gl.where(visible, st * qk[None, :], float("-inf"))
                m_new = gl.maximum(m_i, _tile_max(s, red_smem, ROWS))
                m_safe = gl.where(m_new == float("-inf"), 0.0, m_new)
                p = gl.exp2(s - m_safe[None, :])
                alpha = gl.exp2(m_i - m_safe)
                if HALF == 0:
                    l_acc = l_acc * gl.convert_layout(alpha, gl.SliceLayout(0, l_acc.type.layout))[None, :] + _pair_sum(p)
                m_i = m_new
                scaled = ()
                for c in gl.static_range(HALF_VALUE_CHUNKS):
                    scaled = scaled + (acc[c] * alpha[None, :], )
                z = _opaque_zero(t)
                p_smem = p_all.index(z)
                p_smem.store(p.to(MMA_DT))
                fence_async_shared()
                acc = ()
                for c in gl.static_range(HALF_VALUE_CHUNKS):
                    acc = acc + (warpgroup_mma(v_bufs[c].index(z).permute((1, 0)), p_smem, scaled[c], is_async=True), )
                # The last chunks of the next tile are loaded only now: their registers are free
                # through the exchange and the softmax (they still have most of a tile to arrive).
                for i in gl.static_range(C_HI - C_LO - LATE_LOADS, C_HI - C_LO):
                    nxt = nxt + (_load_chunk(FORMAT, kv_ptr, sc_ptr, row_off, sc_off, ok, C_LO + i), )
                raw = nxt
            acc = warpgroup_mma_wait(0, deps=acc)
            # Only the first warpgroup keeps the row sums; it hands 1 / l to the second through
            # shared memory (one slot, full and empty mbarriers: a request may have no tiles here,
            # so the exchange of scores does not order consecutive hand-overs).
            if HALF == 0:
                inv_l, lse2 = _finish(m_i, gl.convert_layout(gl.sum(l_acc, axis=0), gl.SliceLayout(0, acc_l)))
                mbarrier.wait(l_bars.index(1), (rq & 1) ^ 1)
                l_smem.store(inv_l)
                gl.thread_barrier()
                mbarrier.arrive(l_bars.index(0))
            else:
                mbarrier.wait(l_bars.index(0), rq & 1)
                inv_l = l_smem.load(gl.SliceLayout(0, acc_l))
                gl.thread_barrier()
                mbarrier.arrive(l_bars.index(1))
                lse2 = inv_l
            rq += 1
            factor = (inv_l * kscale)[None, :]
            tok = (q_lo + n // H).to(gl.int64)
            col0: gl.constexpr = CHUNK * C_LO
            if nparts == 1:
                out_rows = out_ptr + tok * stride_ot + (n % H) * stride_oh
                for c in gl.static_range(HALF_VALUE_CHUNKS):
                    gl.store(out_rows[None, :] + (col0 + CHUNK * c + dcol)[:, None], (acc[c] * factor).to(gl.bfloat16),
                             mask=row_ok[None, :])
                if WRITE_LSE and HALF == 0:
                    gl.store(lse_ptr + tok * stride_lt + n % H, lse2 * LN2, mask=row_ok)
            else:
                slot = 2 * pid + (b != b_first).to(gl.int32)
                part_rows = part_o_ptr + (slot * ROWS + n).to(gl.int64) * VALUE_DIM
                for c in gl.static_range(HALF_VALUE_CHUNKS):
                    gl.store(part_rows[None, :] + (col0 + CHUNK * c + dcol)[:, None], acc[c] * factor)
                if HALF == 0:
                    gl.store(part_lse_ptr + slot * ROWS + n, lse2)
                _fence_gpu()
                gl.thread_barrier()
                # Two arrivals per piece (one per warpgroup); the last merges.
                done = gl.atomic_add(counter_ptr + b, 1, sem="acq_rel", scope="gpu")
                if done == 2 * nparts - 1:
                    _fence_gpu()
                    _merge_parts(part_o_ptr, part_lse_ptr, out_ptr, stride_ot, stride_oh, lse_ptr, stride_lt, q_lo,
                                 q_len, first, nparts, start_b, num_programs, total, H, ROWS, WRITE_LSE)
                    gl.store(counter_ptr + b, 0)


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
    WRITE_LSE: gl.constexpr, PAGED: gl.constexpr,
):
    """``decode.mla_decode_hopper_kernel``'s contract; 8 warps per program (two partitions)."""
    gl.static_assert(ROWS == 16, "the Hopper kernel covers 16 query rows per request")
    MMA_DT: gl.constexpr = gl.float16 if FORMAT == FMT_FP8 else gl.bfloat16
    q_smem = gl.allocate_shared_memory(MMA_DT, [NUM_CHUNKS, ROWS, CHUNK], q_layout())
    v_bufs = ()
    for c in gl.static_range(VALUE_CHUNKS):
        v_bufs = v_bufs + (gl.allocate_shared_memory(MMA_DT, [1, TILE, CHUNK], v_layout()), )
    x_l: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [1, 0])
    red_l: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [1, 0])
    p0 = gl.allocate_shared_memory(MMA_DT, [1, TILE, ROWS], p_layout(ROWS))
    p1 = gl.allocate_shared_memory(MMA_DT, [1, TILE, ROWS], p_layout(ROWS))
    red0 = gl.allocate_shared_memory(gl.float32, [4, ROWS], red_l)
    red1 = gl.allocate_shared_memory(gl.float32, [4, ROWS], red_l)
    x0 = gl.allocate_shared_memory(gl.float32, [2, TILE, ROWS], x_l)
    x1 = gl.allocate_shared_memory(gl.float32, [2, TILE, ROWS], x_l)
    bars = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(2):
        mbarrier.init(bars.index(i), count=2)
    l_smem = gl.allocate_shared_memory(gl.float32, [ROWS], gl.SwizzledSharedLayout(1, 1, 1, [0]))
    l_bars = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())  # full, empty
    for i in gl.static_range(2):
        mbarrier.init(l_bars.index(i), count=1)
    one: gl.constexpr = gl.BlockedLayout([1], [32], [4], [0])
    zero_smem = gl.allocate_shared_memory(gl.int32, [1], gl.SwizzledSharedLayout(1, 1, 1, [0]),
                                          gl.zeros([1], gl.int32, one))
    # The work split (``decode``'s), once for both partitions: the per-request prefix sums go to
    # shared memory, so no partition keeps BLOCK_B-long vectors in registers through its loop.
    pid = gl.program_id(0)
    num_programs = gl.num_programs(0)
    bl: gl.constexpr = gl.BlockedLayout([BLOCK_B // 128], [32], [4], [0])
    bi = gl.arange(0, BLOCK_B, layout=bl)
    live_b = bi < batch
    lens = paging.request_lengths(bi, live_b, kv_indptr, page_indptr, max_pages, page_shift, PAGED)
    cost = gl.where(live_b, (lens + TILE - 1) // TILE + C0, 0)
    cum = gl.associative_scan(cost, 0, _add)
    total = gl.sum(cost, axis=0)
    u_begin = _range_bound(pid, num_programs, total)
    u_end = _range_bound(pid + 1, num_programs, total)
    b_first = gl.sum((cum <= u_begin).to(gl.int32), axis=0)
    b_last = gl.sum((cum < u_end).to(gl.int32), axis=0)
    flat: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [0])
    cum_smem = gl.allocate_shared_memory(gl.int32, [BLOCK_B], flat, cum)._reinterpret(gl.int32, [BLOCK_B, 1], flat)
    # One literal tuple per partition (adding tuples would turn the constexprs into plain ints).
    gl.warp_specialize([
        (_half, (0, q_ptr, stride_qt, stride_qh, kv_ptr, kv_stride, sc_ptr, sc_stride, fp8_scale_ptr, kv_indptr,
                 qo_indptr, pages_ptr, page_indptr, page_stride, max_pages, num_pages, page_shift, out_ptr, stride_ot,
                 stride_oh, lse_ptr, stride_lt, part_o_ptr, part_lse_ptr, counter_ptr, batch, sm_scale,
                 u_begin, u_end, total, b_first, b_last, cum_smem, q_smem,
                 (v_bufs[0], v_bufs[1], v_bufs[2], v_bufs[3]), p0, red0, x0, x1, bars, l_smem, l_bars, zero_smem,
                 H, ROWS, FORMAT, BLOCK_B, C0, WRITE_LSE, PAGED)),
        (_half, (1, q_ptr, stride_qt, stride_qh, kv_ptr, kv_stride, sc_ptr, sc_stride, fp8_scale_ptr, kv_indptr,
                 qo_indptr, pages_ptr, page_indptr, page_stride, max_pages, num_pages, page_shift, out_ptr, stride_ot,
                 stride_oh, lse_ptr, stride_lt, part_o_ptr, part_lse_ptr, counter_ptr, batch, sm_scale,
                 u_begin, u_end, total, b_first, b_last, cum_smem, q_smem,
                 (v_bufs[4], v_bufs[5], v_bufs[6], v_bufs[7]), p1, red1, x1, x0, bars, l_smem, l_bars, zero_smem,
                 H, ROWS, FORMAT, BLOCK_B, C0, WRITE_LSE, PAGED)),
    ], [4], [WORKER_REGISTERS])
