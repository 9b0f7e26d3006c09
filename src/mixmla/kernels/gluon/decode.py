"""The Hopper (sm_90a) MLA decode kernel for MXFP4 caches, contiguous or paged, in Gluon (fp8 caches:
``decode_tma``, which composes this module's work split, query staging, tile pieces and merge).

One launch does the whole call. The grid is persistent (two programs per SM, each one warpgroup);
every program derives its share of the work from the indptrs on the device: each request costs its
tiles of 64 cached tokens plus ``C0`` units of fixed cost, the units of all requests are cut into
``num_programs`` equal ranges, and a program walks the (request, tile range) segments of its range.
A request that lies inside one range is written directly; one cut by range ends leaves a normalized
partial result and its log-sum-exp per piece, counted per request by an atomic. A request cut
into two pieces is merged by the program that counts the second; a longer one by the programs
whose whole range lies inside it (they hold nothing else), each writing slices of the output once
all pieces are counted. Pieces are summed in a fixed order, so the result does not depend on
timing; the launch is cooperative, so every program it waits for is running.

Per 64-token tile (``S^T = K Q^T`` with tokens in the matrix unit's M slot, query rows in N):
each 64-column chunk is decoded from registers loaded one tile ahead straight into the ``wgmma``
A-operand layout (``layouts``), its value columns are also stored once to shared memory, and its
score product is issued while the next chunk decodes. Then the online softmax (float32, base 2),
P^T to shared memory and ``O^T += V^T P^T`` with V^T read from the stored values. While one
program decodes, the other program on the SM keeps the tensor cores busy.
"""

from triton.experimental import gluon
from triton.runtime.jit import constexpr_function
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (fence_async_shared, warpgroup_mma,
                                                               warpgroup_mma_init, warpgroup_mma_wait)

from ..constants import FMT_FP8, FMT_MXFP4, LN2, LOG2E
from . import mxfp4, paging
from .layouts import (CHUNK, NUM_CHUNKS, TILE, VALUE_CHUNKS, chunk_column, operand_order, p_layout, q_layout,
                      score_layout, to_key_operand, v_layout)

VALUE_DIM = gl.constexpr(512)


@gluon.jit
def _add(a, b):
    return a + b


@gluon.jit
def _range_bound(i, num_programs, total):
    """First cost unit of program ``i``'s range (ranges are ``[bound(i), bound(i+1))``). int32: the
    host keeps ``total * num_programs`` below 2**31 (``launch.MAX_COST_UNITS``)."""
    return i * total // num_programs


@gluon.jit
def _program_of(u, num_programs, total):
    """The program whose range holds cost unit ``u``: the last ``i`` with ``bound(i) <= u``."""
    return ((u + 1) * num_programs + total - 1) // total - 1


#: First output column of each value accumulator (``_write_request``): chunk c holds columns
#: 64c .. 64c+63 (in ``chunk_column`` order).
CHUNK_COLUMNS = gl.constexpr(tuple(CHUNK.value * c for c in range(VALUE_CHUNKS.value)))


@gluon.jit
def _opaque_zero(t):
    """0 for a tile index ``t >= 0``, which the compiler cannot prove: a shared-memory view indexed by
    it is recomputed where it is used. Otherwise the compiler hoists the 72 matrix descriptors of
    the loop-invariant query and value buffers out of the tile loop and keeps them in registers
    (spilling). Computed from the loop counter, it stays in uniform registers."""
    return t >> 31


@gluon.jit
def _tile_max(s, red_smem, ROWS: gl.constexpr):
    """Column maxima (ROWS,) of the scores s (TILE, ROWS): each warp reduces its 16 token rows with
    shuffles, the four partial maxima meet in shared memory (one barrier instead of the three of a
    generic cross-warp reduction)."""
    acc_l: gl.constexpr = score_layout(ROWS)
    per_warp = gl.max(gl.reshape(s, [4, 16, ROWS]), axis=1)
    red_smem.store(per_warp)
    gl.thread_barrier()
    all_l: gl.constexpr = gl.DistributedLinearLayout(
        reg_bases=[[0, 1], [0, 8], [1, 0], [2, 0]], lane_bases=[[0, 2], [0, 4], [0, 0], [0, 0], [0, 0]],
        warp_bases=[[0, 0], [0, 0]], block_bases=[], shape=[4, ROWS])
    return gl.convert_layout(gl.max(red_smem.load(all_l), axis=0), gl.SliceLayout(0, acc_l))


