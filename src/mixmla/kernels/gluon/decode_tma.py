"""The Hopper (sm_90a) decode kernel for contiguous fp8 caches: whole tiles staged by the copy engine
into two warpgroups of one program per SM, the values read from the staged bytes.

The work split, the tile loop's softmax, and the output and merge of cut requests are those of
``decode`` (same request walk over a persistent cooperative grid, same ``_write_request``). What
differs is where a tile's bytes come from, how the value product gets its operand, and who holds
the query:

- Each program has two warpgroups (``gl.warp_specialize``: the default partition and one worker),
  and each takes one half of every request piece's tiles. A warpgroup streams its tiles through
  two 36 KB buffers of its own by TMA (five copies per tile: one per pair of chunks, one of
  chunk 8, completing on the buffer's mbarrier), the next tile's copies issued as the current
  tile starts. Register loads would wait behind the tile's shared-memory traffic in the
  load/store pipeline; an L2 prefetch would slow the copies.
- The scores take the key tile from registers, decoded from the staged words as in ``decode``.
  The value product ``O^T = V^T P^T`` takes V^T from registers too: transposed 8x8 loads of the
  staged bytes (``ldmatrix.trans`` on 16-bit column pairs) give each thread two rows of a column
  pair, which one byte permute splits into the even and the odd columns (``fp8.decode_columns``),
  each an A operand of 64 columns. No decoded value is written to or read from shared memory,
  which ``decode`` spends 2 KB of shared-memory traffic per token on.
- Rows of a tile past its request (the next request's, or the copy's zeros past the cache) are
  zeroed in shared memory after the copy lands, so neither product sees them.
- The query is staged once per request, by warpgroup 0, for both (warpgroup 1 computes the rows'
  multipliers of ``_stage_query`` from the same rows).
- At the end of a request piece, warpgroup 1 hands its half's maximum, sum and accumulators to
  warpgroup 0 through a shared buffer; warpgroup 0 merges the halves in a fixed order and writes
  the piece. Outputs are bitwise repeatable (not the bits of ``decode``: the halves are summed
  apart).

The warpgroups meet twice per request at named barriers of both (``Q_READY``: the query is
staged and the previous handoff read; ``HANDOFF``: warpgroup 1's half is in the buffer). A
warpgroup's tile count gives each buffer's mbarrier parity. The copies need tensor descriptors
made on the device: 512 bytes of global scratch per program, which the launch passes from the
workspace (``launch.Workspace``).
"""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (fence_async_shared, mbarrier, tma, warpgroup_mma,
                                                               warpgroup_mma_wait)

from ..constants import FMT_FP8, LOG2E
from . import fp8
from .decode import (_finish, _load_query, _opaque_zero, _piece_tiles, _program_units, _query_multiplier,
                     _request_bounds, _stage_query, _tile_max, _write_request)
from .layouts import (CHUNK, NUM_CHUNKS, TILE, VALUE_CHUNKS, chunk_word_layout, key_operand_layout, p_layout,
                      q_layout, score_layout, staged_chunks_layout, staged_columns_layout, staged_rows_layout,
                      to_key_operand)

