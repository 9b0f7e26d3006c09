"""fp8 with whole tiles staged by the copy engine: one program of two warpgroups per SM sharing one
query buffer (design log step 85).

Why: at two programs of one warpgroup per SM, a TMA-staged raw tile (36 KB) does not fit beside each
program's value tile and query (2 x 118 KB > 227 KB), so the shipped fp8 loop loads its next tile
into registers, which wait behind the tile's shared-memory traffic (steps 80-83). The copy engine
alone streams whole tiles into one buffer per warpgroup at 94% of the read ceiling with ~10% of a
tile's time waited, when the L2 prefetch is left out (``tma_stream.py``, step 84). One program of
two warpgroups needs the query once: 18 + 2 x (64 value tile + 36 raw tile + 2.4) = 223 KB.

Here (contiguous fp8 caches only; a study, not the shipped path): ``gl.warp_specialize`` runs the
same request walk in both warpgroups (the shipped one's, over one program per SM); each request's
tiles are split in two halves, one per warpgroup, each streamed through its own raw buffer by TMA
in three copies of a (chunk, row, word) view (chunks 0-3, 4-7 and 8, each with its mbarrier), each
copy of a warpgroup's next tile issued as soon as the current tile's chunks of that copy are read;
each chunk's words are read from shared memory before the previous chunk decodes. No L2 prefetch
(``tma_stream.py``: it slows the copies). Warpgroup 0
stages the query and its row multipliers for both (mbarrier ``q_ready``); warpgroup 1 hands its
half's (max, sum, accumulators) over through its value buffers (mbarrier ``handoff``), and
warpgroup 0 merges the two halves and writes the request as the shipped kernel does (direct
output, or a partial with the shipped merge of cut requests). The results differ from the shipped
kernel's in the last bits (the halves are summed separately).

``PYTHONPATH=src:bench/studies python3 bench/studies/hopper_ws_fp8.py --compile`` (any machine,
``TRITON_INTERPRET=0``): registers, spills, shared memory, the barriers in the PTX;
``... --out OUT`` on the GPU: GPU time against the shipped kernel (fp8; read flush; 132 and 128
programs), the strict check against the reference where it is affordable.
"""

import argparse
import json
import os
import re
import sys

import torch
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (fence_async_shared, mbarrier, tma, warpgroup_mma,
                                                               warpgroup_mma_init, warpgroup_mma_wait)

from mixmla.kernels.constants import FMT_FP8, LN2, LOG2E
from mixmla.kernels.gluon import fp8, paging
from mixmla.kernels.gluon.decode import (_add, _finish, _load_query, _merge_parts, _merge_share, _merge_width,
                                         _opaque_zero, _range_bound, _request_bounds, _stage_query, _tile_max,
                                         _wait_count)
from mixmla.kernels.gluon.layouts import (CHUNK, NUM_CHUNKS, TILE, VALUE_CHUNKS, chunk_column, chunk_word_layout,
                                          p_layout, q_layout, score_layout, to_key_operand, v_layout)

triton.set_allocator(lambda size, alignment, stream: torch.empty(size, dtype=torch.int8, device="cuda"))

PROGRAMS_PER_SM = 1
NUM_WARPS = 4  # of the default partition; the worker adds four
WORKER_REGS = gl.constexpr(240)
VALUE_DIM = gl.constexpr(512)


@gluon.jit
def _value_buffers():
    """One buffer per 64 value columns (as the shipped kernel keeps them apart)."""
    v_bufs = ()
    for c in gl.static_range(VALUE_CHUNKS):
        v_bufs = v_bufs + (gl.allocate_shared_memory(gl.float16, [1, TILE, CHUNK], v_layout()), )
    return v_bufs


