"""The Hopper (sm_90a) decode kernel for contiguous fp8 caches: whole tiles staged by the copy engine
into two warpgroups of one program per SM.

The work split, the tile loop's products and softmax, and the output and merge of cut requests are
those of ``decode`` (same request walk over a persistent cooperative grid, same ``_write_request``).
What differs is where a tile's bytes come from and who holds the query:

- Each program has two warpgroups (``gl.warp_specialize``: the default partition and one worker),
  and each takes one half of every request piece's tiles. A warpgroup streams its tiles through
  its own 36 KB buffer by TMA, in three copies of a (chunk, row, word) view of the cache (chunks
  0-3, 4-7 and 8, each completing on its own mbarrier); each copy of the next tile is issued as
  soon as the current tile's chunks of that copy are read, and a chunk's words are read from shared
  memory while the previous chunk decodes. Register loads would wait behind the tile's
  shared-memory traffic in the load/store pipeline; an L2 prefetch would slow the copies.
- The query is staged once per request, by warpgroup 0, for both (warpgroup 1 computes the rows'
  multipliers of ``_stage_query`` from the same rows), which is what leaves room for the raw
  tiles: one query buffer, two value tiles, two raw tiles in 223 KB.
- At the end of a request piece, warpgroup 1 hands its half's maximum, sum and accumulators to
  warpgroup 0 through its own value buffers; warpgroup 0 merges the halves in a fixed order and
  writes the piece. Outputs are bitwise repeatable (not the bits of ``decode``: the halves are
  summed apart).

The warpgroups meet twice per request at named barriers of both (``Q_READY``: the query is
staged and the previous handoff read; ``HANDOFF``: warpgroup 1's half is in the buffers); each
warpgroup's copies complete on three mbarriers of its own, waited on with the parity of its tile
count. The copies need tensor descriptors made on the device: 512 bytes of global scratch per
program, which the launch passes from the workspace (``launch.Workspace``).
"""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (fence_async_shared, mbarrier, tma, warpgroup_mma,
                                                               warpgroup_mma_init, warpgroup_mma_wait)

from ..constants import FMT_FP8, LOG2E
from . import fp8
from .decode import (_finish, _load_query, _opaque_zero, _piece_tiles, _program_units, _query_multiplier,
                     _request_bounds, _stage_query, _tile_max, _write_request)
from .layouts import (CHUNK, NUM_CHUNKS, TILE, VALUE_CHUNKS, chunk_column, chunk_word_layout, p_layout, q_layout,
                      score_layout, to_key_operand, v_layout)

#: Registers per thread of the worker warpgroup (``setmaxnreg``); the default one takes the rest
#: of the SM's 64 K (one program of 256 threads per SM).
WORKER_REGISTERS = gl.constexpr(240)
GROUP = gl.constexpr(4)  #: chunks per copy: chunks 0-3, 4-7 and 8 are three copies
#: Global scratch a program's tensor descriptors take (Triton's ``global_scratch_size``).
SCRATCH_PER_PROGRAM = 512


#: Named barriers (of the 16 an SM has; Triton's own partitions take the lowest) that both
#: warpgroups pass once per request: the query is staged (and the previous handoff read), and
#: warpgroup 1's half is in the handoff buffers.
Q_READY = gl.constexpr("barrier.sync 8, 256; mov.u32 $0, 0;")
HANDOFF = gl.constexpr("barrier.sync 9, 256; mov.u32 $0, 0;")


@gluon.jit
def _both_warpgroups(BARRIER: gl.constexpr):
    """All 256 threads of the program meet at the named barrier of ``BARRIER`` (its PTX): every
    shared-memory access of either warpgroup before it is ordered before every access after it
    (the clobber keeps the compiler from moving memory accesses across it). ``barrier.sync``, not
    ``bar.sync``: that is the ``.aligned`` form, which needs every thread at the same instruction,
    and the warpgroups call it from their own code. A barrier of both rather than an mbarrier that
    one thread arrives at: each side would reach it at the same point anyway, and every thread's
    accesses are ordered, not only the arriving one's."""
    one: gl.constexpr = gl.BlockedLayout([1], [32], [4], [0])
    gl.inline_asm_elementwise(BARRIER, "=r,r,~{memory}",
                              [gl.full([128], 0, gl.int32, one)], dtype=gl.int32, is_pure=False, pack=1)


