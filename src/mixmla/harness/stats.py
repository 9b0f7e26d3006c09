"""Pure statistics of timing samples (no torch, no GPU): summary, stopping rule, geometric mean.

All times here are plain floats in whatever unit the caller uses (the harness uses microseconds);
the functions never convert units.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Iterable, Sequence

__all__ = ["Stats", "summarize", "StopRule", "stop_reason", "geomean", "median"]


@dataclass(frozen=True)
class Stats:
    """Summary of ``n`` timing samples, the fields the original harness reported.

    mean: arithmetic mean. std: sample standard deviation (divisor ``n - 1``; 0 for one sample).
    err: standard error of the mean, ``std / sqrt(n)``. best / worst: smallest / largest sample.
    All in the unit of the samples.
    """

    n: int
    mean: float
    std: float
    err: float
    best: float
    worst: float

    @property
    def rel_err(self) -> float:
        """``err / mean`` (dimensionless); inf when the mean is 0."""
        return self.err / self.mean if self.mean > 0 else math.inf

    def as_dict(self) -> dict:
        return asdict(self)


def summarize(samples: Sequence[float]) -> Stats:
    """Mean, sample std, standard error, best and worst of ``samples`` (at least one finite float)."""
    xs = [float(x) for x in samples]
    if not xs:
        raise ValueError("summarize() needs at least one sample")
    if not all(math.isfinite(x) for x in xs):
        raise ValueError(f"samples must be finite, got {xs}")
    n = len(xs)
    mean = math.fsum(xs) / n
    var = math.fsum((x - mean) ** 2 for x in xs) / (n - 1) if n > 1 else 0.0
    std = math.sqrt(var)
    return Stats(n=n, mean=mean, std=std, err=std / math.sqrt(n), best=min(xs), worst=max(xs))


@dataclass(frozen=True)
class StopRule:
    """When to stop repeating a timed call (the original harness's rule, with our caps).

    rel_err: stop once ``err / mean`` is below this (0.001 = 0.1%).
    min_count: never stop on the error test before this many samples (the original needed 3).
    max_count: stop after this many samples whatever the error.
    time_cap: stop once ``mean * n`` (the summed measured time, in the samples' unit) exceeds this.
    wall_cap_s: stop once the loop's wall-clock time (seconds; includes flushes, syncs, checks and
        input generation) exceeds this.
    """

    rel_err: float = 1e-3
    min_count: int = 3
    max_count: int = 100
    time_cap: float = math.inf
    wall_cap_s: float = math.inf

    def __post_init__(self):
        if self.min_count < 1 or self.max_count < self.min_count:
            raise ValueError(f"need 1 <= min_count <= max_count, got {self.min_count}, {self.max_count}")
        if not self.rel_err > 0:
            raise ValueError(f"rel_err must be > 0, got {self.rel_err}")


def stop_reason(samples: Sequence[float], wall_elapsed_s: float, rule: StopRule) -> str | None:
    """Why the loop should stop after ``samples``, or None to take another sample.

    The checks, in order: ``"max count"`` (n >= max_count); then, only once n >= min_count,
    ``"converged"`` (err/mean < rule.rel_err), ``"time cap"`` (mean*n > rule.time_cap),
    ``"wall cap"`` (wall_elapsed_s > rule.wall_cap_s). Caps never stop the loop before min_count
    samples, so every result has at least min_count samples (unless max_count is smaller).
    """
    n = len(samples)
    if n >= rule.max_count:
        return "max count"
    if n < rule.min_count:
        return None
    s = summarize(samples)
    if s.rel_err < rule.rel_err:
        return "converged"
    if s.mean * s.n > rule.time_cap:
        return "time cap"
    if wall_elapsed_s > rule.wall_cap_s:
        return "wall cap"
    return None


def geomean(values: Iterable[float]) -> float:
    """Geometric mean ``exp(mean(log(v)))`` of positive finite values (the ranking statistic)."""
    xs = [float(v) for v in values]
    if not xs:
        raise ValueError("geomean() needs at least one value")
    if not all(math.isfinite(x) and x > 0 for x in xs):
        raise ValueError(f"geomean() needs positive finite values, got {xs}")
    return math.exp(math.fsum(math.log(x) for x in xs) / len(xs))


def median(values: Sequence[float]) -> float:
    """Median of at least one value (mean of the middle two for an even count)."""
    xs = sorted(float(v) for v in values)
    if not xs:
        raise ValueError("median() needs at least one value")
    mid = len(xs) // 2
    return xs[mid] if len(xs) % 2 else 0.5 * (xs[mid - 1] + xs[mid])
