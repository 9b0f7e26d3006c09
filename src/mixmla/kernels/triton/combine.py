"""Merges the per-chunk partial results of ``decode.py`` into the final output.

Each partial is a normalized output row and its base-2 log-sum-exp; the merge is the softmax's
own online step (``softmax.online_softmax_step``) with the chunks' log-sum-exps as the scores, so
a request may have any number of chunks, and a chunk that saw nothing (``lse = -inf``) weighs
nothing.
"""

import triton
import triton.language as tl

from ..constants import LN2
from .softmax import finish_rows, online_softmax_step

VALUE_DIM = tl.constexpr(512)


@triton.jit
def mla_combine_kernel(
    part_o_ptr, part_lse_ptr, rows_max, split_indptr, qo_indptr,
    out_ptr, stride_ot, stride_oh, lse_ptr, stride_lt,
    H: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_S: tl.constexpr,
    WRITE_LSE: tl.constexpr,
):
    """Grid: (batch, row blocks, 512 / BLOCK_D column blocks).

    part_o (num_work, rows_max, 512) float32 and part_lse (num_work, rows_max) base 2, as the
    decode kernel wrote them; the work items of request b are ``split_indptr[b] ..
    split_indptr[b+1]``. Writes out (total_q, H, 512) bf16 or float32 (the pointer's dtype: a
    float32 out keeps the merged partials unrounded, for callers that merge further) and, if
    WRITE_LSE, lse (total_q, H) float32 natural log. BLOCK_S partials are read with one load each step (all of them when a
    request has at most BLOCK_S chunks), so a request with many chunks waits for one memory
    latency per BLOCK_S chunks, not one per chunk.
    """
    req = tl.program_id(0)
    row_block = tl.program_id(1)
    col_block = tl.program_id(2)
    q_start = tl.load(qo_indptr + req).to(tl.int64)
    q_len = tl.load(qo_indptr + req + 1) - q_start
    rows = row_block * BLOCK_R + tl.arange(0, BLOCK_R)
    row_ok = rows < q_len * H
    cols = col_block * BLOCK_D + tl.arange(0, BLOCK_D)
    w_begin = tl.load(split_indptr + req)
    w_end = tl.load(split_indptr + req + 1)

    m = tl.full((BLOCK_R,), float("-inf"), tl.float32)
    weight_sum = tl.zeros((BLOCK_R,), tl.float32)
    acc = tl.zeros((BLOCK_R, BLOCK_D), tl.float32)
    for s0 in tl.range(w_begin, w_end, BLOCK_S):
        splits = s0 + tl.arange(0, BLOCK_S)
        ok = (splits < w_end)[:, None] & row_ok[None, :]
        part_rows = splits.to(tl.int64)[:, None] * rows_max + rows[None, :]  # (S, R)
        lse2 = tl.load(part_lse_ptr + part_rows, mask=ok, other=float("-inf"))
        part = tl.load(part_o_ptr + part_rows[:, :, None] * VALUE_DIM + cols[None, None, :], mask=ok[:, :, None],
                       other=0.0)
        # The partials' log-sum-exps are scores of a softmax over chunks: the same online step.
        weight, alpha, m, weight_sum = online_softmax_step(lse2, m, weight_sum, 0)
        acc = acc * alpha[:, None] + tl.sum(part * weight[:, :, None], axis=0)

    inv_w, lse2 = finish_rows(m, weight_sum)
    q_tok = rows // H
    head = rows % H
    out_rows = out_ptr + (q_start + q_tok) * stride_ot + head * stride_oh
    tl.store(out_rows[:, None] + cols[None, :], (acc * inv_w[:, None]).to(out_ptr.dtype.element_ty),
             mask=row_ok[:, None])
    if WRITE_LSE:
        tl.store(lse_ptr + (q_start + q_tok) * stride_lt + head, lse2 * LN2, mask=row_ok & (col_block == 0))
