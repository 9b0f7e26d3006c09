"""The split-K MLA decode kernel.

One program handles one work item of the plan (a request and one contiguous chunk of its cached
tokens) for ``BLOCK_R`` query rows (a row is one (query token, head) pair). It reads each cached
token once and uses it for every row, both as a key (576 values) and as a value (its first 512),
keeps the online softmax in float32, and writes either the final bf16 output (when the request has
a single chunk) or a normalized partial result and its log-sum-exp for ``combine.py``.

Chunk bounds are derived on the device from ``kv_indptr`` and the number of chunks the plan gave
the request, so new indptr contents never make the kernel read outside a request; they can only
make the plan's balance worse.
"""

import triton
import triton.language as tl

from .loaders import (FMT_FP8, FMT_FP8_FNUZ, NOPE_HALF, ROPE_HALF, decode_span, decode_tile, load_key_tile,
                      load_query_piece, load_raw_tile, load_value_tile, store_value_rows)
from .softmax import LN2, finish_rows, online_softmax_step


@triton.jit
def _dot(a, b, DOT_F32: tl.constexpr):
    # Triton 3.6's interpreter returns garbage for bf16 dots, so it computes them in float32.
    if DOT_F32:
        return tl.dot(a.to(tl.float32), b.to(tl.float32), input_precision="ieee")
    else:
        return tl.dot(a, b)


@triton.jit
def _row_max_exponent(a, b, c, d, LOWEST: tl.constexpr):
    """Per row of the four query pieces (R, *): the float32 exponent field of the row's largest
    magnitude, at least LOWEST. int32 (R,)."""
    amax = tl.maximum(tl.maximum(tl.max(tl.abs(a.to(tl.float32)), axis=1), tl.max(tl.abs(b.to(tl.float32)), axis=1)),
                      tl.maximum(tl.max(tl.abs(c.to(tl.float32)), axis=1), tl.max(tl.abs(d.to(tl.float32)), axis=1)))
    return tl.maximum((amax.to(tl.int32, bitcast=True) >> 23) & 0xFF, LOWEST)


@triton.jit
def query_row_multiplier(a, b, c, d):
    """Per row of the four query pieces: ``2**(141 - E)`` (E from ``_row_max_exponent``, at least 15
    so the multiplier is finite), which scales the row's largest magnitude into [2**14, 2**15), the
    top of f16's range. float32 (R,)."""
    return ((268 - _row_max_exponent(a, b, c, d, 15)) << 23).to(tl.float32, bitcast=True)


@triton.jit
def query_row_multiplier_fp8(a, b, c, d):
    """Like ``query_row_multiplier`` but ``2**(134 - E)``: the largest magnitude lands in
    [2**7, 2**8), inside e4m3's range (448). float32 (R,)."""
    return ((261 - _row_max_exponent(a, b, c, d, 8)) << 23).to(tl.float32, bitcast=True)


@triton.jit
def _round_to_4_bits(x):
    # Veltkamp splitting: x rounded to 4 significant bits (e4m3's precision), exact float32 steps.
    c = x * 1048577.0  # 2**20 + 1
    return c - (c - x)


@triton.jit
def split_fp8(x, mult, DOT_F32: tl.constexpr):
    """``x * mult`` (R, W) as two e4m3 terms ``(hi, lo)``: hi has e4m3's 4 significant bits, lo the
    next 4, so a bf16 x (8 bits) is represented exactly unless lo falls below e4m3's normal range
    (elements under 2**-10 of the row's largest: negligible in the scores). DOT_F32 (the
    interpreter, whose float32 -> e4m3 conversion in Triton 3.6 rounds ties away from zero and
    misrounds near the subnormal range): the same split in float32, by exact arithmetic."""
    scaled = x.to(tl.float32) * mult[:, None]
    if DOT_F32:
        hi = _round_to_4_bits(scaled)
        return hi, _round_to_4_bits(scaled - hi)
    else:
        hi = scaled.to(tl.float8e4nv)
        return hi, (scaled - hi.to(tl.float32)).to(tl.float8e4nv)


@triton.jit
def scores_fp8(k, q_hi, q_lo, acc, DOT_F32: tl.constexpr, IMPRECISE: tl.constexpr):
    """``acc + k @ (q_hi + q_lo)^T``: k (T, W) e4m3 keys straight from the cache, q_hi/q_lo
    (R, W) e4m3; (T, R) float32. IMPRECISE: products the fp8 matrix unit may sum in its reduced
    precision before Triton adds them to the float32 accumulator (0: Triton's default)."""
    if DOT_F32:
        q = q_hi.to(tl.float32) + q_lo.to(tl.float32)
        return tl.dot(k.to(tl.float32), tl.trans(q), acc, input_precision="ieee")
    else:
        WIDTH: tl.constexpr = k.shape[1]
        if IMPRECISE > 0:
            CHUNK: tl.constexpr = IMPRECISE if IMPRECISE < WIDTH else WIDTH
            acc = tl.dot(k, tl.trans(q_hi), acc, max_num_imprecise_acc=CHUNK)
            return tl.dot(k, tl.trans(q_lo), acc, max_num_imprecise_acc=CHUNK)
        else:
            acc = tl.dot(k, tl.trans(q_hi), acc)
            return tl.dot(k, tl.trans(q_lo), acc)


