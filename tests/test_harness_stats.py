"""Pure statistics and the call-latency loop of mixmla.harness (CPU only, synthetic timers)."""

import math

import pytest

from mixmla.harness.stats import StopRule, geomean, median, stop_reason, summarize
from mixmla.harness.timing import time_calls


def test_summarize_matches_hand_computation():
    s = summarize([10.0, 12.0, 14.0, 16.0])
    assert s.n == 4 and s.mean == 13.0
    # sample variance (n-1): (9 + 1 + 1 + 9) / 3
    assert s.std == pytest.approx(math.sqrt(20 / 3))
    assert s.err == pytest.approx(math.sqrt(20 / 3) / 2)
    assert (s.best, s.worst) == (10.0, 16.0)
    assert s.rel_err == pytest.approx(s.err / 13.0)


def test_summarize_single_sample_and_errors():
    s = summarize([5.0])
    assert (s.n, s.mean, s.std, s.err, s.best, s.worst) == (1, 5.0, 0.0, 0.0, 5.0, 5.0)
    with pytest.raises(ValueError):
        summarize([])
    with pytest.raises(ValueError):
        summarize([1.0, float("nan")])


def test_stop_rule_validation():
    with pytest.raises(ValueError):
        StopRule(min_count=5, max_count=4)
    with pytest.raises(ValueError):
        StopRule(rel_err=0)


def test_stop_reason_needs_min_count_even_when_constant():
    rule = StopRule(min_count=3, max_count=100)
    assert stop_reason([7.0], 0.0, rule) is None
    assert stop_reason([7.0, 7.0], 0.0, rule) is None
    assert stop_reason([7.0, 7.0, 7.0], 0.0, rule) == "converged"


def test_stop_reason_noisy_sequence_runs_to_max_count():
    rule = StopRule(min_count=3, max_count=10)
    noisy = [100.0, 150.0] * 5
    for n in range(3, 10):
        assert stop_reason(noisy[:n], 0.0, rule) is None
    assert stop_reason(noisy[:10], 0.0, rule) == "max count"


def test_stop_reason_converges_when_stderr_small():
    # Alternating 980/1020: std ~ 20, so err/mean < 0.1% needs 20/sqrt(n) < 1, i.e. n ~ 400.
    seq = [980.0, 1020.0] * 500
    rule = StopRule(rel_err=1e-3, min_count=3, max_count=1000)
    first = next(n for n in range(1, 1001) if stop_reason(seq[:n], 0.0, rule))
    assert 390 <= first <= 410
    assert stop_reason(seq[:first], 0.0, rule) == "converged"
    s, prev = summarize(seq[:first]), summarize(seq[:first - 1])
    assert s.err / s.mean < 1e-3 <= prev.err / prev.mean


def test_stop_reason_caps():
    seq = [100.0, 300.0, 100.0, 300.0]
    assert stop_reason(seq, 0.0, StopRule(time_cap=700.0)) == "time cap"  # mean 200 * 4 = 800 > 700
    assert stop_reason(seq, 0.0, StopRule(time_cap=900.0)) is None
    assert stop_reason(seq, 5.0, StopRule(wall_cap_s=4.0)) == "wall cap"
    assert stop_reason(seq[:2], 5.0, StopRule(wall_cap_s=4.0)) is None  # never before min_count


def test_geomean_and_median():
    assert geomean([1.0, 100.0]) == pytest.approx(10.0)
    assert geomean([2.0, 8.0, 4.0]) == pytest.approx(4.0)
    assert geomean([3.5]) == pytest.approx(3.5)
    for bad in ([], [1.0, 0.0], [1.0, -2.0], [float("inf")]):
        with pytest.raises(ValueError):
            geomean(bad)
    assert median([3.0, 1.0, 2.0]) == 2.0
    assert median([4.0, 1.0, 3.0, 2.0]) == 2.5
    with pytest.raises(ValueError):
        median([])


class FakeTimer:
    """Returns the next duration of a fixed sequence for each call (us)."""

    kind = "fake"

    def __init__(self, durations):
        self.durations = list(durations)
        self.calls = 0

    def measure(self, fn):
        out = fn()
        d = self.durations[self.calls]
        self.calls += 1
        return out, d


def test_time_calls_stops_on_convergence():
    timer = FakeTimer([50.0] * 20)
    t = time_calls(lambda _: "out", timer, StopRule(min_count=3, max_count=20))
    assert t.stop == "converged" and t.stats.n == 3 and timer.calls == 3 and t.failure is None
    assert t.samples == [50.0, 50.0, 50.0]


def test_time_calls_max_count_and_stats():
    timer = FakeTimer([10.0, 30.0] * 10)
    t = time_calls(lambda _: None, timer, StopRule(min_count=3, max_count=6))
    assert t.stop == "max count" and t.stats.n == 6 and t.stats.mean == 20.0
    assert (t.stats.best, t.stats.worst) == (10.0, 30.0)


def test_time_calls_prepare_and_recheck():
    seen = []
    timer = FakeTimer([10.0, 30.0] * 10)

    def prepare(i):
        return 1000 + 13 * i

    def call(inputs):
        seen.append(inputs)
        return inputs * 2

    def check(inputs, out):
        return None if out == inputs * 2 and inputs < 1000 + 13 * 4 else f"bad output for {inputs}"

    t = time_calls(call, timer, StopRule(min_count=3, max_count=20), prepare=prepare, check=check)
    assert seen == [1000, 1013, 1026, 1039, 1052]
    assert t.stop == "check failed" and "1052" in t.failure
    assert t.stats.n == 4  # the failing call's time is not kept