@gluon.jit
def _value_buffers():
    """One buffer per 64 value columns (kept apart as in ``decode``)."""
    v_bufs = ()
    for c in gl.static_range(VALUE_CHUNKS):
        v_bufs = v_bufs + (gl.allocate_shared_memory(gl.float16, [1, TILE, CHUNK], v_layout()), )
    return v_bufs


@gluon.jit
def _raw_chunk(raw8, raw1, c: gl.constexpr):
    """Chunk ``c``'s (TILE, 16) words of the staged tile."""
    flat: gl.constexpr = gl.NVMMASharedLayout(swizzle_byte_width=0, element_bitwidth=32, rank=2)
    if c < VALUE_CHUNKS:
        return raw8._reinterpret(gl.int32, [VALUE_CHUNKS * TILE, 16], flat).slice(TILE * c, TILE, dim=0)
    else:
        return raw1._reinterpret(gl.int32, [TILE, 16], flat)


@gluon.jit
def _issue_group(desc4, desc1, bars, raw8, raw1, g: gl.constexpr, row0, live):
    """Copy ``g`` (chunks 4g .. 4g+3, or chunk 8 for g = 2) of the tile of 64 cache rows from row
    ``row0``, completing on ``bars.index(g)``; nothing unless ``live``. Rows past the cache read as
    zeros; rows of the next request are masked where they are read."""
    if g < 2:
        mbarrier.expect(bars.index(g), TILE * GROUP * 64, pred=live)
        tma.async_copy_global_to_shared(desc4, [GROUP * g, row0, 0], bars.index(g),
                                        raw8.slice(GROUP * g, GROUP, dim=0), pred=live)
    else:
        mbarrier.expect(bars.index(g), TILE * 64, pred=live)
        tma.async_copy_global_to_shared(desc1, [VALUE_CHUNKS, row0, 0], bars.index(g), raw1, pred=live)


