"""The exact merge of partial attention results, in a fixed rank order.

Rank ``r`` attended over its own tokens and holds a normalized float32 output ``o_r`` and its
natural-log log-sum-exp ``lse_r``. Over all tokens,

    lse = log(sum_r exp(lse_r)),   o = sum_r exp(lse_r - lse) * o_r,

which is exact in real arithmetic. Here every step is a plain float32 elementwise operation done
rank after rank (r = 0, 1, ..., N-1), never a reduction whose order a library chooses, so that a
merge computed anywhere from the same inputs gives the same bits: both communication schedules
of ``mixmla.distributed.dcp`` produce the same bytes, and so does every rank. A rank that saw no
token of a row has ``lse_r = -inf`` and ``o_r = 0`` and weighs exactly zero; a row that no rank saw
gets ``lse = -inf`` and a zero output, as ``mla_decode`` gives it. Pure PyTorch, any device.
"""

from __future__ import annotations

import torch

__all__ = ["global_lse", "rank_weights", "scaled_partial", "sum_in_rank_order", "merge_partials", "merge_reference",
           "merge_error_bound"]


def _finite_or_zero(x: torch.Tensor) -> torch.Tensor:
    """``x`` with ``-inf`` replaced by 0, so that ``y - _finite_or_zero(x)`` never forms
    ``-inf - -inf``."""
    return torch.where(torch.isneginf(x), torch.zeros_like(x), x)


def global_lse(lse_parts: torch.Tensor) -> torch.Tensor:
    """The log-sum-exp over all ranks: lse_parts (N, ...) float32 natural log, one slice per rank
    in rank order -> (...) float32; ``-inf`` where every rank has ``-inf``."""
    m = _finite_or_zero(lse_parts.amax(dim=0))  # a max is exact in any order
    total = torch.exp(lse_parts[0] - m)
    for r in range(1, lse_parts.shape[0]):
        total = total + torch.exp(lse_parts[r] - m)
    return m + torch.log(total)  # log(0) = -inf for the rows no rank saw


def rank_weights(lse_part: torch.Tensor, lse: torch.Tensor) -> torch.Tensor:
    """``exp(lse_part - lse)``: the weight of a rank's output, float32 of ``lse_part``'s shape
    (broadcast against ``lse``); 0 where the rank saw nothing, and where no rank saw anything."""
    return torch.exp(lse_part - _finite_or_zero(lse))


def scaled_partial(part: torch.Tensor, weight: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """``part * weight[..., None]``: a rank's (..., 512) float32 output scaled by its (...) weight;
    written into ``out`` when given (any strides)."""
    return torch.mul(part, weight.unsqueeze(-1), out=out)


def sum_in_rank_order(scaled: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """``scaled[0] + scaled[1] + ... + scaled[N-1]``, added in that order (a library's reduction
    over the first dim could add in any order). scaled (N, ...) float32 -> (...) float32, into
    ``out`` when given."""
    acc = scaled[0].clone() if out is None else out.copy_(scaled[0])
    for r in range(1, scaled.shape[0]):
        acc.add_(scaled[r])
    return acc


def merge_partials(parts: torch.Tensor, lse_parts: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Merge N ranks' partial results: parts (N, ..., 512) float32 normalized outputs, lse_parts
    (N, ...) float32 natural log -> ``(out (..., 512) float32, lse (...) float32)``."""
    lse = global_lse(lse_parts)
    weights = rank_weights(lse_parts, lse)
    return sum_in_rank_order(scaled_partial(parts, weights)), lse


def merge_reference(parts: torch.Tensor, lse_parts: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The same merge in float64 with torch's log-sum-exp, to check ``merge_partials`` and
    ``dcp_decode`` against: parts (N, ..., 512), lse_parts (N, ...) -> ``(out (..., 512), lse
    (...))`` float64. ``merge_error_bound`` says how far the float32 merge rounded to bf16 may lie
    from it."""
    lse_parts = lse_parts.double()
    lse = torch.logsumexp(lse_parts, dim=0)
    weights = torch.exp(lse_parts - _finite_or_zero(lse)).nan_to_num(0.0)
    return (weights.unsqueeze(-1) * parts.double()).sum(dim=0), lse


def merge_error_bound(ref_out: torch.Tensor, parts: torch.Tensor, lse_parts: torch.Tensor,
                      ref_lse: torch.Tensor) -> torch.Tensor:
    """How far ``merge_partials``'s output rounded to bf16 may lie from ``merge_reference``'s
    (``ref_out``, ``ref_lse``) of the same parts, elementwise, float64 of ref_out's shape: one bf16
    step of the result (its rounding, half a step, with a factor 2 to spare), plus float32's
    rounding of the terms, 2**-18 of sum_r w_r |o_r|: the weights exp(lse_r - lse) carry the
    float32 error of lse values of magnitude ~10 (about 2**-20 relative) and the N additions a few
    float32 epsilons. Where the ranks' terms cancel, the second part is what counts; where no rank
    saw a token, both are 0. Merging bf16-rounded partials instead misses it by orders of
    magnitude (the terms' own bf16 rounding is 2**-9 of them)."""
    _, exponent = torch.frexp(ref_out.abs())
    step = torch.where(ref_out == 0, torch.zeros_like(ref_out), torch.ldexp(torch.ones_like(ref_out), exponent - 8))
    weights = torch.exp(lse_parts.double() - _finite_or_zero(ref_lse)).nan_to_num(0.0)
    return step + 2.0 ** -18 * (weights.unsqueeze(-1) * parts.double().abs()).sum(dim=0)
