"""MXFP4 in ``decode.py``'s dataflow inside ``decode_tma.py``'s frame: one program of two warpgroups per
SM, each with its own value buffers, optionally taking turns at the value products (issue 13;
twenty-eighth session; the form docs/PERF.md's "Where the Hopper kernel's time goes" names as not
yet built).

The shipped MXFP4 kernel (``decode``) runs two independent programs of one warpgroup per SM. Step 74
found that on every SM one of them ends about 16% after the other (the SM's scheduler favours the
older program), and steps 75, 77 and 111 that the loop's time follows how the decode and the
products overlap rather than its instruction count. Here the two warpgroups of one program split
every request piece's tiles in halves (``decode_tma``'s split, handoff and merge), stage the query
once for both, and each runs ``decode``'s tile loop unchanged: register loads one tile ahead, the
keys decoded into the score product's A operand, the value columns stored once into its own eight
value buffers (2 x 64 KB), ``O^T += V^T P^T`` from them. Shared memory: 18 KB query, 2 x 66.3 KB,
32 KB handoff.

Two variants, written by ``write_variants``:

- ``pp_free``: the warpgroups run freely (the scheduler interleaves them, as it does two programs).
- ``pp_turns``: the warpgroups take turns at issuing their value products (named barriers 10 and
  11: warpgroup w waits for its turn before issuing tile t's value products and hands the turn over
  after; warpgroup 1 hands warpgroup 0 the first turn of each request). One warpgroup's value
  products then run while the other decodes, and neither gets more than a tile ahead of the other.

Predicted (256x8192, H100 SXM, shipped about 403-413 us): ``pp_free`` within +-5% of shipped (the same
two instruction streams per SM; the tail of step 74 moves from a program to a warpgroup); ``pp_turns``
3-6% faster if the SM's favouring one instruction stream is what step 74's tail costs and the
turns do not stall the decode, slower if a warpgroup waits for its turn longer than it decodes.
Outputs are not the shipped kernel's bits (each request's halves are summed apart, as in
``decode_tma``); each is checked against the reference.

    TRITON_INTERPRET=0 python bench/studies/hopper_pingpong_mxfp4.py OUTDIR --compile  # registers, spills (CPU)
    python bench/studies/hopper_variants.py OUT OUTDIR/pp_free.py OUTDIR/pp_turns.py    # time them (GPU)
"""

import os
import sys

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, warpgroup_mma, warpgroup_mma_init, \
    warpgroup_mma_wait

from mixmla.kernels.constants import FMT_MXFP4, LOG2E
from mixmla.kernels.gluon import mxfp4, paging
from mixmla.kernels.gluon.decode import (CHUNK_COLUMNS, _finish, _load_query, _load_tile, _opaque_zero, _piece_tiles,
                                         _program_units, _request_bounds, _softmax_tile, _stage_query, _tile_pages,
                                         _tile_rows, _write_request)
from mixmla.kernels.gluon.decode_tma import HANDOFF, Q_READY, _both_warpgroups
from mixmla.kernels.gluon.layouts import (CHUNK, NUM_CHUNKS, TILE, VALUE_CHUNKS, chunk_column, p_layout, q_layout,
                                          score_layout, to_key_operand, v_layout)

HERE = os.path.dirname(os.path.abspath(__file__))

#: Whether the warpgroups take turns at their value products (``write_variants`` sets it per file).
TURNS = gl.constexpr(True)
#: Registers per thread of the worker warpgroup (``decode_tma.WORKER_REGISTERS``).
WORKER_REGISTERS = gl.constexpr(240)
PROGRAMS_PER_SM = 1
FORMATS = ("mxfp4", )

#: Warpgroup w's turn at its value products is named barrier 10 + w of both warpgroups (256
#: threads): it waits there (``barrier.sync``), the other hands it the turn (``barrier.arrive``).
#: Non-aligned forms: the warpgroups reach them from their own code.
WAIT_0 = gl.constexpr("barrier.sync 10, 256; mov.u32 $0, 0;")
WAIT_1 = gl.constexpr("barrier.sync 11, 256; mov.u32 $0, 0;")
GIVE_0 = gl.constexpr("barrier.arrive 10, 256; mov.u32 $0, 0;")
GIVE_1 = gl.constexpr("barrier.arrive 11, 256; mov.u32 $0, 0;")