@triton.jit
def mla_decode_kernel(
    q_ptr, stride_qt, stride_qh,
    kv_ptr, kv_stride, scale_ptr, scale_stride, fp8_scale_ptr,
    kv_indptr, qo_indptr,
    work_req, work_split, work_nsplit,
    out_ptr, stride_ot, stride_oh, lse_ptr, stride_lt,
    part_o_ptr, part_lse_ptr, rows_max,
    sm_scale, value_scale,
    H: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_T: tl.constexpr, FORMAT: tl.constexpr,
    DIRECT: tl.constexpr, WRITE_LSE: tl.constexpr, DOT_F32: tl.constexpr, RELOAD_VALUES: tl.constexpr,
    USE_ASM: tl.constexpr, TOKENS_IN_M: tl.constexpr, REGISTER_PREFETCH: tl.constexpr,
    FP8_SCORES: tl.constexpr, FP8_IMPRECISE: tl.constexpr, LAUNCH_DEPENDENTS: tl.constexpr = False,
):
    """Grid: (work items, row blocks).

    q (total_q, H, 576) bf16 with strides (stride_qt, stride_qh, 1). Cache rows as described in
    ``loaders.load_key_tile``. work_req/work_split/work_nsplit (num_work,) int32: the request of
    each work item, which chunk it is and how many chunks that request has. DIRECT: write
    ``out`` (total_q, H, 512) bf16 and ``lse`` (total_q, H) float32 natural log; otherwise write
    ``part_o`` (num_work, rows_max, 512) float32 and ``part_lse`` (num_work, rows_max) base 2.
    RELOAD_VALUES: read the value columns again (see ``loaders.load_value_tile``) instead of
    reusing the decoded keys. USE_ASM: decode with packed PTX (NVIDIA) instead of portable Triton
    operations; both give the same bits. TOKENS_IN_M: compute the transposed products (tokens in
    the matrix unit's row slot). REGISTER_PREFETCH: load the next tile's stored bits into registers
    while this one is computed, instead of Triton's asynchronous copies through shared memory
    (for the compressed formats that copy is one more shared-memory round trip per byte).
    FP8_SCORES (fp8 e4m3fn caches, BLOCK_T = 64): scores on the fp8 matrix unit, S^T = K (Q_hi +
    Q_lo)^T with the keys read as stored (no conversion) and the query split into two e4m3 terms;
    only the values are converted. FP8_IMPRECISE: see ``scores_fp8``. sm_scale: softmax scale;
    value_scale: the factor that turns the loader's values into true values (times the fp8 tensor
    scale read from ``fp8_scale_ptr`` for fp8). LAUNCH_DEPENDENTS (NVIDIA, Hopper on): let the
    combine kernel, launched as a programmatic dependent, start while this grid still runs; it
    waits for this grid's results itself (``combine.py``).
    """
    if LAUNCH_DEPENDENTS:
        tl.extra.cuda.gdc_launch_dependents()
    F16_OPERANDS: tl.constexpr = (FORMAT == FMT_FP8) or (FORMAT == FMT_FP8_FNUZ)
    work = tl.program_id(0)
    row_block = tl.program_id(1)
    req = tl.load(work_req + work)
    split = tl.load(work_split + work)
    num_splits = tl.load(work_nsplit + work)
    kv_start = tl.load(kv_indptr + req).to(tl.int64)
    kv_len = (tl.load(kv_indptr + req + 1) - kv_start).to(tl.int32)
    q_start = tl.load(qo_indptr + req).to(tl.int64)
    q_len = (tl.load(qo_indptr + req + 1) - q_start).to(tl.int32)

    if F16_OPERANDS:
        value_scale = value_scale * tl.load(fp8_scale_ptr)
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
    if FP8_SCORES:
        q8_mult = query_row_multiplier_fp8(q_nope_a, q_nope_b, q_rope_a, q_rope_b)
        q8_nope_a_hi, q8_nope_a_lo = split_fp8(q_nope_a, q8_mult, DOT_F32)
        q8_nope_b_hi, q8_nope_b_lo = split_fp8(q_nope_b, q8_mult, DOT_F32)
        q8_rope_a_hi, q8_rope_a_lo = split_fp8(q_rope_a, q8_mult, DOT_F32)
        q8_rope_b_hi, q8_rope_b_lo = split_fp8(q_rope_b, q8_mult, DOT_F32)
        row_qk_scale = qk_scale / q8_mult
    elif F16_OPERANDS:
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
    if DOT_F32:
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
    if TOKENS_IN_M:
        # Transposed products, S^T = K Q^T and O^T = V^T P^T: the cached tokens (and the 256 value
        # columns) fill the matrix unit's row slot, which wants 64 rows, instead of the 16 heads.
        acc_a = tl.zeros((NOPE_HALF, BLOCK_R), tl.float32)
        acc_b = tl.zeros((NOPE_HALF, BLOCK_R), tl.float32)
    else:
        acc_a = tl.zeros((BLOCK_R, NOPE_HALF), tl.float32)
        acc_b = tl.zeros((BLOCK_R, NOPE_HALF), tl.float32)
    if REGISTER_PREFETCH:
        pos = t_begin + tl.arange(0, BLOCK_T)
        raw_a, raw_b, raw_c, raw_d = load_raw_tile(kv_ptr, kv_stride, scale_ptr, scale_stride, kv_start + pos,
                                                   pos < t_end, FORMAT)
    for t0 in range(t_begin, t_end, BLOCK_T):
        pos = t0 + tl.arange(0, BLOCK_T)
        tok_ok = pos < t_end
        if FP8_SCORES:
            raw_a, raw_b, raw_c, raw_d = load_raw_tile(kv_ptr, kv_stride, scale_ptr, scale_stride, kv_start + pos,
                                                       tok_ok, FORMAT)
            scores_t = scores_fp8(raw_a, q8_nope_a_hi, q8_nope_a_lo, tl.zeros((BLOCK_T, BLOCK_R), tl.float32), DOT_F32,
                                  FP8_IMPRECISE)
            scores_t = scores_fp8(raw_b, q8_nope_b_hi, q8_nope_b_lo, scores_t, DOT_F32, FP8_IMPRECISE)
            scores_t = scores_fp8(raw_c, q8_rope_a_hi, q8_rope_a_lo, scores_t, DOT_F32, FP8_IMPRECISE)
            scores_t = scores_fp8(raw_d, q8_rope_b_hi, q8_rope_b_lo, scores_t, DOT_F32, FP8_IMPRECISE)
            # The values are the same bytes (read once), converted for the f16 product.
            k_nope_a, k_nope_b = decode_span(raw_a, raw_b, FORMAT, USE_ASM)
        elif REGISTER_PREFETCH:
            next_pos = pos + BLOCK_T
            next_a, next_b, next_c, next_d = load_raw_tile(kv_ptr, kv_stride, scale_ptr, scale_stride,
                                                           kv_start + next_pos, next_pos < t_end, FORMAT)
            k_nope_a, k_nope_b, k_rope_a, k_rope_b = decode_tile(raw_a, raw_b, raw_c, raw_d, FORMAT, USE_ASM)
            raw_a, raw_b, raw_c, raw_d = next_a, next_b, next_c, next_d
        else:
            k_nope_a, k_nope_b, k_rope_a, k_rope_b = load_key_tile(
                kv_ptr, kv_stride, scale_ptr, scale_stride, kv_start + pos, tok_ok, FORMAT, USE_ASM)
        if TOKENS_IN_M:
            scores = _dot(k_nope_a, tl.trans(q_nope_a), DOT_F32)
            scores += _dot(k_nope_b, tl.trans(q_nope_b), DOT_F32)
            scores += _dot(k_rope_a, tl.trans(q_rope_a), DOT_F32)
            scores += _dot(k_rope_b, tl.trans(q_rope_b), DOT_F32)
            visible = tok_ok[:, None] & (pos[:, None] <= last_visible[None, :])
            scores = tl.where(visible, scores * row_qk_scale[None, :], float("-inf"))
            p, alpha, m, l = online_softmax_step(scores, m, l, 0)
        else:
            if FP8_SCORES:
                scores = tl.trans(scores_t)
            else:
                scores = _dot(q_nope_a, tl.trans(k_nope_a), DOT_F32)
                scores += _dot(q_nope_b, tl.trans(k_nope_b), DOT_F32)
                scores += _dot(q_rope_a, tl.trans(k_rope_a), DOT_F32)
                scores += _dot(q_rope_b, tl.trans(k_rope_b), DOT_F32)
            visible = tok_ok[None, :] & (pos[None, :] <= last_visible[:, None])
            scores = tl.where(visible, scores * row_qk_scale[:, None], float("-inf"))
            p, alpha, m, l = online_softmax_step(scores, m, l, 1)
        # f16 keeps p (<= 1) at least as exactly as bf16 down to 2**-24.
        p_op = p.to(tl.float16) if F16_OPERANDS else p.to(tl.bfloat16)
        if DOT_F32:
            p_op = p_op.to(tl.float32)
        if RELOAD_VALUES:
            v_a, v_b = load_value_tile(kv_ptr, kv_stride, scale_ptr, scale_stride, kv_start + pos, tok_ok, FORMAT,
                                       USE_ASM)
        else:
            v_a = k_nope_a
            v_b = k_nope_b
        if TOKENS_IN_M:
            acc_a = acc_a * alpha[None, :] + _dot(tl.trans(v_a), p_op, DOT_F32)
            acc_b = acc_b * alpha[None, :] + _dot(tl.trans(v_b), p_op, DOT_F32)
        else:
            acc_a = acc_a * alpha[:, None] + _dot(p_op, v_a, DOT_F32)
            acc_b = acc_b * alpha[:, None] + _dot(p_op, v_b, DOT_F32)
    if TOKENS_IN_M:
        acc_a = tl.trans(acc_a)
        acc_b = tl.trans(acc_b)

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