#: Registers per thread of the worker warpgroup (``setmaxnreg``); the default one takes the rest
#: of the SM's 64 K (one program of 256 threads per SM).
WORKER_REGISTERS = gl.constexpr(240)
SLOTS = gl.constexpr(2)  #: tile buffers per warpgroup: the next tile lands while this one is read
PAIRS = gl.constexpr(4)  #: pairs of chunks in the value columns (chunks 0-7), one copy each
#: First output column of each value accumulator (``_value_products``): accumulator c holds, in row
#: k, column ``2 * CHUNK * (c // 2) + c % 2 + 2 * k`` (the even or odd columns of chunk pair c // 2).
PAIR_COLUMNS = gl.constexpr(tuple(2 * CHUNK.value * (c // 2) + c % 2 for c in range(VALUE_CHUNKS.value)))
#: Global scratch a program's tensor descriptors take (Triton's ``global_scratch_size``).
SCRATCH_PER_PROGRAM = 512


#: Named barriers (of the 16 an SM has; Triton's own partitions take the lowest) that both
#: warpgroups pass once per request: the query is staged (and the previous handoff read), and
#: warpgroup 1's half is in the handoff buffer.
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
def _pair(raw, slot, p: gl.constexpr):
    """Chunks 2p, 2p+1 of the tile in buffer ``slot``: (2, TILE, 16) words, 64-byte swizzle."""
    return raw.index(slot * PAIRS + p)


@gluon.jit
def _pair_rows(raw, slot, p: gl.constexpr):
    """``_pair`` as (2 * TILE, 16) words: row h * TILE + r is row r of chunk 2p + h."""
    return _pair(raw, slot, p)._reinterpret(gl.int32, [2 * TILE, 16], staged_rows_layout())


@gluon.jit
def _last(last, slot):
    """Chunk 8's (TILE, 16) words of the tile in buffer ``slot``."""
    return last.index(slot)._reinterpret(gl.int32, [TILE, 16], staged_rows_layout())


@gluon.jit
def _chunk_words(raw, last, slot, c: gl.constexpr):
    """Chunk ``c``'s (TILE, 16) words of the tile in buffer ``slot``, in ``chunk_word_layout(4)``."""
    if c < VALUE_CHUNKS:
        return _pair_rows(raw, slot, c // 2).slice(TILE * (c % 2), TILE, dim=0).load(chunk_word_layout(4))
    else:
        return _last(last, slot).load(chunk_word_layout(4))


@gluon.jit
def _issue_tile(desc_pair, desc_last, bar, raw, last, slot, row0, live):
    """The copies of the tile of 64 cache rows from row ``row0`` into buffer ``slot`` (one per chunk
    pair, one of chunk 8), completing on ``bar``; nothing unless ``live``. Rows past the cache
    read as zeros; rows of the next request are zeroed after they land (``_clear_rows``)."""
    mbarrier.expect(bar, TILE * NUM_CHUNKS * CHUNK, pred=live)
    for p in gl.static_range(PAIRS):
        tma.async_copy_global_to_shared(desc_pair, [2 * p, row0, 0], bar, _pair(raw, slot, p), pred=live)
    tma.async_copy_global_to_shared(desc_last, [VALUE_CHUNKS, row0, 0], bar, last.index(slot), pred=live)


@gluon.jit
def _clear_rows(raw, last, slot, valid):
    """Zeroes rows ``valid`` .. TILE-1 of the landed tile in buffer ``slot`` (the warpgroup's
    threads then meet)."""
    wl: gl.constexpr = gl.BlockedLayout([1, 4], [8, 4], [4, 1], [1, 0])
    r = gl.arange(0, 2 * TILE, layout=gl.SliceLayout(1, wl))[:, None]
    keep = (r % TILE) < valid
    for p in gl.static_range(PAIRS):
        buf = _pair_rows(raw, slot, p)
        buf.store(gl.where(keep, buf.load(wl), 0))
    buf1 = _last(last, slot)
    keep1 = gl.arange(0, TILE, layout=gl.SliceLayout(1, wl))[:, None] < valid
    buf1.store(gl.where(keep1, buf1.load(wl), 0))
    # The zeros are read by other threads, and the buffer is later written by the copy engine.
    fence_async_shared()
    gl.thread_barrier()


@gluon.jit
def _value_products(raw, slot, p_smem, scaled, ROWS: gl.constexpr):
    """``O^T += V^T P^T`` for the tile in buffer ``slot``: VALUE_CHUNKS accumulators (CHUNK, ROWS),
    the even and odd columns of each chunk pair (``PAIR_COLUMNS``), from ``scaled`` (rescaled
    accumulators); each pair's two products run while the next pair's bytes are loaded."""
    acc = ()
    cols = _column_pairs(raw, slot, 0, ROWS)
    for p in gl.static_range(PAIRS):
        even, odd = fp8.decode_columns(cols)
        acc = acc + (warpgroup_mma(even, p_smem, scaled[2 * p], is_async=True),
                     warpgroup_mma(odd, p_smem, scaled[2 * p + 1], is_async=True))
        if p + 1 < PAIRS:
            cols = _column_pairs(raw, slot, p + 1, ROWS)
            acc = warpgroup_mma_wait(0, deps=acc)
    # Done before the next tile: products left in flight across it make the compiler spill.
    return warpgroup_mma_wait(0, deps=acc)


@gluon.jit
def _column_pairs(raw, slot, p: gl.constexpr, ROWS: gl.constexpr):
    """Chunk pair ``p`` of the tile in buffer ``slot`` as (2 * 32, TILE) int16 column pairs, row
    h * 32 + j = columns 2j, 2j+1 of chunk 2p + h (the transpose of its rows), in the value
    product's A-operand layout (``ldmatrix.trans``)."""
    pairs16 = _pair(raw, slot, p)._reinterpret(gl.int16, [2, TILE, CHUNK // 2], staged_columns_layout())
    return pairs16.permute((0, 2, 1)).reshape([CHUNK, TILE]).load(key_operand_layout(ROWS))


@gluon.jit
def _half(WG: gl.constexpr, q_ptr, stride_qt, stride_qh, kv_ptr, kv_stride, fp8_scale_ptr, kv_indptr, qo_indptr,
          out_ptr, stride_ot, stride_oh, lse_ptr, stride_lt, part_o_ptr, part_lse_ptr, counter_ptr, batch, sm_scale,
          q_smem, ml_smem, hand, p_all, red_smem, raw, raw_last, tma_bars,
          H: gl.constexpr, ROWS: gl.constexpr, BLOCK_B: gl.constexpr, C0: gl.constexpr, WRITE_LSE: gl.constexpr):
    """Warpgroup ``WG`` of a program (0: the default partition, which stages the query and writes;
    1: the worker): ``decode``'s request walk over its half of each piece's tiles. Its own shared
    buffers: ``p_all``, ``red_smem``, ``raw`` / ``raw_last`` (SLOTS staged tiles: chunks 0-7 as
    pairs, chunk 8) and ``tma_bars`` (one per slot); shared by both: the query (``q_smem``, staged
    by warpgroup 0; each computes the rows' multipliers from the query itself) and the handoff
    (``ml_smem``: maximum and sum; ``hand``: warpgroup 1's accumulators)."""
    acc_l: gl.constexpr = score_layout(ROWS)
    pid = gl.program_id(0)
    num_programs = gl.num_programs(0)
    bi, cost, cum, total, u_begin, u_end = _program_units(pid, num_programs, kv_indptr, kv_indptr, 0, 0, batch,
                                                          BLOCK_B, C0, 0)
    kscale = gl.load(fp8_scale_ptr)
    n_rows = gl.load(kv_indptr + batch)
    desc_pair = tma.make_tensor_descriptor(kv_ptr, [NUM_CHUNKS, n_rows, 16], [16, kv_stride, 1], [2, TILE, 16],
                                           staged_chunks_layout())
    desc_last = tma.make_tensor_descriptor(kv_ptr, [NUM_CHUNKS, n_rows, 16], [16, kv_stride, 1], [1, TILE, 16],
                                           staged_chunks_layout())
    n = gl.arange(0, ROWS, layout=gl.SliceLayout(0, acc_l))
    r_s = gl.arange(0, TILE, layout=gl.SliceLayout(1, acc_l))
    it = 0  # tiles this warpgroup has taken: buffer it % 2, whose mbarrier has completed it // 2 times
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
            _issue_tile(desc_pair, desc_last, tma_bars.index(it % 2), raw, raw_last, it % 2,
                        first_row + my_begin * TILE, my_begin < my_end)
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
                acc = acc + (gl.zeros([CHUNK, ROWS], gl.float32, acc_l), )
            for t in range(my_begin, my_end):
                slot = it % 2
                # Every thread has read the other buffer (the previous tile): the next tile's
                # copies go there now.
                gl.thread_barrier()
                _issue_tile(desc_pair, desc_last, tma_bars.index(1 - slot), raw, raw_last, 1 - slot,
                            first_row + (t + 1) * TILE, t + 1 < my_end)
                mbarrier.wait(tma_bars.index(slot), (it // 2) % 2)
                if (t + 1) * TILE > kv_len:
                    _clear_rows(raw, raw_last, slot, kv_len - t * TILE)
                words = _chunk_words(raw, raw_last, slot, 0)
                for c in gl.static_range(NUM_CHUNKS):
                    # The next chunk's words are read before this one decodes: otherwise every
                    # chunk waits for its shared-memory load.
                    if c + 1 < NUM_CHUNKS:
                        nxt = _chunk_words(raw, raw_last, slot, c + 1)
                    keys = to_key_operand(fp8.decode_chunk(words), ROWS)
                    if c + 1 < NUM_CHUNKS:
                        words = nxt
                    q_c = q_smem.index(c + _opaque_zero(t))
                    st = warpgroup_mma(keys, q_c.permute((1, 0)), st, use_acc=c > 0, is_async=True)
                    if c > 0:
                        st = warpgroup_mma_wait(1, deps=(st, ))
                it += 1
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
                p_smem = p_all.index(_opaque_zero(t))
                p_smem.store(p.to(gl.float16))
                fence_async_shared()
                acc = _value_products(raw, slot, p_smem, scaled, ROWS)
            l_i = gl.sum(l_acc, axis=0)
            if WG == 1:
                ml_smem[0].store(m_i)
                ml_smem[1].store(l_i)
                for c in gl.static_range(VALUE_CHUNKS):
                    hand.index(c).store(acc[c])
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
                    merged = merged + (acc[c] * a_mine[None, :] + hand.index(c).load(acc_l) * a_other[None, :], )
                inv_l, lse2 = _finish(m_all, l_i * a_mine + l_o * a_other)
                dcol = 2 * gl.arange(0, CHUNK, layout=gl.SliceLayout(1, acc_l))
                _write_request(merged, inv_l, lse2, kscale, n, dcol, PAIR_COLUMNS, row_ok, b, b_first, pid,
                               num_programs, total, u_begin, start_b, first, nparts, q_lo, q_len, out_ptr, stride_ot,
                               stride_oh, lse_ptr, stride_lt, part_o_ptr, part_lse_ptr, counter_ptr, batch, H, ROWS,
                               WRITE_LSE)


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
    bars0 = gl.allocate_shared_memory(gl.int64, [SLOTS, 1], mbarrier.MBarrierLayout())
    bars1 = gl.allocate_shared_memory(gl.int64, [SLOTS, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(SLOTS):
        mbarrier.init(bars0.index(i), count=1)
        mbarrier.init(bars1.index(i), count=1)
    raw0 = gl.allocate_shared_memory(gl.int32, [SLOTS * PAIRS, 2, TILE, 16], staged_chunks_layout())
    raw1 = gl.allocate_shared_memory(gl.int32, [SLOTS * PAIRS, 2, TILE, 16], staged_chunks_layout())
    last0 = gl.allocate_shared_memory(gl.int32, [SLOTS, 1, TILE, 16], staged_chunks_layout())
    last1 = gl.allocate_shared_memory(gl.int32, [SLOTS, 1, TILE, 16], staged_chunks_layout())
    hand = gl.allocate_shared_memory(gl.float32, [VALUE_CHUNKS, CHUNK, ROWS], gl.SwizzledSharedLayout(1, 1, 1, [1, 0]))
    p0 = gl.allocate_shared_memory(gl.float16, [1, TILE, ROWS], p_layout(ROWS))
    p1 = gl.allocate_shared_memory(gl.float16, [1, TILE, ROWS], p_layout(ROWS))
    red0 = gl.allocate_shared_memory(gl.float32, [4, ROWS], gl.SwizzledSharedLayout(1, 1, 1, [1, 0]))
    red1 = gl.allocate_shared_memory(gl.float32, [4, ROWS], gl.SwizzledSharedLayout(1, 1, 1, [1, 0]))
    ml_smem = (gl.allocate_shared_memory(gl.float32, [ROWS], gl.SwizzledSharedLayout(1, 1, 1, [0])),
               gl.allocate_shared_memory(gl.float32, [ROWS], gl.SwizzledSharedLayout(1, 1, 1, [0])))
    fence_async_shared()
    gl.thread_barrier()
    gl.warp_specialize([
        (_half, (0, q_ptr, stride_qt, stride_qh, kv_ptr, kv_stride, fp8_scale_ptr, kv_indptr, qo_indptr, out_ptr,
                 stride_ot, stride_oh, lse_ptr, stride_lt, part_o_ptr, part_lse_ptr, counter_ptr, batch, sm_scale,
                 q_smem, ml_smem, hand, p0, red0, raw0, last0, bars0,
                 H, ROWS, BLOCK_B, C0, WRITE_LSE)),
        (_half, (1, q_ptr, stride_qt, stride_qh, kv_ptr, kv_stride, fp8_scale_ptr, kv_indptr, qo_indptr, out_ptr,
                 stride_ot, stride_oh, lse_ptr, stride_lt, part_o_ptr, part_lse_ptr, counter_ptr, batch, sm_scale,
                 q_smem, ml_smem, hand, p1, red1, raw1, last1, bars1,
                 H, ROWS, BLOCK_B, C0, WRITE_LSE)),
    ], [4], [WORKER_REGISTERS])
