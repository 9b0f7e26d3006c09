"""MXFP4 with each tile's columns split between the warpgroups of a program, so that each warpgroup
needs fewer registers and more warps share an SM (issue 13; twenty-eighth session).

Why: the shipped MXFP4 kernel (``decode``) runs two programs of one warpgroup per SM at 255
registers, so each scheduler has two warps to issue from; ncu (step 68) finds it issuing 1.85 of
4 instructions per cycle per SM, stalled mostly on fixed-latency dependencies (the decode's
chains), and no ordering of the same two streams helped (steps 74, 75, 116). A warpgroup's 255
registers are what its whole tile needs: the output accumulators of all 512 value columns (64), the
next tile's codes (54), two decoded chunks (32). Split the columns, and each warpgroup needs a
part. Here the GROUPS warpgroups of a program work on the same request piece and the same tiles,
each owning some of the nine 64-column chunks (``OWNED``: a pair, chunks 0-3 and 8 / 4-7; a trio,
0-2 / 3-5 / 6-8). Per tile each decodes its chunks (register loads a tile ahead, as ``decode``),
stores its value chunks once to its own value buffers and issues its part of the score product;
the partial scores meet in shared memory (one named barrier of all per tile, buffers alternating by
tile), and each adds them in warpgroup order (the same bits in all), runs the same online softmax
and issues the value products of its own columns. The output columns are disjoint, so no merge
between warpgroups; a cut request's partial result is written by all and counted by warpgroup 0
after a barrier of all.

- ``pair``: two programs of two warpgroups per SM (four warps per scheduler) at 128 registers.
  Compiled (CPU, sm_90a, contiguous): 1760 bytes of spill, 78 local-memory instructions in
  warpgroup 0's loop: the 128 registers do not hold a half tile's work (at 200 registers the loops
  are 739 and 854 instructions without spills).
- ``trio``: one program of three warpgroups per SM (three warps per scheduler) at 168 registers:
  320 bytes of spill, 4 local-memory instructions in one loop; loops of 628, 602 and 706
  instructions, 1936 per tile together against the shipped loop's 1320: the decode splits evenly
  (``prmt`` 360 in all), but every warpgroup repeats the softmax, the exchange and the loop's
  addressing.

Predicted (256x8192, H100 SXM, shipped 403-409 us): ``trio`` 380-470 us (47% more instructions per
tile issued from 1.5x the warps per scheduler, all of an SM's warps meeting once per tile); ``pair``
slower than shipped (its spills in the loop). Outputs differ from the shipped bits (the score is
summed in parts); checked against the reference and the shipped output.

    TRITON_INTERPRET=0 python bench/studies/hopper_column_groups.py OUTDIR --compile  # registers, spills (CPU)
    python bench/studies/hopper_variants.py OUT OUTDIR/pair.py OUTDIR/trio.py         # time them (GPU)
"""

import os
import sys

from triton.experimental import gluon
from triton.runtime.jit import constexpr_function
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, warpgroup_mma, warpgroup_mma_init, \
    warpgroup_mma_wait

from mixmla.kernels.constants import FMT_MXFP4, LN2, LOG2E
from mixmla.kernels.gluon import mxfp4, paging
from mixmla.kernels.gluon.decode import (CHUNK_COLUMNS, VALUE_DIM, _finish, _load_query, _merge_parts, _merge_share,
                                         _merge_width, _opaque_zero, _piece_tiles, _program_units, _request_bounds,
                                         _softmax_tile, _tile_pages, _tile_rows, _wait_count)
from mixmla.kernels.gluon.decode_tma import _both_warpgroups
from mixmla.kernels.gluon.layouts import (CHUNK, NUM_CHUNKS, TILE, chunk_column, p_layout, q_layout, score_layout,
                                          to_key_operand, v_layout)

HERE = os.path.dirname(os.path.abspath(__file__))

NUM_WARPS = 4
#: Registers per thread (both the kernel's cap and the workers' ``setmaxnreg``): pairs run two
#: programs of 256 threads per SM (128), trios one program of 384 threads (168).
MAX_REGISTERS = 128
WORKER_REGISTERS = gl.constexpr(128)
PROGRAMS_PER_SM = 2
FORMATS = ("mxfp4", )
#: Warpgroups per program, and the chunks each decodes (its value chunks first).
GROUPS = gl.constexpr(2)
OWNED = {2: ((0, 1, 2, 3, 8), (4, 5, 6, 7)), 3: ((0, 1, 2), (3, 4, 5), (6, 7, 8))}


