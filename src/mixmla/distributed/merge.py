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

__all__ = ["global_lse", "rank_weights", "scaled_partial", "sum_in_rank_order", "merge_partials"]


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
