"""Checking one output before its time counts: the strict rule and the original loose rule.

- strict (``mixmla.check.check_strict``): relative L2 error <= 1e-2 against the float64 reference
  on the *same* cache format the implementation read; NaN/Inf never pass.
- loose (``mixmla.check.check_loose``): the original harness's rule (rtol = atol = 0.1, at most 5%
  of elements off) against the fp8-cache reference. (The original's reference also quantized q to
  fp8; the difference is far below that tolerance.)

When the format an implementation read is unknown (``custom_kernel`` with ``fmt="auto"``, or a
user's submission), :func:`verify_any_format` checks against every format's reference and keeps the
closest: docs/SPEC.md lets an implementation use whichever of the three caches it likes, and the three
references differ from one another by far more than 1e-2, so the closest one identifies the format.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from ..formats import FORMATS

__all__ = ["Verdict", "verify", "verify_any_format", "LOOSE_REFERENCE_FORMAT"]

LOOSE_REFERENCE_FORMAT = "fp8"


@dataclass(frozen=True)
class Verdict:
    """strict / loose: ``mixmla.check.CheckResult`` (loose None when not run). fmt: the format whose
    reference the strict check used."""

    strict: object
    loose: object | None
    fmt: str

    @property
    def passed(self) -> bool:
        return bool(self.strict.passed) and (self.loose is None or bool(self.loose.passed))

    def as_dict(self) -> dict:
        def one(r):
            return None if r is None else {"passed": bool(r.passed), "rel_l2": float(r.rel_l2), "message": r.message}

        return {"format": self.fmt, "strict": one(self.strict), "loose": one(self.loose)}


def verify(out, case, fmt: str, loose: bool = True) -> Verdict:
    """Strict check of ``out`` (total_q, H, 512) against ``case.ref(fmt)``, and the loose check
    against the fp8 reference when ``loose``. ``case``: a :class:`mixmla.harness.cases.Case`."""
    from ..check import check_loose, check_strict

    strict = check_strict(out, case.ref(fmt))
    lo = check_loose(out, case.ref(LOOSE_REFERENCE_FORMAT)) if loose else None
    return Verdict(strict, lo, fmt)


def verify_any_format(out, case, formats: Sequence[str] = FORMATS, loose: bool = True) -> Verdict:
    """Like :func:`verify`, against the reference of whichever format in ``formats`` is closest to
    ``out`` (smallest relative L2 error)."""
    from ..check import check_loose, check_strict

    results = {fmt: check_strict(out, case.ref(fmt)) for fmt in formats}
    best = min(results, key=lambda f: (not results[f].passed, results[f].rel_l2))
    lo = check_loose(out, case.ref(LOOSE_REFERENCE_FORMAT)) if loose else None
    return Verdict(results[best], lo, best)