@gluon.jit
def _softmax_tile(st, qk, pos, kv_len, last_visible, m_i, l_acc, acc, red_smem, ROWS: gl.constexpr):
    """One tile of the online softmax (base 2), both Hopper kernels' step between the score and the
    value products. st: the tile's score products (TILE, ROWS) float32, token rows ``pos`` (TILE,)
    of the request; qk: (ROWS,) the softmax scale times log2(e) over the query's scale; rows at or
    past kv_len, or past a query row's causal limit last_visible (ROWS,), weigh nothing. m_i: the
    running maxima (ROWS,); l_acc: the running sums kept per token row (TILE, ROWS), added up once
    at the end; acc: value accumulators, a tuple of (CHUNK, ROWS) (all VALUE_CHUNKS, or those of
    some of the value columns). Returns the
    probabilities (TILE, ROWS), the new maxima and sums, and acc rescaled to the new maxima."""
    visible = (pos[:, None] < kv_len) & (pos[:, None] <= last_visible[None, :])
    s = gl.where(visible, st * qk[None, :], float("-inf"))
    m_new = gl.maximum(m_i, _tile_max(s, red_smem, ROWS))
    m_safe = gl.where(m_new == float("-inf"), 0.0, m_new)
    p = gl.exp2(s - m_safe[None, :])
    alpha = gl.exp2(m_i - m_safe)
    l_acc = l_acc * alpha[None, :] + p
    scaled = ()
    for c in gl.static_range(len(acc)):
        scaled = scaled + (acc[c] * alpha[None, :], )
    return p, m_new, l_acc, scaled


@gluon.jit
def _tile_rows(PAGED: gl.constexpr, first, kv_len, t, live, page, num_pages, page_shift, kv_stride, sc_stride):
    """Offsets of tile ``t``'s token rows (cache rows in 32-bit words, scale rows in bytes) and which
    rows exist; ``page``: the tile's ``paging.tile_pages``."""
    row, ok = paging.tile_rows(paging.chunk_rows(2), first, kv_len, t, live, page, num_pages, page_shift, PAGED)
    return paging.row_offsets(row, kv_stride, PAGED), paging.row_offsets(row, sc_stride, PAGED), ok


@gluon.jit
def _tile_pages(PAGED: gl.constexpr, pages_ptr, first, kv_len, t, live, page_shift):
    return paging.tile_pages(paging.chunk_rows(2), pages_ptr, first, kv_len, t, live, page_shift, PAGED)


@gluon.jit
def _load_tile(kv_ptr, sc_ptr, row_off, sc_off, ok):
    raw = ()
    for c in gl.static_range(NUM_CHUNKS):
        raw = raw + (mxfp4.load_chunk(kv_ptr, row_off, sc_ptr, sc_off, ok, c), )
    return raw


