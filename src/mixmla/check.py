"""Output checks: the original harness's loose rule and this project's strict rule.

Both take the implementation's output and a reference of the same shape, compute in float64 and
return a :class:`CheckResult` whose ``message`` says how large the worst error is, where it is and
how many elements are off, so a failure can be acted on without re-running anything.

- :func:`check_loose` is the rule of the original GPU MODE harness (docs/SPEC.md): elementwise
  ``|out - ref| <= atol + rtol * |ref|`` with rtol = atol = 0.1, passing when at most 5% of the
  elements miss. It is kept for comparability; it cannot tell a slightly wrong kernel from a right
  one because the outputs are small (std about 0.05).
- :func:`check_strict` is the project's bar: relative L2 error ``||out - ref|| / ||ref|| <= 1e-2``
  against a reference computed on the *same* dequantized cache; any NaN or Inf in ``out`` fails.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

__all__ = ["CheckResult", "check_loose", "check_strict"]


@dataclass(frozen=True)
class CheckResult:
    """Verdict of one check.

    passed: the verdict; ``bool(result)`` is the same.
    rule: ``"loose"`` or ``"strict"``.
    message: one readable line: verdict, worst error and where, how many elements are off.
    max_abs_err: largest ``|out - ref|`` (inf when ``out`` holds a non-finite value ``ref`` lacks).
    rel_l2: ``||out - ref||_2 / ||ref||_2``; when ``ref`` is all zero, the absolute ``||out||_2``.
    mismatches: loose rule: elements outside ``atol + rtol*|ref|``; strict rule: elements whose
        error exceeds ``tol`` times the RMS of ``ref`` (informational, the verdict is ``rel_l2``).
        Non-finite ``out`` elements always count.
    num_elements: elements compared.
    nonfinite: NaN/Inf elements of ``out`` that ``ref`` does not hold at the same place.
    worst_index: index tuple of the largest error (a non-finite one first), None if nothing differs.
    """

    passed: bool
    rule: str
    message: str
    max_abs_err: float
    rel_l2: float
    mismatches: int
    num_elements: int
    nonfinite: int
    worst_index: tuple[int, ...] | None

    def __bool__(self) -> bool:
        return self.passed


def _require_tensors(out, ref) -> None:
    if not isinstance(out, torch.Tensor) or not isinstance(ref, torch.Tensor):
        raise TypeError(f"out and ref must be torch.Tensor, got {type(out).__name__} and {type(ref).__name__}")


def _as_float64_pair(out: torch.Tensor, ref: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return out.detach().to(device=ref.device, dtype=torch.float64), ref.detach().to(torch.float64)


def _shape_mismatch(rule: str, out: torch.Tensor, ref: torch.Tensor) -> CheckResult:
    return CheckResult(
        passed=False, rule=rule,
        message=f"{rule} FAIL: shape mismatch, out {tuple(out.shape)} vs ref {tuple(ref.shape)}",
        max_abs_err=math.inf, rel_l2=math.inf, mismatches=ref.numel(), num_elements=ref.numel(),
        nonfinite=0, worst_index=None,
    )


def _errors(out64: torch.Tensor, ref64: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Absolute error per element and the mask of non-finite outputs that ``ref`` does not share.

    Identical values count as zero error even when both are infinite, so a reference that holds
    ``-inf`` on purpose (the log-sum-exp of a query that sees no row) can be compared too. Every
    other non-finite error becomes +inf so it ranks as the worst.
    """
    identical = out64 == ref64
    err = torch.where(identical, torch.zeros_like(out64), (out64 - ref64).abs())
    bad_out = ~torch.isfinite(out64) & ~identical
    err = torch.where(torch.isnan(err), torch.full_like(err, math.inf), err)
    return err, bad_out


def _worst(err: torch.Tensor) -> tuple[float, tuple[int, ...] | None]:
    if err.numel() == 0:
        return 0.0, None
    flat = int(torch.argmax(err).item())
    max_err = float(err.reshape(-1)[flat].item())
    if max_err == 0.0:
        return 0.0, None
    index = tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), err.shape))
    return max_err, index


def _where(out64: torch.Tensor, ref64: torch.Tensor, index: tuple[int, ...] | None) -> str:
    if index is None:
        return ""
    return f" at {index} (out {out64[index].item():.6g}, ref {ref64[index].item():.6g})"


def _l2(x: torch.Tensor) -> float:
    return float(torch.linalg.vector_norm(x).item()) if x.numel() else 0.0