@gluon.jit
def _take_turn(WG: gl.constexpr):
    """Waits for warpgroup ``WG``'s turn."""
    if WG == 0:
        _both_warpgroups(WAIT_0)
    else:
        _both_warpgroups(WAIT_1)


@gluon.jit
def _give_turn(WG: gl.constexpr):
    """Hands warpgroup ``WG`` its turn (without waiting)."""
    if WG == 0:
        _both_warpgroups(GIVE_0)
    else:
        _both_warpgroups(GIVE_1)


@gluon.jit
def _value_buffers():
    """Eight (1, TILE, CHUNK) bf16 value buffers (one per value chunk, as in ``decode``)."""
    bufs = ()
    for c in gl.static_range(VALUE_CHUNKS):
        bufs = bufs + (gl.allocate_shared_memory(gl.bfloat16, [1, TILE, CHUNK], v_layout()), )
    return bufs


@gluon.jit
def _half(WG: gl.constexpr, q_ptr, stride_qt, stride_qh, kv_ptr, kv_stride, sc_ptr, sc_stride, kv_indptr, qo_indptr,
          pages_ptr, page_indptr, page_stride, max_pages, num_pages, page_shift, out_ptr, stride_ot, stride_oh,
          lse_ptr, stride_lt, part_o_ptr, part_lse_ptr, counter_ptr, batch, sm_scale, q_smem, ml_smem, hand, p_all,
          red_smem, v_bufs, zero_smem, H: gl.constexpr, ROWS: gl.constexpr, BLOCK_B: gl.constexpr, C0: gl.constexpr,
          WRITE_LSE: gl.constexpr, PAGED: gl.constexpr):
    """Warpgroup ``WG``: ``decode``'s tile loop over its half of each piece's tiles (``decode_tma``'s
    split: warpgroup 0 the first ceil(n / 2)), then ``decode_tma``'s handoff and merge."""
    acc_l: gl.constexpr = score_layout(ROWS)
    MMA_DT: gl.constexpr = gl.bfloat16
    pid = gl.program_id(0)
    num_programs = gl.num_programs(0)
    bi, cost, cum, total, u_begin, u_end = _program_units(pid, num_programs, kv_indptr, page_indptr, max_pages,
                                                          page_shift, batch, BLOCK_B, C0, PAGED)
    kscale = 1.0
    tables = mxfp4.decode_tables(mxfp4.shared_zero(zero_smem))
    n = gl.arange(0, ROWS, layout=gl.SliceLayout(0, acc_l))
    dcol = chunk_column(gl.arange(0, CHUNK, layout=gl.SliceLayout(1, acc_l)))
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
            mid = t_begin + (t_end - t_begin + 1) // 2
            if WG == 0:
                my_begin = t_begin
                my_end = mid
            else:
                my_begin = mid
                my_end = t_end

            q_rows = _load_query(q_ptr, stride_qt, stride_qh, q_lo, q_len, H, ROWS)
            page = _tile_pages(PAGED, pages_ptr, first_row, kv_len, my_begin, my_begin < my_end, page_shift)
            row_off, sc_off, ok = _tile_rows(PAGED, first_row, kv_len, my_begin, my_begin < my_end, page, num_pages,
                                             page_shift, kv_stride, sc_stride)
            raw = _load_tile(kv_ptr, sc_ptr, row_off, sc_off, ok)
            page = _tile_pages(PAGED, pages_ptr, first_row, kv_len, my_begin + 1, my_begin + 1 < my_end, page_shift)
            page2 = _tile_pages(PAGED, pages_ptr, first_row, kv_len, my_begin + 2, my_begin + 2 < my_end, page_shift)
            if WG == 0:
                # Warpgroup 1 no longer reads the query buffer: its previous handoff was read at the
                # previous request's end, after its last products.
                _stage_query(FMT_MXFP4, q_smem, q_rows, ROWS)
            _both_warpgroups(Q_READY)
            qk = gl.full([ROWS], sm_scale * LOG2E, gl.float32, gl.SliceLayout(0, acc_l))
            last_visible = kv_len - q_len + n // H
            row_ok = n < q_len * H

            m_i = gl.full([ROWS], float("-inf"), gl.float32, gl.SliceLayout(0, acc_l))
            l_acc = gl.zeros([TILE, ROWS], gl.float32, acc_l)
            st = gl.zeros([TILE, ROWS], gl.float32, acc_l)
            acc = ()
            for c in gl.static_range(VALUE_CHUNKS):
                acc = acc + (warpgroup_mma_init(gl.zeros([CHUNK, ROWS], gl.float32, acc_l)), )
            if TURNS:
                if WG == 1:  # warpgroup 0 takes the first turn
                    _give_turn(0)
            for t in range(my_begin, my_end):
                # The value product of the previous tile still reads the value buffers.
                acc = warpgroup_mma_wait(0, deps=acc)
                row_off, sc_off, ok = _tile_rows(PAGED, first_row, kv_len, t + 1, t + 1 < my_end, page, num_pages,
                                                 page_shift, kv_stride, sc_stride)
                page = page2
                page2 = _tile_pages(PAGED, pages_ptr, first_row, kv_len, t + 3, t + 3 < my_end, page_shift)
                nxt = ()
                for c in gl.static_range(NUM_CHUNKS):
                    keys = to_key_operand(mxfp4.decode_chunk(raw[c][0], raw[c][1], tables), ROWS)
                    nxt = nxt + (mxfp4.load_chunk(kv_ptr, row_off, sc_ptr, sc_off, ok, c), )
                    if c < VALUE_CHUNKS:
                        v_bufs[c].index(0).store(keys)
                    q_c = q_smem.index(c + _opaque_zero(t))
                    st = warpgroup_mma(keys, q_c.permute((1, 0)), st, use_acc=c > 0, is_async=True)
                    if c > 0:
                        st = warpgroup_mma_wait(1, deps=(st, ))
                raw = nxt
                st = warpgroup_mma_wait(0, deps=(st, ))
                p, m_i, l_acc, scaled = _softmax_tile(st, qk, t * TILE + r_s, kv_len, last_visible, m_i, l_acc, acc,
                                                      red_smem, ROWS)
                z = _opaque_zero(t)
                p_smem = p_all.index(z)
                p_smem.store(p.to(MMA_DT))
                fence_async_shared()
                if TURNS:
                    _take_turn(WG)
                acc = ()
                for c in gl.static_range(VALUE_CHUNKS):
                    acc = acc + (warpgroup_mma(v_bufs[c].index(z).permute((1, 0)), p_smem, scaled[c], is_async=True), )
                if TURNS:
                    _give_turn(1 - WG)
            if TURNS:
                # Each turn waited for is one handed over: warpgroup 0 waits ceil(n / 2) times and is
                # handed 1 + floor(n / 2) turns, warpgroup 1 the other way round.
                n0 = mid - t_begin
                n1 = t_end - mid
                if WG == 0:
                    if n0 == n1:
                        _take_turn(0)
                else:
                    if n0 > n1:
                        _take_turn(1)
            acc = warpgroup_mma_wait(0, deps=acc)
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
                _write_request(merged, inv_l, lse2, kscale, n, dcol, CHUNK_COLUMNS, row_ok, b, b_first, pid,
                               num_programs, total, u_begin, start_b, first, nparts, q_lo, q_len, out_ptr, stride_ot,
                               stride_oh, lse_ptr, stride_lt, part_o_ptr, part_lse_ptr, counter_ptr, batch, H, ROWS,
                               WRITE_LSE)


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
    """``decode.mla_decode_hopper_kernel``'s arguments and contract (MXFP4, contiguous or paged); grid:
    one program per SM, two warpgroups each."""
    gl.static_assert(ROWS == 16, "the Hopper kernel covers 16 query rows per request")
    gl.static_assert(FORMAT == FMT_MXFP4, "an MXFP4 study")
    q_smem = gl.allocate_shared_memory(gl.bfloat16, [NUM_CHUNKS, ROWS, CHUNK], q_layout())
    v0 = _value_buffers()
    v1 = _value_buffers()
    p0 = gl.allocate_shared_memory(gl.bfloat16, [1, TILE, ROWS], p_layout(ROWS))
    p1 = gl.allocate_shared_memory(gl.bfloat16, [1, TILE, ROWS], p_layout(ROWS))
    red0 = gl.allocate_shared_memory(gl.float32, [4, ROWS], gl.SwizzledSharedLayout(1, 1, 1, [1, 0]))
    red1 = gl.allocate_shared_memory(gl.float32, [4, ROWS], gl.SwizzledSharedLayout(1, 1, 1, [1, 0]))
    hand = gl.allocate_shared_memory(gl.float32, [VALUE_CHUNKS, CHUNK, ROWS], gl.SwizzledSharedLayout(1, 1, 1, [1, 0]))
    ml_smem = (gl.allocate_shared_memory(gl.float32, [ROWS], gl.SwizzledSharedLayout(1, 1, 1, [0])),
               gl.allocate_shared_memory(gl.float32, [ROWS], gl.SwizzledSharedLayout(1, 1, 1, [0])))
    zero_smem = mxfp4.zero_buffer()
    fence_async_shared()
    gl.thread_barrier()
    gl.warp_specialize([
        (_half, (0, q_ptr, stride_qt, stride_qh, kv_ptr, kv_stride, sc_ptr, sc_stride, kv_indptr, qo_indptr,
                 pages_ptr, page_indptr, page_stride, max_pages, num_pages, page_shift, out_ptr, stride_ot, stride_oh,
                 lse_ptr, stride_lt, part_o_ptr, part_lse_ptr, counter_ptr, batch, sm_scale, q_smem, ml_smem, hand,
                 p0, red0, v0, zero_smem, H, ROWS, BLOCK_B, C0, WRITE_LSE, PAGED)),
        (_half, (1, q_ptr, stride_qt, stride_qh, kv_ptr, kv_stride, sc_ptr, sc_stride, kv_indptr, qo_indptr,
                 pages_ptr, page_indptr, page_stride, max_pages, num_pages, page_shift, out_ptr, stride_ot, stride_oh,
                 lse_ptr, stride_lt, part_o_ptr, part_lse_ptr, counter_ptr, batch, sm_scale, q_smem, ml_smem, hand,
                 p1, red1, v1, zero_smem, H, ROWS, BLOCK_B, C0, WRITE_LSE, PAGED)),
    ], [4], [WORKER_REGISTERS])


def write_variants(outdir: str) -> list[str]:
    """``pp_free.py`` (no turns) and ``pp_turns.py`` (turns) in ``outdir``: this file with ``TURNS``
    set; returns their paths."""
    src = open(os.path.abspath(__file__)).read()
    flag = "\nTURNS = gl.constexpr(True)\n"
    assert src.count(flag) == 1
    os.makedirs(outdir, exist_ok=True)
    paths = []
    for name, turns in (("pp_free.py", False), ("pp_turns.py", True)):
        path = os.path.join(outdir, name)
        open(path, "w").write(src.replace(flag, f"\nTURNS = gl.constexpr({turns})\n"))
        paths.append(path)
    return paths


if __name__ == "__main__":
    sys.path.insert(0, HERE)
    for out in write_variants(sys.argv[1] if len(sys.argv) > 1 else "bench/out/pingpong"):
        print(out)
        if "--compile" in sys.argv:
            from hopper_variants import print_compile_facts
            print_compile_facts(out, [(2, 0), (2, 1)], ops=("HGMMA", "BAR", "LDG"))