@gluon.jit
def _half(WG: gl.constexpr, q_ptr, stride_qt, stride_qh, kv_ptr, kv_stride, fp8_scale_ptr, kv_indptr, qo_indptr,
          out_ptr, stride_ot, stride_oh, lse_ptr, stride_lt, part_o_ptr, part_lse_ptr, counter_ptr, batch, sm_scale,
          q_smem, ml_smem, hand_bufs, v_bufs, p_all, red_smem, raw8, raw1, tma_bars,
          H: gl.constexpr, ROWS: gl.constexpr, BLOCK_B: gl.constexpr, C0: gl.constexpr, WRITE_LSE: gl.constexpr):
    """Warpgroup ``WG`` of a program (0: the default partition, which stages the query and writes;
    1: the worker): ``decode``'s request walk over its half of each piece's tiles. Its own shared
    buffers: ``v_bufs``, ``p_all``, ``red_smem``, ``raw8`` / ``raw1`` (the staged tile: chunks 0-7,
    chunk 8) and ``tma_bars``; shared by both: the query (``q_smem``, staged by warpgroup 0; each
    computes the rows' multipliers from the query itself) and the handoff (``ml_smem``: maximum and
    sum; ``hand_bufs``: warpgroup 1's value buffers)."""
    acc_l: gl.constexpr = score_layout(ROWS)
    pid = gl.program_id(0)
    num_programs = gl.num_programs(0)
    bi, cost, cum, total, u_begin, u_end = _program_units(pid, num_programs, kv_indptr, kv_indptr, 0, 0, batch,
                                                          BLOCK_B, C0, 0)
    kscale = gl.load(fp8_scale_ptr)
    lay3: gl.constexpr = gl.NVMMASharedLayout(swizzle_byte_width=0, element_bitwidth=32, rank=3)
    n_rows = gl.load(kv_indptr + batch)
    desc4 = tma.make_tensor_descriptor(kv_ptr, [NUM_CHUNKS, n_rows, 16], [16, kv_stride, 1], [GROUP, TILE, 16], lay3)
    desc1 = tma.make_tensor_descriptor(kv_ptr, [NUM_CHUNKS, n_rows, 16], [16, kv_stride, 1], [1, TILE, 16], lay3)
    n = gl.arange(0, ROWS, layout=gl.SliceLayout(0, acc_l))
    dcol = chunk_column(gl.arange(0, CHUNK, layout=gl.SliceLayout(1, acc_l)))
    r_s = gl.arange(0, TILE, layout=gl.SliceLayout(1, acc_l))
    r_w = gl.arange(0, TILE, layout=gl.SliceLayout(1, chunk_word_layout(4)))
    hand: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [1, 0])
    phase = 0  # completions of this warpgroup's copy mbarriers (every tile completes all three)
    if u_begin < u_end:
        b_first = gl.sum((cum <= u_begin).to(gl.int32), axis=0)
        b_last = gl.sum((cum < u_end).to(gl.int32), axis=0)
        for b in range(b_first, b_last + 1):
            start_b, cum_b, first, nparts = _request_bounds(b, bi, cum, cost, num_programs, total)
            first_row = gl.load(kv_indptr + b)
            kv_len = gl.load(kv_indptr + b + 1) - first_row
            q_lo = gl.load(qo_indptr + b)
            q_len = gl.load(qo_indptr + b + 1) - q_lo
            t_begin, t_end = _piece_tiles(u_begin, u_end, start_b, cum_b, kv_len, C0)
            mid = t_begin + (t_end - t_begin + 1) // 2
            if WG == 0:
                my_begin = t_begin
                my_end = mid
            else:
                my_begin = mid
                my_end = t_end
            for g in gl.static_range(3):
                _issue_group(desc4, desc1, tma_bars, raw8, raw1, g, first_row + my_begin * TILE, my_begin < my_end)
            q_rows = _load_query(q_ptr, stride_qt, stride_qh, q_lo, q_len, H, ROWS)
            if WG == 0:
                # Warpgroup 1 no longer reads the query buffer: its previous handoff was read at
                # the previous request's end, after its last products.
                q_mult = _stage_query(FMT_FP8, q_smem, q_rows, ROWS)
            else:
                # The same multipliers from the same rows (L2 hits), rather than from warpgroup 0
                # through shared memory.
                q_mult = _query_multiplier(q_rows, ROWS)
            _both_warpgroups(Q_READY)
            qk = (sm_scale * LOG2E * kscale) / gl.convert_layout(q_mult, gl.SliceLayout(0, acc_l))
            last_visible = kv_len - q_len + n // H
            row_ok = n < q_len * H

            m_i = gl.full([ROWS], float("-inf"), gl.float32, gl.SliceLayout(0, acc_l))
            l_acc = gl.zeros([TILE, ROWS], gl.float32, acc_l)
            st = gl.zeros([TILE, ROWS], gl.float32, acc_l)
            acc = ()
            for c in gl.static_range(VALUE_CHUNKS):
                acc = acc + (warpgroup_mma_init(gl.zeros([CHUNK, ROWS], gl.float32, acc_l)), )
            for t in range(my_begin, my_end):
                # The value product of the previous tile still reads the value buffers.
                acc = warpgroup_mma_wait(0, deps=acc)
                ok_cur = (t * TILE + r_w) < kv_len
                mbarrier.wait(tma_bars.index(0), phase)
                words = _raw_chunk(raw8, raw1, 0).load(chunk_word_layout(4))
                for c in gl.static_range(NUM_CHUNKS):
                    # The next chunk's words are read before this one decodes: otherwise every
                    # chunk waits for its shared-memory load.
                    if c + 1 < NUM_CHUNKS:
                        if (c + 1) % GROUP == 0:
                            mbarrier.wait(tma_bars.index((c + 1) // GROUP), phase)
                        nxt = _raw_chunk(raw8, raw1, c + 1).load(chunk_word_layout(4))
                    keys = to_key_operand(fp8.decode_chunk(gl.where(ok_cur[:, None], words, 0)), ROWS)
                    if c + 1 < NUM_CHUNKS:
                        words = nxt
                    if (c % GROUP == GROUP - 1) | (c == NUM_CHUNKS - 1):
                        # Every thread has read this copy's chunks: the next tile's copy goes now.
                        gl.thread_barrier()
                        _issue_group(desc4, desc1, tma_bars, raw8, raw1, c // GROUP, first_row + (t + 1) * TILE,
                                     t + 1 < my_end)
                    if c < VALUE_CHUNKS:
                        v_bufs[c].index(0).store(keys)
                    q_c = q_smem.index(c + _opaque_zero(t))
                    st = warpgroup_mma(keys, q_c.permute((1, 0)), st, use_acc=c > 0, is_async=True)
                    if c > 0:
                        st = warpgroup_mma_wait(1, deps=(st, ))
                phase = phase ^ 1
                st = warpgroup_mma_wait(0, deps=(st, ))
                pos = t * TILE + r_s
                visible = (pos[:, None] < kv_len) & (pos[:, None] <= last_visible[None, :])
                s = gl.where(visible, st * qk[None, :], float("-inf"))
                m_new = gl.maximum(m_i, _tile_max(s, red_smem, ROWS))
                m_safe = gl.where(m_new == float("-inf"), 0.0, m_new)
                p = gl.exp2(s - m_safe[None, :])
                alpha = gl.exp2(m_i - m_safe)
                l_acc = l_acc * alpha[None, :] + p
                m_i = m_new
                scaled = ()
                for c in gl.static_range(VALUE_CHUNKS):
                    scaled = scaled + (acc[c] * alpha[None, :], )
                z = _opaque_zero(t)
                p_smem = p_all.index(z)
                p_smem.store(p.to(gl.float16))
                fence_async_shared()
                acc = ()
                for c in gl.static_range(VALUE_CHUNKS):
                    acc = acc + (warpgroup_mma(v_bufs[c].index(z).permute((1, 0)), p_smem, scaled[c], is_async=True), )
            acc = warpgroup_mma_wait(0, deps=acc)
            l_i = gl.sum(l_acc, axis=0)
            if WG == 1:
                ml_smem[0].store(m_i)
                ml_smem[1].store(l_i)
                for c in gl.static_range(VALUE_CHUNKS):
                    hand_bufs[c]._reinterpret(gl.float32, [CHUNK, ROWS], hand).store(acc[c])
            _both_warpgroups(HANDOFF)
            if WG == 0:
                m_o = ml_smem[0].load(gl.SliceLayout(0, acc_l))
                l_o = ml_smem[1].load(gl.SliceLayout(0, acc_l))
                m_all = gl.maximum(m_i, m_o)
                m_safe = gl.where(m_all == float("-inf"), 0.0, m_all)
                a_mine = gl.exp2(m_i - m_safe)
                a_other = gl.exp2(m_o - m_safe)
                merged = ()
                for c in gl.static_range(VALUE_CHUNKS):
                    other = hand_bufs[c]._reinterpret(gl.float32, [CHUNK, ROWS], hand).load(acc_l)
                    merged = merged + (acc[c] * a_mine[None, :] + other * a_other[None, :], )
                inv_l, lse2 = _finish(m_all, l_i * a_mine + l_o * a_other)
                _write_request(merged, inv_l, lse2, kscale, n, dcol, row_ok, b, b_first, pid, num_programs, total,
                               u_begin, start_b, first, nparts, q_lo, q_len, out_ptr, stride_ot, stride_oh, lse_ptr,
                               stride_lt, part_o_ptr, part_lse_ptr, counter_ptr, batch, H, ROWS, WRITE_LSE)


@gluon.jit
def mla_decode_hopper_tma_kernel(
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
    """Grid: (programs,), persistent, one program per SM; two warpgroups (4 warps each) per program.

    ``decode.mla_decode_hopper_kernel``'s arguments (``compile.SIGNATURE``), for FORMAT fp8 and
    PAGED 0 only (the page-table and MXFP4 arguments are not read); kv_indptr[batch] must be the
    number of cache rows the copies may read (at most the cache's rows).
    """
    gl.static_assert(FORMAT == FMT_FP8, "the staged kernel reads fp8 caches")
    gl.static_assert(PAGED == 0, "the staged kernel reads contiguous caches")
    gl.static_assert(ROWS == 16, "the Hopper kernel covers 16 query rows per request")
    q_smem = gl.allocate_shared_memory(gl.float16, [NUM_CHUNKS, ROWS, CHUNK], q_layout())
    tbar0 = gl.allocate_shared_memory(gl.int64, [3, 1], mbarrier.MBarrierLayout())
    tbar1 = gl.allocate_shared_memory(gl.int64, [3, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(3):
        mbarrier.init(tbar0.index(i), count=1)
        mbarrier.init(tbar1.index(i), count=1)
    lay3: gl.constexpr = gl.NVMMASharedLayout(swizzle_byte_width=0, element_bitwidth=32, rank=3)
    v0 = _value_buffers()
    v1 = _value_buffers()
    p0 = gl.allocate_shared_memory(gl.float16, [1, TILE, ROWS], p_layout(ROWS))
    p1 = gl.allocate_shared_memory(gl.float16, [1, TILE, ROWS], p_layout(ROWS))
    red0 = gl.allocate_shared_memory(gl.float32, [4, ROWS], gl.SwizzledSharedLayout(1, 1, 1, [1, 0]))
    red1 = gl.allocate_shared_memory(gl.float32, [4, ROWS], gl.SwizzledSharedLayout(1, 1, 1, [1, 0]))
    raw80 = gl.allocate_shared_memory(gl.int32, [VALUE_CHUNKS, TILE, 16], lay3)
    raw81 = gl.allocate_shared_memory(gl.int32, [VALUE_CHUNKS, TILE, 16], lay3)
    raw10 = gl.allocate_shared_memory(gl.int32, [1, TILE, 16], lay3)
    raw11 = gl.allocate_shared_memory(gl.int32, [1, TILE, 16], lay3)
    ml_smem = (gl.allocate_shared_memory(gl.float32, [ROWS], gl.SwizzledSharedLayout(1, 1, 1, [0])),
               gl.allocate_shared_memory(gl.float32, [ROWS], gl.SwizzledSharedLayout(1, 1, 1, [0])))
    fence_async_shared()
    gl.thread_barrier()
    gl.warp_specialize([
        (_half, (0, q_ptr, stride_qt, stride_qh, kv_ptr, kv_stride, fp8_scale_ptr, kv_indptr, qo_indptr, out_ptr,
                 stride_ot, stride_oh, lse_ptr, stride_lt, part_o_ptr, part_lse_ptr, counter_ptr, batch, sm_scale,
                 q_smem, ml_smem, v1, v0, p0, red0, raw80, raw10, tbar0,
                 H, ROWS, BLOCK_B, C0, WRITE_LSE)),
        (_half, (1, q_ptr, stride_qt, stride_qh, kv_ptr, kv_stride, fp8_scale_ptr, kv_indptr, qo_indptr, out_ptr,
                 stride_ot, stride_oh, lse_ptr, stride_lt, part_o_ptr, part_lse_ptr, counter_ptr, batch, sm_scale,
                 q_smem, ml_smem, v1, v1, p1, red1, raw81, raw11, tbar1,
                 H, ROWS, BLOCK_B, C0, WRITE_LSE)),
    ], [4], [WORKER_REGISTERS])