@gluon.jit
def _load_query(q_ptr, stride_qt, stride_qh, q_lo, q_len, H: gl.constexpr, ROWS: gl.constexpr):
    """The request's query rows (row n = query token n // H, head n % H) as NUM_CHUNKS (ROWS, CHUNK)
    chunks, columns in ``chunk_column`` order, rows past ``q_len * H`` zero; for ``_stage_query``.

    Each thread loads 8 consecutive columns (one 16-byte load; in ``chunk_column`` order they would
    be 72 two-byte loads per thread), relabelled by ``operand_order``. Issued before the request's
    first tile: after the tile's loads they would wait behind them in the memory system."""
    ql: gl.constexpr = gl.BlockedLayout([ROWS // 16, 8], [4, 8], [4, 1], [1, 0])
    rows = gl.arange(0, ROWS, layout=gl.SliceLayout(1, ql))
    cols = gl.arange(0, CHUNK, layout=gl.SliceLayout(0, ql))
    ok = rows < q_len * H
    row_ptr = q_ptr + (q_lo + rows // H).to(gl.int64) * stride_qt + (rows % H) * stride_qh
    chunks = ()
    for c in gl.static_range(NUM_CHUNKS):
        x = gl.load(row_ptr[:, None] + (CHUNK * c + cols)[None, :], mask=ok[:, None], other=0.0)
        chunks = chunks + (operand_order(x), )
    return chunks


@gluon.jit
def _query_multiplier(chunks, ROWS: gl.constexpr):
    """The power of two per query row (ROWS,) float32 (``SliceLayout(1, ...)`` of the chunks'
    layout) that puts the row's largest magnitude in [2**14, 2**15): what an fp8 cache's query is
    scaled by before its rounding to f16 (``_stage_query``)."""
    rows_l: gl.constexpr = gl.SliceLayout(1, chunks[0].type.layout)
    amax = gl.zeros([ROWS], gl.float32, rows_l)
    for c in gl.static_range(NUM_CHUNKS):
        amax = gl.maximum(amax, gl.max(gl.abs(chunks[c].to(gl.float32)), axis=1))
    exponent = gl.maximum((amax.to(gl.int32, bitcast=True) >> 23) & 0xFF, 15)
    return ((268 - exponent) << 23).to(gl.float32, bitcast=True)


@gluon.jit
def _stage_query(FORMAT: gl.constexpr, q_smem, chunks, ROWS: gl.constexpr):
    """Writes ``_load_query``'s chunks into ``q_smem`` (NUM_CHUNKS, ROWS, CHUNK). fp8 caches compute
    in f16: each row is scaled by a power of two that puts its largest magnitude in [2**14, 2**15)
    (no overflow, 11 significant bits). Returns that per-row multiplier (1 for MXFP4), (ROWS,)
    float32."""
    rows_l: gl.constexpr = gl.SliceLayout(1, chunks[0].type.layout)
    if FORMAT == FMT_FP8:
        mult = _query_multiplier(chunks, ROWS)
        for c in gl.static_range(NUM_CHUNKS):
            q_smem.index(c).store((chunks[c].to(gl.float32) * mult[:, None]).to(gl.float16))
    else:
        for c in gl.static_range(NUM_CHUNKS):
            q_smem.index(c).store(chunks[c])
        mult = gl.full([ROWS], 1.0, gl.float32, rows_l)
    fence_async_shared()
    return mult


@gluon.jit
def _finish(m, l):
    """(1 / l, base-2 log-sum-exp) of finished rows; 0 and -inf for a row that saw nothing."""
    empty = l == 0.0
    inv_l = gl.where(empty, 0.0, 1.0 / gl.where(empty, 1.0, l))
    lse2 = gl.where(empty, float("-inf"), m + gl.log2(gl.where(empty, 1.0, l)))
    return inv_l, lse2


@gluon.jit
def _piece_count(first, last, cost_b, num_programs, total):
    """How many programs hold a piece of a request of ``cost_b`` units whose first and last units
    programs ``first`` and ``last`` hold. With at least as many programs as units each program holds
    at most one unit, so every unit is a piece; with fewer, every program's range is non-empty."""
    return gl.where(num_programs >= total, cost_b, last - first + 1)


@gluon.jit
def _piece_slots(k, first, start_b, num_programs, total):
    """Workspace slots of pieces ``k`` (int32 tensor, 0 .. count - 1) of a request, in program order:
    piece k's program is ``first + k`` (fewer programs than units) or the one holding unit
    ``start_b + k`` (one unit per program). A program's slot is 2i, or 2i + 1 when the request is
    not the first of its range (only ``first``'s range can start before the request)."""
    owner = gl.where(num_programs >= total, _program_of(start_b + k, num_programs, total), first + k)
    return 2 * owner + ((owner == first) & (_range_bound(owner, num_programs, total) < start_b)).to(gl.int32)


@gluon.jit
def _merged_lse(part_lse_ptr, first, count, start_b, num_programs, total, ROWS: gl.constexpr):
    """(1 / weight sum, base-2 log-sum-exp, their max or 0 where empty) of a request's ``count``
    parts (``_piece_slots``), each (ROWS,) in ``SliceLayout(0, _merge_lse_layout())``."""
    PG: gl.constexpr = 16
    ll: gl.constexpr = _merge_lse_layout()
    rows_l = gl.arange(0, ROWS, layout=gl.SliceLayout(0, ll))
    m = gl.full([ROWS], float("-inf"), gl.float32, gl.SliceLayout(0, ll))
    w = gl.zeros([ROWS], gl.float32, gl.SliceLayout(0, ll))
    for g0 in range(0, count, PG):
        k = g0 + gl.arange(0, PG, layout=gl.SliceLayout(1, ll))
        ok = k < count
        slots = _piece_slots(k, first, start_b, num_programs, total)
        lse_i = gl.load(part_lse_ptr + slots[:, None] * ROWS + rows_l[None, :], mask=ok[:, None] & (rows_l < ROWS)[None, :],
                        other=float("-inf"))
        m_new = gl.maximum(m, gl.max(lse_i, axis=0))
        m_safe = gl.where(m_new == float("-inf"), 0.0, m_new)
        w = w * gl.exp2(m - m_safe) + gl.sum(gl.exp2(lse_i - m_safe[None, :]), axis=0)
        m = m_new
    inv_w, lse2 = _finish(m, w)
    m_safe = gl.where(m == float("-inf"), 0.0, m)
    return inv_w, lse2, m_safe


@constexpr_function
def _merge_lse_layout():
    """(16 parts, 16 rows) log-sum-exps of a merge step."""
    return gl.BlockedLayout([16, 1], [1, 32], [1, 4], [1, 0])


@gluon.jit
def _merge_parts(part_o_ptr, part_lse_ptr, out_ptr, stride_ot, stride_oh, lse_ptr, stride_lt, q_lo, q_len,
                 first, count, start_b, num_programs, total, H: gl.constexpr, ROWS: gl.constexpr,
                 WRITE_LSE: gl.constexpr):
    """Merges the ``count`` partial results of one request (``_piece_slots``) in one program.

    A first pass over the log-sum-exps gives the merged one; then the parts' outputs are added
    one after another, each weighted by its share, four parts' loads in flight at a time. Parts
    are added in program order (deterministic)."""
    ll: gl.constexpr = _merge_lse_layout()
    inv_w, lse2, m_safe = _merged_lse(part_lse_ptr, first, count, start_b, num_programs, total, ROWS)

    # Each half of the 512 columns, PARTS parts per step: their loads are issued together (one
    # round trip to L2 per step, not per part), then added one after another in program order, so
    # the result does not depend on timing.
    PARTS: gl.constexpr = 4
    HALF: gl.constexpr = VALUE_DIM // 2
    ol: gl.constexpr = gl.BlockedLayout([1, 4], [1, 32], [4, 1], [1, 0])
    rows = gl.arange(0, ROWS, layout=gl.SliceLayout(1, ol))
    cols = gl.arange(0, HALF, layout=gl.SliceLayout(0, ol))
    m_o = gl.convert_layout(m_safe, gl.SliceLayout(1, ol))
    scale = gl.convert_layout(inv_w, gl.SliceLayout(1, ol))
    ok_rows = rows < q_len * H
    out_rows = out_ptr + (q_lo + rows // H).to(gl.int64) * stride_ot + (rows % H) * stride_oh
    for half in gl.static_range(2):
        offs = rows[:, None] * VALUE_DIM + (HALF * half + cols)[None, :]
        acc = gl.zeros([ROWS, HALF], gl.float32, ol)
        for g0 in range(0, count, PARTS):
            o = ()
            w_rows = ()
            for j in gl.static_range(PARTS):
                live = g0 + j < count
                slot = _piece_slots(gl.minimum(g0 + j, count - 1), first, start_b, num_programs, total)
                o = o + (gl.load(part_o_ptr + slot.to(gl.int64) * (ROWS * VALUE_DIM) + offs, mask=live, other=0.0), )
                w_rows = w_rows + (gl.load(part_lse_ptr + slot * ROWS + rows, mask=live, other=float("-inf")), )
            for j in gl.static_range(PARTS):
                acc += o[j] * gl.exp2(w_rows[j] - m_o)[:, None]
        gl.store(out_rows[:, None] + (HALF * half + cols)[None, :], (acc * scale[:, None]).to(gl.bfloat16),
                 mask=ok_rows[:, None])
    if WRITE_LSE:
        lrows = gl.arange(0, ROWS, layout=gl.SliceLayout(0, ll))
        ltok = (q_lo + lrows // H).to(gl.int64)
        gl.store(lse_ptr + ltok * stride_lt + lrows % H, lse2 * LN2, mask=lrows < q_len * H)


@gluon.jit
def _merge_slices(part_o_ptr, part_lse_ptr, out_ptr, stride_ot, stride_oh, lse_ptr, stride_lt, q_lo, q_len,
                  first, count, start_b, num_programs, total, k, mergers, H: gl.constexpr, ROWS: gl.constexpr,
                  G: gl.constexpr, SLICE: gl.constexpr, WRITE_LSE: gl.constexpr):
    """Merger ``k`` of ``mergers`` of the ``count`` partial results of one request: the output
    columns of slices ``k, k + mergers, ..`` of SLICE columns. G parts' slices (32 KB) are loaded
    at once and summed in a fixed order (within a thread, then across four lanes), so the result
    does not depend on timing or on the number of mergers."""
    ll: gl.constexpr = _merge_lse_layout()
    inv_w, lse2, m_safe = _merged_lse(part_lse_ptr, first, count, start_b, num_programs, total, ROWS)
    # (G parts, ROWS, SLICE): G / 4 parts x 4 columns per thread, parts over 4 lanes, columns over 8.
    tl3: gl.constexpr = gl.BlockedLayout([G // 4, 1, 4], [4, 1, 8], [1, 4, 1], [2, 1, 0])
    pr_l: gl.constexpr = gl.SliceLayout(2, tl3)
    rc_l: gl.constexpr = gl.SliceLayout(0, tl3)
    gi = gl.arange(0, G, layout=gl.SliceLayout(1, pr_l))
    ri = gl.arange(0, ROWS, layout=gl.SliceLayout(0, pr_l))
    ci = gl.arange(0, SLICE, layout=gl.SliceLayout(0, gl.SliceLayout(1, tl3)))
    m3 = gl.convert_layout(m_safe, gl.SliceLayout(0, pr_l))
    rows = gl.arange(0, ROWS, layout=gl.SliceLayout(1, rc_l))
    cols = gl.arange(0, SLICE, layout=gl.SliceLayout(0, rc_l))
    scale = gl.convert_layout(inv_w, gl.SliceLayout(1, rc_l))
    ok_rows = rows < q_len * H
    out_rows = out_ptr + (q_lo + rows // H).to(gl.int64) * stride_ot + (rows % H) * stride_oh
    offs = ri[None, :, None] * VALUE_DIM + ci[None, None, :]
    for sl in range(k, VALUE_DIM // SLICE, mergers):
        acc = gl.zeros([ROWS, SLICE], gl.float32, rc_l)
        for g0 in range(0, count, G):
            j = g0 + gi
            ok = j < count
            slots = _piece_slots(gl.minimum(j, count - 1), first, start_b, num_programs, total)
            lse_t = gl.load(part_lse_ptr + slots[:, None] * ROWS + ri[None, :], mask=ok[:, None], other=float("-inf"))
            o = gl.load(part_o_ptr + (slots.to(gl.int64) * (ROWS * VALUE_DIM) + SLICE * sl)[:, None, None] + offs,
                        mask=ok[:, None, None], other=0.0)
            acc += gl.sum(o * gl.exp2(lse_t - m3[None, :])[:, :, None], axis=0)
        gl.store(out_rows[:, None] + (SLICE * sl + cols)[None, :], (acc * scale[:, None]).to(gl.bfloat16),
                 mask=ok_rows[:, None])
    if WRITE_LSE:
        if k == 0:
            lrows = gl.arange(0, ROWS, layout=gl.SliceLayout(0, ll))
            ltok = (q_lo + lrows // H).to(gl.int64)
            gl.store(lse_ptr + ltok * stride_lt + lrows % H, lse2 * LN2, mask=lrows < q_len * H)


@gluon.jit
def _merge_width(count):
    """Output columns per merge step for a request of ``count`` parts: a step loads 32 KB (up to
    16 parts' slices), so fewer parts make wider slices; at most 512 / width mergers."""
    return gl.where(count <= 4, 128, gl.where(count <= 8, 64, 32))


@gluon.jit
def _merge_share(part_o_ptr, part_lse_ptr, out_ptr, stride_ot, stride_oh, lse_ptr, stride_lt, q_lo, q_len,
                 first, count, start_b, num_programs, total, k, mergers, H: gl.constexpr, ROWS: gl.constexpr,
                 WRITE_LSE: gl.constexpr):
    """``_merge_slices`` at the step shape ``_merge_width`` gives for ``count`` parts (its thresholds,
    written out: a step's shape is a compile-time constant)."""
    if count <= 4:
        _merge_slices(part_o_ptr, part_lse_ptr, out_ptr, stride_ot, stride_oh, lse_ptr, stride_lt, q_lo, q_len,
                      first, count, start_b, num_programs, total, k, mergers, H, ROWS, 4, 128, WRITE_LSE)
    elif count <= 8:
        _merge_slices(part_o_ptr, part_lse_ptr, out_ptr, stride_ot, stride_oh, lse_ptr, stride_lt, q_lo, q_len,
                      first, count, start_b, num_programs, total, k, mergers, H, ROWS, 8, 64, WRITE_LSE)
    else:
        _merge_slices(part_o_ptr, part_lse_ptr, out_ptr, stride_ot, stride_oh, lse_ptr, stride_lt, q_lo, q_len,
                      first, count, start_b, num_programs, total, k, mergers, H, ROWS, 16, 32, WRITE_LSE)


@gluon.jit
def _request_bounds(b, bi, cum, cost, num_programs, total):
    """(first unit, end unit, first program, pieces) of request ``b``: its cost units are
    ``[start_b, cum_b)``, held by programs ``first`` .. in ``nparts`` pieces (``_piece_count``)."""
    cum_b = gl.sum(gl.where(bi == b, cum, 0), axis=0)
    start_b = cum_b - gl.sum(gl.where(bi == b, cost, 0), axis=0)
    first = _program_of(start_b, num_programs, total)
    nparts = _piece_count(first, _program_of(cum_b - 1, num_programs, total), cum_b - start_b, num_programs, total)
    return start_b, cum_b, first, nparts


@gluon.jit
def _wait_count(ptr, target):
    """Waits until the count at ``ptr`` reaches ``target``. Other programs raise it with an acq_rel
    atomic after a barrier over their stores (a release at GPU scope covers what the barrier
    ordered before it); every thread here polls with an acquire load, which orders its own later
    reads of their results, so no thread needs a fence."""
    one: gl.constexpr = gl.BlockedLayout([1], [32], [4], [0])
    ptrs = gl.full([128], 0, gl.int64, one) + ptr.to(gl.int64, bitcast=True)
    while gl.min(gl.inline_asm_elementwise("ld.acquire.gpu.global.b32 $0, [$1];", "=r,l", [ptrs], dtype=gl.int32,
                                           is_pure=False, pack=1), axis=0) < target:
        pass


@gluon.jit
def _program_units(pid, num_programs, kv_indptr, page_indptr, max_pages, page_shift, batch, BLOCK_B: gl.constexpr,
                   C0: gl.constexpr, PAGED: gl.constexpr):
    """Program ``pid``'s share of the work: ``(bi, cost, cum, total, u_begin, u_end)``, the request
    indices (BLOCK_B,), each request's cost units (its tiles plus C0), their inclusive prefix sums,
    the total, and the program's range ``[u_begin, u_end)`` of units (``_range_bound``)."""
    bl: gl.constexpr = gl.BlockedLayout([BLOCK_B // 128], [32], [4], [0])
    bi = gl.arange(0, BLOCK_B, layout=bl)
    live_b = bi < batch
    lens = paging.request_lengths(bi, live_b, kv_indptr, page_indptr, max_pages, page_shift, PAGED)
    cost = gl.where(live_b, (lens + TILE - 1) // TILE + C0, 0)
    cum = gl.associative_scan(cost, 0, _add)
    total = gl.sum(cost, axis=0)
    return bi, cost, cum, total, _range_bound(pid, num_programs, total), _range_bound(pid + 1, num_programs, total)


@gluon.jit
def _piece_tiles(u_begin, u_end, start_b, cum_b, kv_len, C0: gl.constexpr):
    """``(t_begin, t_end)``: the tiles of a request of ``kv_len`` tokens and units ``[start_b, cum_b)``
    that fall in the program's range ``[u_begin, u_end)`` (its first C0 units are its fixed cost)."""
    n_tiles = (kv_len + TILE - 1) // TILE
    t_begin = gl.minimum(gl.maximum(gl.maximum(u_begin, start_b) - start_b - C0, 0), n_tiles)
    t_end = gl.minimum(gl.maximum(gl.minimum(u_end, cum_b) - start_b - C0, 0), n_tiles)
    return t_begin, t_end


@gluon.jit
def _write_request(acc, inv_l, lse2, kscale, n, dcol, COLUMNS: gl.constexpr, row_ok, b, b_first, pid, num_programs,
                   total, u_begin, start_b, first, nparts, q_lo, q_len, out_ptr, stride_ot, stride_oh, lse_ptr,
                   stride_lt, part_o_ptr, part_lse_ptr, counter_ptr, batch, H: gl.constexpr, ROWS: gl.constexpr,
                   WRITE_LSE: gl.constexpr):
    """Writes program ``pid``'s piece of request ``b``: ``acc`` its VALUE_CHUNKS value accumulators
    (CHUNK, ROWS) float32 (``score_layout``; row k of accumulator c is output column
    ``COLUMNS[c] + dcol[k]``),
    ``inv_l`` and ``lse2`` from ``_finish``, ``kscale`` the fp8 scale (1 for MXFP4); ``n`` the query
    rows, ``row_ok`` those of the request. A request of one piece goes to ``out`` (and ``lse``);
    a cut one leaves its normalized partial and log-sum-exp in the program's workspace slot and is
    merged (see the module's docstring); ``b_first``: the program's first request."""
    factor = (inv_l * kscale)[None, :]
    tok = (q_lo + n // H).to(gl.int64)
    if nparts == 1:
        out_rows = out_ptr + tok * stride_ot + (n % H) * stride_oh
        for c in gl.static_range(VALUE_CHUNKS):
            gl.store(out_rows[None, :] + (COLUMNS[c] + dcol)[:, None], (acc[c] * factor).to(gl.bfloat16),
                     mask=row_ok[None, :])
        if WRITE_LSE:
            gl.store(lse_ptr + tok * stride_lt + n % H, lse2 * LN2, mask=row_ok)
    else:
        slot = 2 * pid + (b != b_first).to(gl.int32)
        part_rows = part_o_ptr + (slot * ROWS + n).to(gl.int64) * VALUE_DIM
        for c in gl.static_range(VALUE_CHUNKS):
            gl.store(part_rows[None, :] + (COLUMNS[c] + dcol)[:, None], acc[c] * factor)
        gl.store(part_lse_ptr + slot * ROWS + n, lse2)
        # The count as CUTLASS's semaphores raise it: the barrier orders every thread's
        # stores before the one thread's acq_rel atomic (a scalar atomic runs in one thread
        # and reaches the others through shared memory and a barrier, so a last arriver's
        # reads below follow its acquire).
        gl.thread_barrier()
        done = gl.atomic_add(counter_ptr + b, 1, sem="acq_rel", scope="gpu")
        # Who merges: the programs whose whole range lies in this request (each holds one
        # piece and has nothing else to do) share the merge, each writing slices of the
        # output once every piece is counted; a request without such programs (two pieces)
        # is merged by the program that counts its last piece. Programs holding other
        # requests too never wait.
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
                if left == mergers - 1:  # every merger has seen the full count
                    gl.store(counter_ptr + b, 0)
                    gl.store(counter_ptr + batch + b, 0)


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
    """Grid: (programs,), persistent; one warpgroup (4 warps) per program. FORMAT: MXFP4 only.

    q (total_q, H, 576) bf16, strides (stride_qt, stride_qh, 1). kv: the cache rows as 32-bit words
    (288 code bytes), row stride kv_stride words; sc: the E8M0 rows, stride sc_stride bytes;
    fp8_scale_ptr: not read (``compile.SIGNATURE`` is shared with ``decode_tma``).
    kv_indptr (batch+1,) int32 prefix sums of cache rows, or with PAGED the cached-token counts
    (batch,) int32 and the page table in pages_ptr, page_indptr, page_stride, max_pages (pages of
    1 << page_shift tokens, num_pages in the cache; ``paging``). qo_indptr (batch+1,) int32.
    out (total_q, H, 512) bf16; lse (total_q, H) float32
    natural log (if WRITE_LSE). Workspace: part_o (2 * programs, ROWS, 512) float32, part_lse
    (2 * programs, ROWS) float32, counter (2 * batch,) int32, zero before the first launch and left
    zero. ROWS: query rows per request covered (>= Lq * H, 16). BLOCK_B: power of two >= max(batch,
    128). C0: fixed cost of a request in tile units (balance only). SMALL_PAGES: pages of fewer
    than TILE tokens (``launch.small_pages``): rows are loaded one by one whatever the page size,
    and in such pages each tile's rows are also asked of L2 two tiles ahead.
    """
    gl.static_assert(ROWS == 16, "the Hopper kernel covers 16 query rows per request")
    gl.static_assert(PAGED != 0 or not SMALL_PAGES, "SMALL_PAGES is a form of the paged kernel")
    gl.static_assert(FORMAT == FMT_MXFP4, "decode reads MXFP4 caches (fp8: decode_tma)")
    acc_l: gl.constexpr = score_layout(ROWS)
    MMA_DT: gl.constexpr = gl.bfloat16
    q_smem = gl.allocate_shared_memory(MMA_DT, [NUM_CHUNKS, ROWS, CHUNK], q_layout())
    # One buffer per 64 value columns: the compiler's shared-memory hazard analysis treats stores to
    # slices of one buffer as conflicting and would put a barrier between consecutive chunks.
    v_bufs = ()
    for c in gl.static_range(VALUE_CHUNKS):
        v_bufs = v_bufs + (gl.allocate_shared_memory(MMA_DT, [1, TILE, CHUNK], v_layout()), )
    p_all = gl.allocate_shared_memory(MMA_DT, [1, TILE, ROWS], p_layout(ROWS))
    red_smem = gl.allocate_shared_memory(gl.float32, [4, ROWS], gl.SwizzledSharedLayout(1, 1, 1, [1, 0]))
    one: gl.constexpr = gl.BlockedLayout([1], [32], [4], [0])
    zero_smem = gl.allocate_shared_memory(gl.int32, [1], gl.SwizzledSharedLayout(1, 1, 1, [0]),
                                          gl.zeros([1], gl.int32, one))

    pid = gl.program_id(0)
    num_programs = gl.num_programs(0)
    bi, cost, cum, total, u_begin, u_end = _program_units(pid, num_programs, kv_indptr, page_indptr, max_pages,
                                                          page_shift, batch, BLOCK_B, C0, PAGED)

    kscale = 1.0  # the values' scale (``_write_request``): MXFP4's are in the codes' block scales
    # A 0 read from shared memory: the tables then live in ordinary registers (prmt reads its
    # table operands from them; in uniform registers they are copied out before every use).
    tables = mxfp4.decode_tables(gl.sum(zero_smem.load(one), axis=0))
    n = gl.arange(0, ROWS, layout=gl.SliceLayout(0, acc_l))
    # Row k of a value accumulator is stored column chunk_column(k) of its chunk (the value tile is
    # written in the key operand's column order).
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

            q_rows = _load_query(q_ptr, stride_qt, stride_qh, q_lo, q_len, H, ROWS)
            # A tile's page entries are read two tiles before its rows (``paging``).
            page = _tile_pages(PAGED, pages_ptr, first_row, kv_len, t_begin, t_begin < t_end, page_shift)
            row_off, sc_off, ok = _tile_rows(PAGED, first_row, kv_len, t_begin, t_begin < t_end, page, num_pages,
                                             page_shift, kv_stride, sc_stride)
            raw = _load_tile(kv_ptr, sc_ptr, row_off, sc_off, ok)
            page = _tile_pages(PAGED, pages_ptr, first_row, kv_len, t_begin + 1, t_begin + 1 < t_end, page_shift)
            page2 = _tile_pages(PAGED, pages_ptr, first_row, kv_len, t_begin + 2, t_begin + 2 < t_end, page_shift)
            q_mult = _stage_query(FORMAT, q_smem, q_rows, ROWS)
            qk = (sm_scale * LOG2E * kscale) / gl.convert_layout(q_mult, gl.SliceLayout(0, acc_l))
            last_visible = kv_len - q_len + n // H
            row_ok = n < q_len * H

            m_i = gl.full([ROWS], float("-inf"), gl.float32, gl.SliceLayout(0, acc_l))
            l_acc = gl.zeros([TILE, ROWS], gl.float32, acc_l)
            st = gl.zeros([TILE, ROWS], gl.float32, acc_l)
            acc = ()
            for c in gl.static_range(VALUE_CHUNKS):
                acc = acc + (warpgroup_mma_init(gl.zeros([CHUNK, ROWS], gl.float32, acc_l)), )
            for t in range(t_begin, t_end):
                # The value product of the previous tile still reads the value buffers.
                acc = warpgroup_mma_wait(0, deps=acc)
                row_off, sc_off, ok = _tile_rows(PAGED, first_row, kv_len, t + 1, t + 1 < t_end, page, num_pages,
                                                 page_shift, kv_stride, sc_stride)
                page = page2
                page2 = _tile_pages(PAGED, pages_ptr, first_row, kv_len, t + 3, t + 3 < t_end, page_shift)
                if SMALL_PAGES:
                    # A tile's rows come from many pages, each a new DRAM page: the tile after
                    # next's rows (its entries are in hand) are asked of L2 now, so that their
                    # loads a tile later find them there.
                    pf_off, pf_sc, pf_ok = _tile_rows(PAGED, first_row, kv_len, t + 2, t + 2 < t_end, page, num_pages,
                                                      page_shift, kv_stride, sc_stride)
                    mxfp4.prefetch_rows(kv_ptr, pf_off, sc_ptr, pf_sc, pf_ok)
                nxt = ()
                for c in gl.static_range(NUM_CHUNKS):
                    keys = to_key_operand(mxfp4.decode_chunk(raw[c][0], raw[c][1], tables), ROWS)
                    # The next tile's chunk c, loaded as this one is decoded.
                    nxt = nxt + (mxfp4.load_chunk(kv_ptr, row_off, sc_ptr, sc_off, ok, c), )
                    if c < VALUE_CHUNKS:
                        v_bufs[c].index(0).store(keys)
                    q_c = q_smem.index(c + _opaque_zero(t))
                    st = warpgroup_mma(keys, q_c.permute((1, 0)), st,
                                       use_acc=c > 0, is_async=True)
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
                acc = ()
                for c in gl.static_range(VALUE_CHUNKS):
                    acc = acc + (warpgroup_mma(v_bufs[c].index(z).permute((1, 0)), p_smem, scaled[c], is_async=True), )
            acc = warpgroup_mma_wait(0, deps=acc)
            inv_l, lse2 = _finish(m_i, gl.sum(l_acc, axis=0))
            _write_request(acc, inv_l, lse2, kscale, n, dcol, CHUNK_COLUMNS, row_ok, b, b_first, pid, num_programs,
                           total, u_begin, start_b, first, nparts, q_lo, q_len, out_ptr, stride_ot, stride_oh,
                           lse_ptr, stride_lt, part_o_ptr, part_lse_ptr, counter_ptr, batch, H, ROWS, WRITE_LSE)
