"""Online softmax pieces shared by the decode and combine kernels, written once.

Everything runs in the base-2 domain: scores are pre-multiplied by ``log2(e)`` so ``exp2`` is one
instruction, and a log-sum-exp ``lse2 = m + log2(l)`` converts to natural log by ``* ln(2)``.
A row that has seen nothing keeps ``m = -inf`` and ``l = 0``; the helpers never form ``-inf - -inf``.
"""

import triton
import triton.language as tl



@triton.jit
def safe_max(m):
    """``m`` with ``-inf`` replaced by 0, so that ``x - safe_max(m)`` is ``-inf`` (not NaN) for
    ``x = -inf``."""
    return tl.where(m == float("-inf"), 0.0, m)


@triton.jit
def online_softmax_step(scores, m_prev, l_prev, AXIS: tl.constexpr):
    """One tile of the online softmax, reducing over ``AXIS`` (the token axis).

    scores: float32 base-2 logits, ``-inf`` where masked: (R, T) with AXIS=1, or (T, R) with
    AXIS=0. m_prev, l_prev: (R,) running max and running sum. Returns ``(p, alpha, m_new, l_new)``:
    unnormalized probabilities (the shape of scores), the factor (R,) that rescales everything
    accumulated so far, and the updated max and sum.
    """
    m_new = tl.maximum(m_prev, tl.max(scores, axis=AXIS))
    m_safe = safe_max(m_new)
    p = tl.exp2(scores - tl.expand_dims(m_safe, AXIS))
    alpha = tl.exp2(m_prev - m_safe)
    l_new = l_prev * alpha + tl.sum(p, axis=AXIS)
    return p, alpha, m_new, l_new


@triton.jit
def finish_rows(m, l):
    """What normalizes a finished row: ``(1 / l, lse2)``, with 0 and ``-inf`` for an empty row
    (``l == 0``) so that its output is zeros. m, l: (R,) float32; lse2 is base 2."""
    empty = l == 0.0
    inv_l = tl.where(empty, 0.0, 1.0 / tl.where(empty, 1.0, l))
    lse2 = tl.where(empty, float("-inf"), m + tl.log2(tl.where(empty, 1.0, l)))
    return inv_l, lse2