@constexpr_function
def _chunk_of(wg, i):
    """The i-th chunk warpgroup ``wg`` decodes."""
    return OWNED[GROUPS.value][wg][i]


@constexpr_function
def _num_chunks(wg):
    return len(OWNED[GROUPS.value][wg])


@constexpr_function
def _num_values(wg):
    """Value chunks (0-7) among warpgroup ``wg``'s chunks."""
    return sum(c < 8 for c in OWNED[GROUPS.value][wg])


@constexpr_function
def _all_sync(barrier):
    """PTX of named barrier ``barrier`` over all of the program's warpgroups (``_both_warpgroups``):
    8, the tile's partial scores are in shared memory; 9, every warpgroup's part of a cut request's
    partial result is stored."""
    return f"barrier.sync {barrier}, {128 * GROUPS.value}; mov.u32 $0, 0;"


@gluon.jit
def _load_chunks(WG: gl.constexpr, kv_ptr, sc_ptr, row_off, sc_off, ok):
    raw = ()
    for i in gl.static_range(_num_chunks(WG)):
        raw = raw + (mxfp4.load_chunk(kv_ptr, row_off, sc_ptr, sc_off, ok, _chunk_of(WG, i)), )
    return raw


@gluon.jit
def _stage_query_chunks(WG: gl.constexpr, q_smem, chunks):
    """Warpgroup WG's chunks of ``_load_query``'s chunks into ``q_smem`` (no other warpgroup reads them)."""
    for i in gl.static_range(_num_chunks(WG)):
        q_smem.index(_chunk_of(WG, i)).store(chunks[_chunk_of(WG, i)])
    fence_async_shared()


