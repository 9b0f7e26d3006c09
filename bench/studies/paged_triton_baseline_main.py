"""The Triton decode kernel of main at 982e0da (PERF step 44 and dd8ac7f: page entries of gathered
tiles read through the pipeliner with the rows, masked by position; 64-bit row offsets; whole-tile
entries int64), before the windowed gather of branch paged7. Kept for ``paged_triton.py
--baseline`` to time beside the shipped kernel in one run; not used by mixmla. Its parameters are
a subset of the shipped kernel's, passed by name. Made from ``git show
982e0da:src/mixmla/kernels/triton/decode.py`` with that commit's ``paging`` device functions
inlined (the shipped ``paging`` has changed).
"""

import triton
import triton.language as tl

from mixmla.kernels.constants import FMT_FP8, FMT_FP8_FNUZ, LN2
from mixmla.kernels.triton.decode import _dot, query_row_multiplier
from mixmla.kernels.triton.pieces import NOPE_HALF, ROPE_HALF, load_query_piece, store_value_rows
from mixmla.kernels.triton.softmax import finish_rows, online_softmax_step
from mixmla.kernels.triton.tiles import load_key_tile


@triton.jit
def request_tokens(req, kv_indptr, pages, page_stride, page_indptr, max_pages, PAGE_SIZE: tl.constexpr,
                   CSR: tl.constexpr):
    """``(first, kv_len)`` of request ``req``: its first cache row (contiguous) or the offset of its
    first page-table entry in ``pages`` (paged), int64; its cached tokens, int32."""
    if PAGE_SIZE == 0:
        first = tl.load(kv_indptr + req).to(tl.int64)
        kv_len = (tl.load(kv_indptr + req + 1) - first).to(tl.int32)
    else:
        if CSR:
            first = tl.load(page_indptr + req).to(tl.int64)
            num_pages = (tl.load(page_indptr + req + 1) - first).to(tl.int32)
        else:
            first = req.to(tl.int64) * page_stride
            num_pages = max_pages
        kv_len = tl.minimum(tl.load(kv_indptr + req).to(tl.int32), num_pages * PAGE_SIZE)
        kv_len = tl.maximum(kv_len, 0)
    return first, kv_len


@triton.jit
def tile_pages(first, t0, t_end, pages, PAGE_SIZE: tl.constexpr, BLOCK_T: tl.constexpr):
    """The page-table entry (int64 scalar: a wide entry must not wrap into the pool) of the tile of token positions ``t0 .. t0 + BLOCK_T``
    (t0 a multiple of BLOCK_T) when pages hold whole tiles, for ``token_rows``; none (0) when the
    tile starts at or past ``t_end``, when contiguous, and when pages are smaller than a tile
    (``token_rows`` gathers their entries with the rows; see ``loop_stages``).

    The decode loop reads the next tile's entry while it works on this one, so the row loads never
    wait on the table load of the same step."""
    if PAGE_SIZE == 0 or PAGE_SIZE % BLOCK_T != 0:
        return tl.zeros((), tl.int64)
    else:
        return tl.load(pages + first + t0 // PAGE_SIZE, mask=t0 < t_end, other=0).to(tl.int64)


@triton.jit
def token_rows(first, t0, tok_ok, page, pages, num_pages, PAGE_SIZE: tl.constexpr, BLOCK_T: tl.constexpr):
    """``(rows, ok)``: the cache rows (T,) int64 of the tile of token positions ``t0 ..
    t0 + BLOCK_T`` (t0 a multiple of BLOCK_T) of a request whose ``request_tokens`` gave ``first``,
    and ``tok_ok`` (T,) narrowed to the tokens whose page entry lies in ``[0, num_pages)`` (paged;
    contiguous: unchanged). ``page``: the tile's ``tile_pages``.

    Pages of at least a tile (a multiple of BLOCK_T) hold a whole tile: one page entry is read and
    the rows are consecutive, as in the contiguous layout, which keeps the contiguous kernel's
    address arithmetic and registers. Smaller pages are gathered token by token."""
    pos = t0 + tl.arange(0, BLOCK_T)
    if PAGE_SIZE == 0:
        return first + pos, tok_ok
    elif PAGE_SIZE % BLOCK_T == 0:
        ok = tok_ok & (page >= 0) & (page < num_pages)
        return page * PAGE_SIZE + (t0 % PAGE_SIZE) + tl.arange(0, BLOCK_T), ok
    else:
        entry = tl.load(pages + first + pos // PAGE_SIZE, mask=tok_ok, other=0).to(tl.int64)
        ok = tok_ok & (entry >= 0) & (entry < num_pages)
        return entry * PAGE_SIZE + pos % PAGE_SIZE, ok


@triton.jit
def mla_decode_kernel_baseline(
    q_ptr, stride_qt, stride_qh,
    kv_ptr, kv_stride, scale_ptr, scale_stride,
    kv_indptr, qo_indptr,
    pages, page_stride, page_indptr, max_pages, num_pages,
    work_req, work_split, work_nsplit,
    out_ptr, stride_ot, stride_oh, lse_ptr, stride_lt,
    part_o_ptr, part_lse_ptr, rows_max,
    sm_scale,
    H: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_T: tl.constexpr, FORMAT: tl.constexpr,
    DIRECT: tl.constexpr, WRITE_LSE: tl.constexpr, INTERPRETED: tl.constexpr,
    PAGE_SIZE: tl.constexpr, CSR: tl.constexpr, LOOP_STAGES: tl.constexpr,
):
    """Grid: (work items, row blocks).

    q (total_q, H, 576) bf16 with strides (stride_qt, stride_qh, 1). Cache rows and their scales
    as described in ``tiles.load_raw_tile`` (fp8: ``scale_ptr`` is the per-tensor float32 scale).
    kv_indptr, pages, page_stride, page_indptr, max_pages, num_pages, PAGE_SIZE, CSR: where each
    request's tokens are (``paging``; PAGE_SIZE 0 is the contiguous layout, the others unused).
    LOOP_STAGES: the token loop's pipeline stages (``paging.loop_stages``; None: num_stages).
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
        tok, tok_ok = token_rows(kv_first, t0, pos < t_end, page, pages, num_pages, PAGE_SIZE, BLOCK_T)
        # One decoded tile serves as the keys (all 576 columns) and the values (the nope pieces).
        k_nope_a, k_nope_b, k_rope_a, k_rope_b = load_key_tile(
            kv_ptr, kv_stride, scale_ptr, scale_stride, tok, tok_ok, FORMAT, INTERPRETED)
        scores = _dot(q_nope_a, tl.trans(k_nope_a), INTERPRETED)
        scores += _dot(q_nope_b, tl.trans(k_nope_b), INTERPRETED)
        scores += _dot(q_rope_a, tl.trans(k_rope_a), INTERPRETED)
        scores += _dot(q_rope_b, tl.trans(k_rope_b), INTERPRETED)
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
