"""The split-K MLA decode kernel.

One program handles one work item of the plan (a request and one contiguous chunk of its cached
token positions, wherever ``paging`` says they are stored) for ``BLOCK_R`` query rows (a row is one (query token, head) pair). It reads each cached
token once and uses it for every row, both as a key (576 values) and as a value (its first 512),
keeps the online softmax in float32, and writes either the final bf16 output (when the request has
a single chunk) or a normalized partial result and its log-sum-exp for ``combine.py``.

Chunk bounds are derived on the device from ``kv_indptr`` and the number of chunks the plan gave
the request, so new indptr contents never make the kernel read outside a request; they can only
make the plan's balance worse.
"""

import triton
import triton.language as tl

from ..constants import FMT_FP8, FMT_FP8_FNUZ, LN2
from .paging import gather_fill, gathered_visible, request_tokens, tile_end, tile_pages, token_rows
from .pieces import NOPE_HALF, ROPE_HALF, load_query_piece, store_value_rows
from .softmax import finish_rows, online_softmax_step
from .tiles import load_key_tile


@triton.jit
def _dot(a, b, INTERPRETED: tl.constexpr):
    # Triton 3.6's interpreter returns garbage for bf16 dots, so it computes them in float32.
    if INTERPRETED:
        return tl.dot(a.to(tl.float32), b.to(tl.float32), input_precision="ieee")
    else:
        return tl.dot(a, b)


@triton.jit
def query_row_multiplier(a, b, c, d):
    """Per row of the four query pieces (R, *): ``2**(141 - E)``, E the float32 exponent field of
    the row's largest magnitude (at least 15, so the multiplier is finite), which scales that
    magnitude into [2**14, 2**15), the top of f16's range. float32 (R,)."""
    amax = tl.maximum(tl.maximum(tl.max(tl.abs(a.to(tl.float32)), axis=1), tl.max(tl.abs(b.to(tl.float32)), axis=1)),
                      tl.maximum(tl.max(tl.abs(c.to(tl.float32)), axis=1), tl.max(tl.abs(d.to(tl.float32)), axis=1)))
    exponent = tl.maximum((amax.to(tl.int32, bitcast=True) >> 23) & 0xFF, 15)
    return ((268 - exponent) << 23).to(tl.float32, bitcast=True)