@gluon.jit
def _group(WG: gl.constexpr, q_ptr, stride_qt, stride_qh, kv_ptr, kv_stride, sc_ptr, sc_stride, kv_indptr, qo_indptr,
           pages_ptr, page_indptr, page_stride, max_pages, num_pages, page_shift, out_ptr, stride_ot, stride_oh,
           lse_ptr, stride_lt, part_o_ptr, part_lse_ptr, counter_ptr, batch, sm_scale, q_smem, v_bufs, p_all,
           red_smem, x_all, zero_smem, H: gl.constexpr, ROWS: gl.constexpr, BLOCK_B: gl.constexpr,
           C0: gl.constexpr, WRITE_LSE: gl.constexpr, PAGED: gl.constexpr):
    """Warpgroup ``WG`` of a program: ``decode``'s request walk, its own chunks of every tile. ``x_all``:
    (2 * GROUPS, TILE, ROWS) float32, warpgroup g's partial scores of tiles of parity k in 2g + k."""
    acc_l: gl.constexpr = score_layout(ROWS)
    NK: gl.constexpr = _num_chunks(WG)
    NV: gl.constexpr = _num_values(WG)
    pid = gl.program_id(0)
    num_programs = gl.num_programs(0)
    bi, cost, cum, total, u_begin, u_end = _program_units(pid, num_programs, kv_indptr, page_indptr, max_pages,
                                                          page_shift, batch, BLOCK_B, C0, PAGED)
    tables = mxfp4.decode_tables(mxfp4.shared_zero(zero_smem))
    n = gl.arange(0, ROWS, layout=gl.SliceLayout(0, acc_l))
    dcol = chunk_column(gl.arange(0, CHUNK, layout=gl.SliceLayout(1, acc_l)))
    r_s = gl.arange(0, TILE, layout=gl.SliceLayout(1, acc_l))
    it = 0  # tiles taken: the partial-score buffers of a tile are those of parity it % 2
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
            raw = _load_chunks(WG, kv_ptr, sc_ptr, row_off, sc_off, ok)
            page = _tile_pages(PAGED, pages_ptr, first_row, kv_len, t_begin + 1, t_begin + 1 < t_end, page_shift)
            page2 = _tile_pages(PAGED, pages_ptr, first_row, kv_len, t_begin + 2, t_begin + 2 < t_end, page_shift)
            _stage_query_chunks(WG, q_smem, q_rows)
            qk = gl.full([ROWS], sm_scale * LOG2E, gl.float32, gl.SliceLayout(0, acc_l))
            last_visible = kv_len - q_len + n // H
            row_ok = n < q_len * H

            m_i = gl.full([ROWS], float("-inf"), gl.float32, gl.SliceLayout(0, acc_l))
            l_acc = gl.zeros([TILE, ROWS], gl.float32, acc_l)
            st = gl.zeros([TILE, ROWS], gl.float32, acc_l)
            acc = ()
            for c in gl.static_range(NV):
                acc = acc + (warpgroup_mma_init(gl.zeros([CHUNK, ROWS], gl.float32, acc_l)), )
            for t in range(t_begin, t_end):
                # The value product of the previous tile still reads the value buffers.
                acc = warpgroup_mma_wait(0, deps=acc)
                row_off, sc_off, ok = _tile_rows(PAGED, first_row, kv_len, t + 1, t + 1 < t_end, page, num_pages,
                                                 page_shift, kv_stride, sc_stride)
                page = page2
                page2 = _tile_pages(PAGED, pages_ptr, first_row, kv_len, t + 3, t + 3 < t_end, page_shift)
                nxt = ()
                for i in gl.static_range(NK):
                    keys = to_key_operand(mxfp4.decode_chunk(raw[i][0], raw[i][1], tables), ROWS)
                    nxt = nxt + (mxfp4.load_chunk(kv_ptr, row_off, sc_ptr, sc_off, ok, _chunk_of(WG, i)), )
                    if i < NV:
                        v_bufs[i].index(0).store(keys)
                    q_c = q_smem.index(_chunk_of(WG, i) + _opaque_zero(t))
                    st = warpgroup_mma(keys, q_c.permute((1, 0)), st, use_acc=i > 0, is_async=True)
                    if i > 0:
                        st = warpgroup_mma_wait(1, deps=(st, ))
                raw = nxt
                st = warpgroup_mma_wait(0, deps=(st, ))
                par = it % 2
                x_all.index(2 * WG + par).store(st)
                _both_warpgroups(_all_sync(8))
                it += 1
                # Every warpgroup adds the partial scores in warpgroup order: the same bits in each.
                if WG == 0:
                    s_all = st
                else:
                    s_all = x_all.index(par).load(acc_l)
                for g in gl.static_range(1, GROUPS):
                    if g == WG:
                        s_all = s_all + st
                    else:
                        s_all = s_all + x_all.index(2 * g + par).load(acc_l)
                p, m_i, l_acc, scaled = _softmax_tile(s_all, qk, t * TILE + r_s, kv_len, last_visible, m_i, l_acc,
                                                      acc, red_smem, ROWS)
                z = _opaque_zero(t)
                p_smem = p_all.index(z)
                p_smem.store(p.to(gl.bfloat16))
                fence_async_shared()
                acc = ()
                for c in gl.static_range(NV):
                    acc = acc + (warpgroup_mma(v_bufs[c].index(z).permute((1, 0)), p_smem, scaled[c], is_async=True), )
            acc = warpgroup_mma_wait(0, deps=acc)
            inv_l, lse2 = _finish(m_i, gl.sum(l_acc, axis=0))
            factor = inv_l[None, :]
            tok = (q_lo + n // H).to(gl.int64)
            if nparts == 1:
                out_rows = out_ptr + tok * stride_ot + (n % H) * stride_oh
                for c in gl.static_range(NV):
                    gl.store(out_rows[None, :] + (CHUNK_COLUMNS[_chunk_of(WG, c)] + dcol)[:, None],
                             (acc[c] * factor).to(gl.bfloat16), mask=row_ok[None, :])
                if WRITE_LSE:
                    if WG == 0:
                        gl.store(lse_ptr + tok * stride_lt + n % H, lse2 * LN2, mask=row_ok)
            else:
                slot = 2 * pid + (b != b_first).to(gl.int32)
                part_rows = part_o_ptr + (slot * ROWS + n).to(gl.int64) * VALUE_DIM
                for c in gl.static_range(NV):
                    gl.store(part_rows[None, :] + (CHUNK_COLUMNS[_chunk_of(WG, c)] + dcol)[:, None], acc[c] * factor)
                if WG == 0:
                    gl.store(part_lse_ptr + slot * ROWS + n, lse2)
                # Every part stored before warpgroup 0 counts the piece (``decode._write_request``).
                _both_warpgroups(_all_sync(9))
                if WG == 0:
                    done = gl.atomic_add(counter_ptr + b, 1, sem="acq_rel", scope="gpu")
                    one_unit = num_programs >= total
                    inner = gl.where(one_unit, nparts, nparts - 2)
                    if inner == 0:
                        if done == nparts - 1:
                            _merge_parts(part_o_ptr, part_lse_ptr, out_ptr, stride_ot, stride_oh, lse_ptr, stride_lt,
                                         q_lo, q_len, first, nparts, start_b, num_programs, total, H, ROWS, WRITE_LSE)
                            gl.store(counter_ptr + b, 0)
                    else:
                        k = gl.where(one_unit, u_begin - start_b, pid - first - 1)
                        mergers = gl.minimum(inner, VALUE_DIM // _merge_width(nparts))
                        if (k >= 0) & (k < mergers):
                            _wait_count(counter_ptr + b, nparts)
                            _merge_share(part_o_ptr, part_lse_ptr, out_ptr, stride_ot, stride_oh, lse_ptr, stride_lt,
                                         q_lo, q_len, first, nparts, start_b, num_programs, total, k, mergers, H,
                                         ROWS, WRITE_LSE)
                            gl.thread_barrier()
                            left = gl.atomic_add(counter_ptr + batch + b, 1, sem="acq_rel", scope="gpu")
                            if left == mergers - 1:  # every merger has seen the full count
                                gl.store(counter_ptr + b, 0)
                                gl.store(counter_ptr + batch + b, 0)


@gluon.jit
def _value_buffers(WG: gl.constexpr):
    bufs = ()
    for c in gl.static_range(_num_values(WG)):
        bufs = bufs + (gl.allocate_shared_memory(gl.bfloat16, [1, TILE, CHUNK], v_layout()), )
    return bufs


@gluon.jit
def _buffers(WG: gl.constexpr, ROWS: gl.constexpr):
    """Warpgroup WG's own value, P^T and reduction buffers."""
    v = _value_buffers(WG)
    p = gl.allocate_shared_memory(gl.bfloat16, [1, TILE, ROWS], p_layout(ROWS))
    red = gl.allocate_shared_memory(gl.float32, [4, ROWS], gl.SwizzledSharedLayout(1, 1, 1, [1, 0]))
    return v, p, red


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
    PROGRAMS_PER_SM programs per SM of GROUPS warpgroups."""
    gl.static_assert(ROWS == 16, "the Hopper kernel covers 16 query rows per request")
    gl.static_assert(FORMAT == FMT_MXFP4, "an MXFP4 study")
    q_smem = gl.allocate_shared_memory(gl.bfloat16, [NUM_CHUNKS, ROWS, CHUNK], q_layout())
    # Partial scores in the accumulator's own register order: each thread reads back what the
    # same thread of another warpgroup wrote.
    x_all = gl.allocate_shared_memory(gl.float32, [2 * GROUPS, TILE, ROWS], gl.SwizzledSharedLayout(1, 1, 1, [1, 0]))
    zero_smem = mxfp4.zero_buffer()
    v0, p0, red0 = _buffers(0, ROWS)
    v1, p1, red1 = _buffers(1, ROWS)
    fence_async_shared()
    gl.thread_barrier()
    if GROUPS == 2:
        gl.warp_specialize([
            (_group, (0, q_ptr, stride_qt, stride_qh, kv_ptr, kv_stride, sc_ptr, sc_stride, kv_indptr, qo_indptr,
                      pages_ptr, page_indptr, page_stride, max_pages, num_pages, page_shift, out_ptr, stride_ot,
                      stride_oh, lse_ptr, stride_lt, part_o_ptr, part_lse_ptr, counter_ptr, batch, sm_scale, q_smem,
                      v0, p0, red0, x_all, zero_smem, H, ROWS, BLOCK_B, C0, WRITE_LSE, PAGED)),
            (_group, (1, q_ptr, stride_qt, stride_qh, kv_ptr, kv_stride, sc_ptr, sc_stride, kv_indptr, qo_indptr,
                      pages_ptr, page_indptr, page_stride, max_pages, num_pages, page_shift, out_ptr, stride_ot,
                      stride_oh, lse_ptr, stride_lt, part_o_ptr, part_lse_ptr, counter_ptr, batch, sm_scale, q_smem,
                      v1, p1, red1, x_all, zero_smem, H, ROWS, BLOCK_B, C0, WRITE_LSE, PAGED)),
        ], [4], [WORKER_REGISTERS])
    else:
        v2, p2, red2 = _buffers(2, ROWS)
        gl.warp_specialize([
            (_group, (0, q_ptr, stride_qt, stride_qh, kv_ptr, kv_stride, sc_ptr, sc_stride, kv_indptr, qo_indptr,
                      pages_ptr, page_indptr, page_stride, max_pages, num_pages, page_shift, out_ptr, stride_ot,
                      stride_oh, lse_ptr, stride_lt, part_o_ptr, part_lse_ptr, counter_ptr, batch, sm_scale, q_smem,
                      v0, p0, red0, x_all, zero_smem, H, ROWS, BLOCK_B, C0, WRITE_LSE, PAGED)),
            (_group, (1, q_ptr, stride_qt, stride_qh, kv_ptr, kv_stride, sc_ptr, sc_stride, kv_indptr, qo_indptr,
                      pages_ptr, page_indptr, page_stride, max_pages, num_pages, page_shift, out_ptr, stride_ot,
                      stride_oh, lse_ptr, stride_lt, part_o_ptr, part_lse_ptr, counter_ptr, batch, sm_scale, q_smem,
                      v1, p1, red1, x_all, zero_smem, H, ROWS, BLOCK_B, C0, WRITE_LSE, PAGED)),
            (_group, (2, q_ptr, stride_qt, stride_qh, kv_ptr, kv_stride, sc_ptr, sc_stride, kv_indptr, qo_indptr,
                      pages_ptr, page_indptr, page_stride, max_pages, num_pages, page_shift, out_ptr, stride_ot,
                      stride_oh, lse_ptr, stride_lt, part_o_ptr, part_lse_ptr, counter_ptr, batch, sm_scale, q_smem,
                      v2, p2, red2, x_all, zero_smem, H, ROWS, BLOCK_B, C0, WRITE_LSE, PAGED)),
        ], [4, 4], [WORKER_REGISTERS, WORKER_REGISTERS])


def write_variants(outdir: str) -> list[str]:
    """``pair.py`` (two warpgroups per program, two programs per SM, 128 registers) and ``trio.py``
    (three per program, one program per SM, 168 registers) in ``outdir``; returns their paths."""
    src = open(os.path.abspath(__file__)).read()
    os.makedirs(outdir, exist_ok=True)
    paths = []
    for name, groups, regs, per_sm in (("pair.py", 2, 128, 2), ("trio.py", 3, 168, 1)):
        text = src
        for old, new in (("\nGROUPS = gl.constexpr(2)\n", f"\nGROUPS = gl.constexpr({groups})\n"),
                         ("\nMAX_REGISTERS = 128\n", f"\nMAX_REGISTERS = {regs}\n"),
                         ("\nWORKER_REGISTERS = gl.constexpr(128)\n", f"\nWORKER_REGISTERS = gl.constexpr({regs})\n"),
                         ("\nPROGRAMS_PER_SM = 2\n", f"\nPROGRAMS_PER_SM = {per_sm}\n")):
            assert text.count(old) == 1, old
            text = text.replace(old, new)
        path = os.path.join(outdir, name)
        open(path, "w").write(text)
        paths.append(path)
    return paths


if __name__ == "__main__":
    sys.path.insert(0, HERE)
    for out in write_variants(sys.argv[1] if len(sys.argv) > 1 else "bench/out/groups"):
        print(out)
        if "--compile" in sys.argv:
            from hopper_variants import print_compile_facts
            print_compile_facts(out, [(2, 0), (2, 1)], ops=("HGMMA", "BAR", "LDG", "STL", "LDL"))