def check_loose(
    out: torch.Tensor,
    ref: torch.Tensor,
    rtol: float = 0.1,
    atol: float = 0.1,
    max_mismatch_frac: float = 0.05,
) -> CheckResult:
    """The original harness rule: pass when at most ``max_mismatch_frac`` of the elements miss
    ``|out - ref| <= atol + rtol * |ref|``.

    out, ref: tensors of the same shape, any float dtype and device (``out`` is moved to ``ref``'s
    device); typically (total_q, H, 512). rtol, atol: dimensionless / in output units.
    max_mismatch_frac: allowed fraction of missing elements, in [0, 1].
    A NaN or Inf in ``out`` counts as a miss (unless ``ref`` holds the identical value).
    """
    _require_tensors(out, ref)
    if tuple(out.shape) != tuple(ref.shape):
        return _shape_mismatch("loose", out, ref)
    out64, ref64 = _as_float64_pair(out, ref)
    err, bad_out = _errors(out64, ref64)
    limit = atol + rtol * ref64.abs()
    # err is +inf wherever out and ref differ by a non-finite amount; an infinite limit (ref = inf)
    # must not excuse that.
    miss = ~(err <= limit) | torch.isinf(err)
    mismatches = int(miss.sum().item())
    n = ref64.numel()
    allowed = max_mismatch_frac * n
    passed = mismatches <= allowed
    max_err, index = _worst(err)
    nonfinite = int(bad_out.sum().item())
    ref_norm = _l2(torch.where(torch.isfinite(ref64), ref64, torch.zeros_like(ref64)))
    err_norm = _l2(err)
    rel_l2 = err_norm / ref_norm if ref_norm > 0 else err_norm
    frac = mismatches / n if n else 0.0
    message = (
        f"loose {'pass' if passed else 'FAIL'}: {mismatches} of {n} elements ({frac:.2%}) outside "
        f"atol {atol:g} + rtol {rtol:g}*|ref| (allowed {max_mismatch_frac:.0%}); "
        f"max |out-ref| {max_err:.3g}{_where(out64, ref64, index)}"
    )
    if nonfinite:
        message += f"; {nonfinite} non-finite outputs"
    return CheckResult(passed, "loose", message, max_err, rel_l2, mismatches, n, nonfinite, index)


def check_strict(out: torch.Tensor, ref: torch.Tensor, tol: float = 1e-2) -> CheckResult:
    """This project's rule: relative L2 error ``||out - ref||_2 / ||ref||_2 <= tol``, no NaN/Inf.

    out, ref: tensors of the same shape, any float dtype and device (``out`` is moved to ``ref``'s
    device); typically (total_q, H, 512) with ``ref`` from ``mla_decode_reference`` on the same
    cache format. tol: dimensionless, 1e-2 for bf16 operands (docs/SPEC.md).
    Any non-finite element of ``out`` fails, except where ``ref`` holds the identical value (so a
    log-sum-exp of ``-inf`` for a query that sees no row can be checked as well).
    When ``ref`` is all zero (every query saw no row) the ratio is undefined, so the absolute
    ``||out||_2 <= tol`` is required instead; that is what ``rel_l2`` then holds.
    """
    _require_tensors(out, ref)
    if tuple(out.shape) != tuple(ref.shape):
        return _shape_mismatch("strict", out, ref)
    out64, ref64 = _as_float64_pair(out, ref)
    err, bad_out = _errors(out64, ref64)
    n = ref64.numel()
    nonfinite = int(bad_out.sum().item())
    finite_ref = torch.where(torch.isfinite(ref64), ref64, torch.zeros_like(ref64))
    ref_norm = _l2(finite_ref)
    err_norm = _l2(err)
    absolute = ref_norm == 0.0
    rel_l2 = err_norm if absolute else err_norm / ref_norm
    rms_ref = ref_norm / math.sqrt(n) if n else 0.0
    mismatches = int((err > tol * rms_ref).sum().item()) if not absolute else int((err > tol).sum().item())
    passed = nonfinite == 0 and rel_l2 <= tol
    max_err, index = _worst(err)
    measure = "abs L2 (ref is all zero)" if absolute else "rel L2"
    message = f"strict {'pass' if passed else 'FAIL'}: {measure} {rel_l2:.3g} (tol {tol:g}); "
    message += f"max |out-ref| {max_err:.3g}{_where(out64, ref64, index)}"
    if nonfinite:
        message += f"; {nonfinite} of {n} outputs are NaN/Inf"
    elif not absolute:
        message += f"; {mismatches} of {n} elements off by more than {tol:g} x RMS(ref)"
    return CheckResult(passed, "strict", message, max_err, rel_l2, mismatches, n, nonfinite, index)