@triton.jit
def mla_decode_kernel(
    q_ptr, stride_qt, stride_qh,
    kv_ptr, kv_stride, scale_ptr, scale_stride,
    kv_indptr, qo_indptr,
    pages, page_stride, page_indptr, max_pages, num_pages, table_len,
    work_req, work_split, work_nsplit,
    out_ptr, stride_ot, stride_oh, lse_ptr, stride_lt,
    part_o_ptr, part_lse_ptr, rows_max,
    sm_scale,
    H: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_T: tl.constexpr, FORMAT: tl.constexpr,
    DIRECT: tl.constexpr, WRITE_LSE: tl.constexpr, INTERPRETED: tl.constexpr,
    PAGE_SIZE: tl.constexpr, CSR: tl.constexpr, LOOP_STAGES: tl.constexpr, ROWS32: tl.constexpr,
    WIDE_TABLE: tl.constexpr, WINDOW: tl.constexpr,
):
    """Grid: (work items, row blocks).

    q (total_q, H, 576) bf16 with strides (stride_qt, stride_qh, 1). Cache rows and their scales
    as described in ``tiles.load_raw_tile`` (fp8: ``scale_ptr`` is the per-tensor float32 scale).
    kv_indptr, pages, page_stride, page_indptr, max_pages, num_pages, PAGE_SIZE, CSR: where each
    request's tokens are (``paging``; PAGE_SIZE 0 is the contiguous layout, the others unused).
    LOOP_STAGES: the token loop's pipeline stages (``paging.loop_stages``; None: num_stages).
    WINDOW: pages smaller than a tile are gathered through one window of page-table entries per
    tile (``paging.windowed_gather``), else one entry per token; table_len: the page table's extent
    in entries; WIDE_TABLE: it holds a tile's window of entries (``paging.wide_table``); ROWS32:
    windowed rows addressed with 32-bit offsets (``paging.rows32``).
    work_req/work_split/work_nsplit (num_work,) int32: the request of each work item, which chunk
    it is and how many chunks that request has. DIRECT: write ``out`` (total_q, H, 512) in the
    pointer's dtype (bf16, or float32 for callers that merge further) and ``lse`` (total_q, H)
    float32 natural log; otherwise write ``part_o`` (num_work, rows_max, 512) float32 and
    ``part_lse`` (num_work, rows_max) base 2. sm_scale: softmax scale. INTERPRETED:
    running in Triton's interpreter (float32 dots, portable decoders; see ``_dot``).
    """
    F16_OPERANDS: tl.constexpr = (FORMAT == FMT_FP8) or (FORMAT == FMT_FP8_FNUZ)
    work = tl.program_id(0)
    row_block = tl.program_id(1)
    req = tl.load(work_req + work)
    split = tl.load(work_split + work)
    num_splits = tl.load(work_nsplit + work)
    kv_first, kv_len = request_tokens(req, kv_indptr, pages, page_stride, page_indptr, max_pages, PAGE_SIZE, CSR)
    kv_len, fill = gather_fill(kv_first, kv_len, pages, num_pages, table_len, PAGE_SIZE, BLOCK_T, WINDOW)
    q_start = tl.load(qo_indptr + req).to(tl.int64)
    q_len = (tl.load(qo_indptr + req + 1) - q_start).to(tl.int32)

    # fp8 tiles decode to the stored values; the tensor scale joins the softmax and output scales.
    if F16_OPERANDS:
        value_scale = tl.load(scale_ptr)
    else:
        value_scale = 1.0
    qk_scale = sm_scale * value_scale * 1.4426950408889634  # scores in base 2

    rows = row_block * BLOCK_R + tl.arange(0, BLOCK_R)
    # rows_max bounds the workspace: a caller that gave a request more query tokens than at plan
    # time gets those rows unwritten rather than a write past the partial buffers.
    row_ok = (rows < q_len * H) & (rows < rows_max)
    q_tok = rows // H
    head = rows % H
    q_rows = q_ptr + (q_start + q_tok) * stride_qt + head * stride_qh
    q_nope_a = load_query_piece(q_rows, row_ok, False, False, FORMAT, NOPE_HALF)
    q_nope_b = load_query_piece(q_rows, row_ok, False, True, FORMAT, NOPE_HALF)
    q_rope_a = load_query_piece(q_rows, row_ok, True, False, FORMAT, ROPE_HALF)
    q_rope_b = load_query_piece(q_rows, row_ok, True, True, FORMAT, ROPE_HALF)
    if F16_OPERANDS:
        # fp8 keys and values convert to f16 exactly in one instruction per pair (bf16 would need
        # bit moves), so the query joins them in f16, scaled per row by a power of two that puts
        # its largest value in [2**14, 2**15): no overflow, and more significant bits than bf16.
        q_mult = query_row_multiplier(q_nope_a, q_nope_b, q_rope_a, q_rope_b)
        q_nope_a = (q_nope_a.to(tl.float32) * q_mult[:, None]).to(tl.float16)
        q_nope_b = (q_nope_b.to(tl.float32) * q_mult[:, None]).to(tl.float16)
        q_rope_a = (q_rope_a.to(tl.float32) * q_mult[:, None]).to(tl.float16)
        q_rope_b = (q_rope_b.to(tl.float32) * q_mult[:, None]).to(tl.float16)
        row_qk_scale = qk_scale / q_mult
    else:
        row_qk_scale = tl.full((BLOCK_R,), 1.0, tl.float32) * qk_scale
    if INTERPRETED:
        q_nope_a = q_nope_a.to(tl.float32)
        q_nope_b = q_nope_b.to(tl.float32)
        q_rope_a = q_rope_a.to(tl.float32)
        q_rope_b = q_rope_b.to(tl.float32)

    # The query tokens are the last q_len positions: token i sees positions 0 .. kv_len - q_len + i.
    last_visible = kv_len - q_len + q_tok
    chunk = tl.cdiv(tl.cdiv(kv_len, num_splits), BLOCK_T) * BLOCK_T
    t_begin = split * chunk
    t_end = tl.minimum(kv_len, t_begin + chunk)
    # Positions no row of this block can see need not be read.
    block_last_tok = tl.minimum(q_len - 1, (row_block * BLOCK_R + BLOCK_R - 1) // H)
    t_end = tl.minimum(t_end, kv_len - q_len + block_last_tok + 1)

    # Pages smaller than a tile gathered through a window of entries (``token_rows``): the window
    # may hold positions outside the chunk, so their scores are masked by position, not by ``tok_ok``.
    WINDOWED: tl.constexpr = WINDOW and PAGE_SIZE != 0 and PAGE_SIZE % BLOCK_T != 0
    row_last = tl.minimum(last_visible, t_end - 1)
    m = tl.full((BLOCK_R,), float("-inf"), tl.float32)
    l = tl.zeros((BLOCK_R,), tl.float32)
    acc_a = tl.zeros((BLOCK_R, NOPE_HALF), tl.float32)
    acc_b = tl.zeros((BLOCK_R, NOPE_HALF), tl.float32)
    # Whole-tile pages: each entry is read a tile ahead of the rows it locates (``tile_pages``).
    page_next = tile_pages(kv_first, t_begin, t_end, pages, PAGE_SIZE, BLOCK_T)
    for t0 in tl.range(t_begin, t_end, BLOCK_T, num_stages=LOOP_STAGES):
        pos = t0 + tl.arange(0, BLOCK_T)
        page = page_next
        page_next = tile_pages(kv_first, t0 + BLOCK_T, t_end, pages, PAGE_SIZE, BLOCK_T)
        end = tile_end(t0, t_end, page, num_pages, PAGE_SIZE, BLOCK_T, DIRECT)
        tok, tok_read, tok_ok, back = token_rows(kv_first, kv_len, fill, t0, pos < end, page, pages, num_pages,
                                                 table_len, PAGE_SIZE, BLOCK_T, ROWS32, WIDE_TABLE, WINDOW, DIRECT)
        # One decoded tile serves as the keys (all 576 columns) and the values (the nope pieces).
        k_nope_a, k_nope_b, k_rope_a, k_rope_b = load_key_tile(
            kv_ptr, kv_stride, scale_ptr, scale_stride, tok, tok_read, FORMAT, INTERPRETED)
        scores = _dot(q_nope_a, tl.trans(k_nope_a), INTERPRETED)
        scores += _dot(q_nope_b, tl.trans(k_nope_b), INTERPRETED)
        scores += _dot(q_rope_a, tl.trans(k_rope_a), INTERPRETED)
        scores += _dot(q_rope_b, tl.trans(k_rope_b), INTERPRETED)
        if WINDOWED:
            visible = gathered_visible(tok_ok, t0, back, row_last)
        else:
            visible = tok_ok[None, :] & (pos[None, :] <= last_visible[:, None])
        scores = tl.where(visible, scores * row_qk_scale[:, None], float("-inf"))
        p, alpha, m, l = online_softmax_step(scores, m, l, 1)
        # f16 keeps p (<= 1) at least as exactly as bf16 down to 2**-24.
        p_op = p.to(tl.float16) if F16_OPERANDS else p.to(tl.bfloat16)
        if INTERPRETED:
            p_op = p_op.to(tl.float32)
        acc_a = acc_a * alpha[:, None] + _dot(p_op, k_nope_a, INTERPRETED)
        acc_b = acc_b * alpha[:, None] + _dot(p_op, k_nope_b, INTERPRETED)

    inv_l, lse2 = finish_rows(m, l)
    out_factor = (inv_l * value_scale)[:, None]
    if DIRECT:
        out_rows = out_ptr + (q_start + q_tok) * stride_ot + head * stride_oh
        store_value_rows(out_rows, acc_a * out_factor, acc_b * out_factor, row_ok, FORMAT)
        if WRITE_LSE:
            tl.store(lse_ptr + (q_start + q_tok) * stride_lt + head, lse2 * LN2, mask=row_ok)
    else:
        part_rows = work.to(tl.int64) * rows_max + rows
        store_value_rows(part_o_ptr + part_rows * (2 * NOPE_HALF), acc_a * out_factor, acc_b * out_factor,
                         row_ok, FORMAT)
        tl.store(part_lse_ptr + part_rows, lse2, mask=row_ok)