GROUP = gl.constexpr(4)  #: chunks per copy: chunks 0-3, 4-7 and 8 are three copies, each with its mbarrier


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
    """Copy ``g`` (chunks 4g .. 4g+3, or chunk 8 for g = 2) of the tile of 64 cache rows from
    ``row0``, completing on ``bars.index(g)``."""
    if g < 2:
        mbarrier.expect(bars.index(g), TILE * GROUP * 64, pred=live)
        tma.async_copy_global_to_shared(desc4, [GROUP * g, row0, 0], bars.index(g),
                                        raw8.slice(GROUP * g, GROUP, dim=0), pred=live)
    else:
        mbarrier.expect(bars.index(g), TILE * 64, pred=live)
        tma.async_copy_global_to_shared(desc1, [VALUE_CHUNKS, row0, 0], bars.index(g), raw1, pred=live)


@gluon.jit
def _issue_tile(desc4, desc1, bars, raw8, raw1, row0, live):
    for g in gl.static_range(3):
        _issue_group(desc4, desc1, bars, raw8, raw1, g, row0, live)


@gluon.jit
def _half(WG: gl.constexpr, q_ptr, stride_qt, stride_qh, kv_ptr, kv_stride, fp8_scale_ptr, kv_indptr, qo_indptr,
          out_ptr, stride_ot, stride_oh, lse_ptr, stride_lt, part_o_ptr, part_lse_ptr, counter_ptr, batch, sm_scale,
          q_smem, qm_smem, q_ready, handoff, ml_smem, hand_bufs, v_bufs, p_all, red_smem, raw8, raw1, tma_bars,
          H: gl.constexpr, ROWS: gl.constexpr, BLOCK_B: gl.constexpr, C0: gl.constexpr, WRITE_LSE: gl.constexpr):
    """Warpgroup ``WG`` (0: the default partition, which stages the query and writes the results;
    1: the worker) of a program: the shipped request walk, over its half of each request's tiles."""
    acc_l: gl.constexpr = score_layout(ROWS)
    pid = gl.program_id(0)
    num_programs = gl.num_programs(0)
    bl: gl.constexpr = gl.BlockedLayout([BLOCK_B // 128], [32], [4], [0])
    bi = gl.arange(0, BLOCK_B, layout=bl)
    live_b = bi < batch
    lens = paging.request_lengths(bi, live_b, kv_indptr, kv_indptr, 0, 0, 0)
    cost = gl.where(live_b, (lens + TILE - 1) // TILE + C0, 0)
    cum = gl.associative_scan(cost, 0, _add)
    total = gl.sum(cost, axis=0)
    u_begin = _range_bound(pid, num_programs, total)
    u_end = _range_bound(pid + 1, num_programs, total)

    kscale = gl.load(fp8_scale_ptr)
    n_rows = gl.load(kv_indptr + batch)
    lay3: gl.constexpr = gl.NVMMASharedLayout(swizzle_byte_width=0, element_bitwidth=32, rank=3)
    desc4 = tma.make_tensor_descriptor(kv_ptr, [NUM_CHUNKS, n_rows, 16], [16, kv_stride, 1], [GROUP, TILE, 16], lay3)
    desc1 = tma.make_tensor_descriptor(kv_ptr, [NUM_CHUNKS, n_rows, 16], [16, kv_stride, 1], [1, TILE, 16], lay3)
    n = gl.arange(0, ROWS, layout=gl.SliceLayout(0, acc_l))
    dcol = chunk_column(gl.arange(0, CHUNK, layout=gl.SliceLayout(1, acc_l)))
    r_s = gl.arange(0, TILE, layout=gl.SliceLayout(1, acc_l))
    r_w = gl.arange(0, TILE, layout=gl.SliceLayout(1, chunk_word_layout(4)))
    phase = 0
    j = 0
    if u_begin < u_end:
        b_first = gl.sum((cum <= u_begin).to(gl.int32), axis=0)
        b_last = gl.sum((cum < u_end).to(gl.int32), axis=0)
        for b in range(b_first, b_last + 1):
            start_b, cum_b, first, nparts = _request_bounds(b, bi, cum, cost, num_programs, total)
            first_row = gl.load(kv_indptr + b)
            kv_len = gl.load(kv_indptr + b + 1) - first_row
            q_lo = gl.load(qo_indptr + b)
            q_len = gl.load(qo_indptr + b + 1) - q_lo
            n_tiles = (kv_len + TILE - 1) // TILE
            t_begin = gl.minimum(gl.maximum(gl.maximum(u_begin, start_b) - start_b - C0, 0), n_tiles)
            t_end = gl.minimum(gl.maximum(gl.minimum(u_end, cum_b) - start_b - C0, 0), n_tiles)
            mid = t_begin + (t_end - t_begin + 1) // 2
            if WG == 0:
                my_begin = t_begin
                my_end = mid
            else:
                my_begin = mid
                my_end = t_end
            _issue_tile(desc4, desc1, tma_bars, raw8, raw1, first_row + my_begin * TILE, my_begin < my_end)
            if WG == 0:
                # The worker's handoff of the previous request was read at its end, so the worker
                # no longer reads the query buffer.
                q_mult = _stage_query(FMT_FP8, q_smem, _load_query(q_ptr, stride_qt, stride_qh, q_lo, q_len, H, ROWS),
                                      ROWS)
                qm_smem.store(gl.convert_layout(q_mult, gl.SliceLayout(0, acc_l)))
                gl.thread_barrier()
                mbarrier.arrive(q_ready)
            else:
                mbarrier.wait(q_ready, j & 1)
            qk = (sm_scale * LOG2E * kscale) / qm_smem.load(gl.SliceLayout(0, acc_l))
            last_visible = kv_len - q_len + n // H
            row_ok = n < q_len * H

            m_i = gl.full([ROWS], float("-inf"), gl.float32, gl.SliceLayout(0, acc_l))
            l_acc = gl.zeros([TILE, ROWS], gl.float32, acc_l)
            st = gl.zeros([TILE, ROWS], gl.float32, acc_l)
            acc = ()
            for c in gl.static_range(VALUE_CHUNKS):
                acc = acc + (warpgroup_mma_init(gl.zeros([CHUNK, ROWS], gl.float32, acc_l)), )
            for t in range(my_begin, my_end):
                acc = warpgroup_mma_wait(0, deps=acc)
                ok_cur = (t * TILE + r_w) < kv_len
                mbarrier.wait(tma_bars.index(0), phase)
                words = _raw_chunk(raw8, raw1, 0).load(chunk_word_layout(4))
                for c in gl.static_range(NUM_CHUNKS):
                    # The next chunk's words are read before this one decodes: a shared-memory
                    # load's latency is otherwise waited for in every chunk.
                    if c + 1 < NUM_CHUNKS:
                        if (c + 1) % GROUP == 0:
                            mbarrier.wait(tma_bars.index((c + 1) // GROUP), phase)
                        nxt = _raw_chunk(raw8, raw1, c + 1).load(chunk_word_layout(4))
                    keys = to_key_operand(fp8.decode_chunk(gl.where(ok_cur[:, None], words, 0)), ROWS)
                    if c + 1 < NUM_CHUNKS:
                        words = nxt
                    if (c % GROUP == GROUP - 1) | (c == NUM_CHUNKS - 1):
                        # Every thread has read the copy's chunks: the next tile's comes a tile ahead.
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
            hand: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [1, 0])
            if WG == 1:
                ml_smem[0].store(m_i)
                ml_smem[1].store(l_i)
                for c in gl.static_range(VALUE_CHUNKS):
                    hand_bufs[c]._reinterpret(gl.float32, [CHUNK, ROWS], hand).store(acc[c])
                gl.thread_barrier()
                mbarrier.arrive(handoff)
            else:
                mbarrier.wait(handoff, j & 1)
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
                factor = (inv_l * kscale)[None, :]
                tok = (q_lo + n // H).to(gl.int64)
                if nparts == 1:
                    out_rows = out_ptr + tok * stride_ot + (n % H) * stride_oh
                    for c in gl.static_range(VALUE_CHUNKS):
                        gl.store(out_rows[None, :] + (CHUNK * c + dcol)[:, None], (merged[c] * factor).to(gl.bfloat16),
                                 mask=row_ok[None, :])
                    if WRITE_LSE:
                        gl.store(lse_ptr + tok * stride_lt + n % H, lse2 * LN2, mask=row_ok)
                else:
                    slot = 2 * pid + (b != b_first).to(gl.int32)
                    part_rows = part_o_ptr + (slot * ROWS + n).to(gl.int64) * VALUE_DIM
                    for c in gl.static_range(VALUE_CHUNKS):
                        gl.store(part_rows[None, :] + (CHUNK * c + dcol)[:, None], merged[c] * factor)
                    gl.store(part_lse_ptr + slot * ROWS + n, lse2)
                    gl.thread_barrier()
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
                                         q_lo, q_len, first, nparts, start_b, num_programs, total, k, mergers, H, ROWS,
                                         WRITE_LSE)
                            gl.thread_barrier()
                            left = gl.atomic_add(counter_ptr + batch + b, 1, sem="acq_rel", scope="gpu")
                            if left == mergers - 1:
                                gl.store(counter_ptr + b, 0)
                                gl.store(counter_ptr + batch + b, 0)
            j = j + 1


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
    """The shipped kernel's arguments (``kernels/gluon/decode.py``); contiguous fp8 only."""
    gl.static_assert(FORMAT == FMT_FP8, "this study reads fp8 caches")
    gl.static_assert(PAGED == 0, "this study reads contiguous caches")
    q_smem = gl.allocate_shared_memory(gl.float16, [NUM_CHUNKS, ROWS, CHUNK], q_layout())
    qm_smem = gl.allocate_shared_memory(gl.float32, [ROWS], gl.SwizzledSharedLayout(1, 1, 1, [0]))
    bars = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    tbar0 = gl.allocate_shared_memory(gl.int64, [3, 1], mbarrier.MBarrierLayout())
    tbar1 = gl.allocate_shared_memory(gl.int64, [3, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(2):
        mbarrier.init(bars.index(i), count=1)
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
                 q_smem, qm_smem, bars.index(0), bars.index(1), ml_smem, v1, v0, p0, red0, raw80, raw10, tbar0,
                 H, ROWS, BLOCK_B, C0, WRITE_LSE)),
        (_half, (1, q_ptr, stride_qt, stride_qh, kv_ptr, kv_stride, fp8_scale_ptr, kv_indptr, qo_indptr, out_ptr,
                 stride_ot, stride_oh, lse_ptr, stride_lt, part_o_ptr, part_lse_ptr, counter_ptr, batch, sm_scale,
                 q_smem, qm_smem, bars.index(0), bars.index(1), ml_smem, v1, v1, p1, red1, raw81, raw11, tbar1,
                 H, ROWS, BLOCK_B, C0, WRITE_LSE)),
    ], [4], [WORKER_REGS])


def compile_facts():
    from hopper_variants import compile_variant
    from mixmla.kernels.gluon import sass
    from mixmla.kernels.gluon.compile import KernelSpec

    spec = KernelSpec(H=16, ROWS=16, FORMAT=1, BLOCK_B=256, C0=2, WRITE_LSE=False, PAGED=0)
    k = compile_variant(mla_decode_hopper_kernel, spec)
    f = sass.kernel_facts(k)
    ptx = k.asm["ptx"]
    maxnreg = sorted(set(re.findall(r"setmaxnreg[.a-z0-9]*\s+\d+", ptx)))
    bars = sorted(set(re.findall(r"bar\.sync\s+[^;]*", ptx)))
    print(f"{f.registers} registers, spill {f.spill_bytes} B, shared {f.shared} B, wgmma {f.wgmma}, "
          f"loop {f.loop_instructions} instructions, {f.loop_local} local; PTX: setmaxnreg {maxnreg}, "
          f"bar.sync forms {bars[:8]}, loop UTMALDG {f.loop_ops.get('UTMALDG', 0)}")
    return k


SHAPES = [(4, 1024), (32, 1024), (4, 8192), (64, 1024), (256, 1024), (32, 8192), (64, 8192), (256, 8192)]


def ws_decoder(b, device, programs):
    """A ``HopperDecoder`` of ``b`` fp8 requests on ``programs`` programs that launches this kernel."""
    from hopper_variants import compile_variant
    from mixmla.kernels.gluon.launch import HopperDecoder

    dec = HopperDecoder(b, 16, "fp8", device, paged=0, programs=programs)
    dec.kernel = compile_variant(mla_decode_hopper_kernel, dec.spec, NUM_WARPS)
    return dec


def run(out_dir, shapes):
    from hopper_variants import _timed
    from mixmla.check import check_strict
    from mixmla.formats import as_cache
    from mixmla.harness.timing import L2Flusher
    from mixmla.inputs import generate_input
    from mixmla.kernels.gluon.launch import HopperDecoder
    from mixmla.reference import default_sm_scale, mla_decode_reference

    os.makedirs(out_dir, exist_ok=True)
    flusher = L2Flusher(mode="read")
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    rows = []
    for b, l in shapes:
        q, kv, qo, kvp, _ = generate_input(b, 1, l, seed=b + l, device="cuda")
        cache = as_cache(kv["fp8"])
        ref = mla_decode_reference(q, cache, kvp, qo)[0] if b * l <= 65536 else None
        row = {"shape": f"{b}x{l}"}
        outs = {}
        for name, make in (("shipped", lambda: HopperDecoder(b, 16, "fp8", q.device, paged=0)),
                           (f"ws{sms}", lambda: ws_decoder(b, q.device, sms)),
                           ("ws128", lambda: ws_decoder(b, q.device, 128))):
            dec = make()
            out = torch.full((q.shape[0], 16, 512), float("nan"), dtype=torch.bfloat16, device="cuda")
            lse = torch.full((q.shape[0], 16), float("nan"), device="cuda")
            fn = lambda: dec.launch(q, cache, kvp, qo, out, lse, default_sm_scale())  # noqa: E731
            fn()
            torch.cuda.synchronize()
            first = out.clone()
            row[name] = _timed(fn, flusher)
            row[name + " repeat bits"] = bool(torch.equal(out.view(torch.int16), first.view(torch.int16)))
            if ref is not None:
                row[name + " ok"] = check_strict(out, ref).passed
            if name != "shipped":
                a, s0 = out.float(), outs["shipped"][0].float()
                row[name + " relL2 vs shipped"] = float((a - s0).norm() / s0.norm())
                row[name + " lse maxdiff"] = float((lse - outs["shipped"][1]).abs().max())
            row[name + " nan"] = bool(torch.isnan(out.float()).any())
            outs[name] = (out, lse)
        rows.append(row)
        print(row, flush=True)
        del q, kv, cache, outs
        torch.cuda.empty_cache()
    with open(os.path.join(out_dir, "ws_fp8.json"), "w") as f:
        json.dump(rows, f, indent=1)
    for r in rows:
        print(f"{r['shape']:>9}: " + "  ".join(f"{k} {r[k]}" for k in r if k in ("shipped", f"ws{sms}", "ws128")))


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.environ.get("OUT", "bench/out/ws_fp8"))
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--shapes", default=",".join(f"{b}x{l}" for b, l in SHAPES))
    args = ap.parse_args()
    if args.compile:
        compile_facts()
    else:
        run(args.out, [tuple(int(v) for v in x.split("x")) for x in args.shapes.split(",")])
