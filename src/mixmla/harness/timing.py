"""Timing: call latency the way the original harness measured it, and GPU time from graph replays.

Two measurements, both in microseconds:

**Call latency** (:func:`time_calls` with a :class:`CudaEventTimer`): exactly the original GPU MODE
harness's loop. Per call: ``torch.cuda.synchronize()``; write a 256 MiB buffer (flushes the H200's
50 MB L2); record a CUDA event; run the *whole Python call*; record a second event;
synchronize; the sample is the time between the two events. Repeat until the standard error of
the mean is under 0.1% of the mean, or a cap on count / summed time / wall time is hit (see
:class:`mixmla.harness.stats.StopRule`). Host-side Python overhead counts, except the part that
overlaps the flush still running on the GPU when the start event is recorded (the same in the
original harness).

**GPU time** (:func:`gpu_time`): the median over replays of a CUDA graph that holds one call
(for our kernels, ``DecodePlan.run`` with a preallocated output), each replay preceded by an L2
flush so the cache is read from HBM, with events recorded right before and after the replay on
the stream that is busy with the flush, so host launch cost is not in it. The bench flushes by
*reading* 256 MiB (``L2Flusher(mode="read")``) and also reports the time after the original
harness's *write* flush: a written buffer leaves the L2 full of dirty lines, and writing them back
to HBM happens inside the timed call (measured on the H200: 1-10 us per call on the benchmark
shapes, `bench/studies/flush_study.py`, docs/PERF.md), a cost of the flush rather than of the kernel. Before the timed replays the graph is
replayed untimed for ``warm_s`` seconds: the H200 runs the first tens of milliseconds of replays
after a large case is generated up to 15% slower (`bench/studies/clock_study.py`). We flush instead of
rotating input sets: it works for every shape and every peer without multiplying the memory of
the 2.4 GB caches. A callable that cannot be captured in a graph is timed eagerly the same way
(``method = "eager+flush"``; launch gaps then count).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

from .stats import Stats, StopRule, median, stop_reason, summarize

__all__ = [
    "FLUSH_BYTES", "FLUSH_MODES", "L2Flusher", "Timer", "CudaEventTimer", "WallTimer", "CallTiming", "time_calls",
    "GpuTiming", "capture_graph", "gpu_time",
]

#: Bytes written before each timed call to evict L2 (H200 L2: 50 MB). The original harness wrote
#: a (32, 1024, 1024) int64 tensor, also 256 MiB.
FLUSH_BYTES = 256 << 20


FLUSH_MODES = ("write", "read")


class L2Flusher:
    """Evicts the GPU's L2 by touching ``nbytes`` (default 256 MiB) of a buffer it allocates once.

    mode "write" (the original harness's flush): fill the buffer, which leaves the L2 full of dirty
    lines that the next kernel's traffic writes back to HBM. mode "read": sum the buffer into one
    float, which leaves only clean lines. ``flush()`` enqueues one kernel on the current stream and
    returns at once (asynchronous).
    """

    def __init__(self, device=None, nbytes: int = FLUSH_BYTES, mode: str = "write"):
        import torch

        if mode not in FLUSH_MODES:
            raise ValueError(f"flush mode must be one of {FLUSH_MODES}, got {mode!r}")
        self._torch = torch
        self.mode = mode
        self.nbytes = int(nbytes)
        self._buf = torch.ones(self.nbytes // 4, dtype=torch.float32, device=device or "cuda")
        self._sink = torch.empty((), dtype=torch.float32, device=self._buf.device)

    def flush(self) -> None:
        if self.mode == "write":
            self._buf.fill_(1.0)
        else:
            self._torch.sum(self._buf, dim=0, out=self._sink)


class Timer(Protocol):
    """Times one call. ``measure(fn)`` returns ``(fn's result, elapsed microseconds)``."""

    kind: str

    def measure(self, fn: Callable[[], Any]) -> tuple[Any, float]: ...


class CudaEventTimer:
    """The original harness's per-call timing: sync, L2 flush, event, call, event, sync.

    device: the CUDA device (default the current one). flush_bytes: L2 flush size in bytes
    (0 disables the flush).
    """

    kind = "cuda-events+l2-flush"

    def __init__(self, device=None, flush_bytes: int = FLUSH_BYTES):
        import torch

        self._torch = torch
        self._flusher = L2Flusher(device, flush_bytes) if flush_bytes > 0 else None

    def measure(self, fn: Callable[[], Any]) -> tuple[Any, float]:
        torch = self._torch
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        if self._flusher is not None:
            self._flusher.flush()
        start.record()
        out = fn()
        end.record()
        torch.cuda.synchronize()
        return out, start.elapsed_time(end) * 1e3  # ms -> us


class WallTimer:
    """Host wall-clock timing (``time.perf_counter``) for machines without a GPU. Not comparable
    with GPU numbers; used by the CPU paths of ``mixmla eval`` and by tests."""

    kind = "wall-clock (no GPU)"

    def measure(self, fn: Callable[[], Any]) -> tuple[Any, float]:
        t0 = time.perf_counter()
        out = fn()
        return out, (time.perf_counter() - t0) * 1e6


@dataclass
class CallTiming:
    """Result of :func:`time_calls`.

    stats: summary of ``samples`` (us), None if no call completed. samples: each call's latency in
    microseconds, in order. stop: why the loop stopped (see ``stop_reason``; ``"check failed"``
    when a re-check failed). failure: the failed re-check's message, else None.
    """

    stats: Stats | None
    samples: list[float] = field(default_factory=list)
    stop: str = ""
    failure: str | None = None


def time_calls(
    call: Callable[[Any], Any],
    timer: Timer,
    rule: StopRule,
    prepare: Callable[[int], Any] | None = None,
    check: Callable[[Any, Any], str | None] | None = None,
) -> CallTiming:
    """Repeat ``call`` under ``timer`` until ``rule`` says stop (the original harness's loop).

    call(inputs): the timed call; ``inputs`` is what ``prepare`` returned, or None.
    prepare(i): untimed, before call ``i`` (0-based); leaderboard mode regenerates inputs here.
    check(inputs, out): untimed, after each call; returns None when the output is right, else a
        message, which stops the loop with ``stop="check failed"`` (leaderboard mode re-checks
        every timed output).
    Returns a :class:`CallTiming` with the samples in microseconds.
    """
    samples: list[float] = []
    t0 = time.perf_counter()
    while True:
        inputs = prepare(len(samples)) if prepare is not None else None
        out, us = timer.measure(lambda: call(inputs))
        if check is not None:
            msg = check(inputs, out)
            if msg is not None:
                stats = summarize(samples) if samples else None
                return CallTiming(stats, samples, "check failed", msg)
        del out
        samples.append(us)
        reason = stop_reason(samples, time.perf_counter() - t0, rule)
        if reason is not None:
            return CallTiming(summarize(samples), samples, reason)


@dataclass
class GpuTiming:
    """Result of :func:`gpu_time`: ``median_us`` and ``min_us`` over ``n`` timed runs (us);
    ``method`` is ``"graph+flush"`` or ``"eager+flush"``; ``note`` says why a graph was not used;
    ``flush`` is the flusher's mode ("read" or "write")."""

    median_us: float
    min_us: float
    n: int
    method: str
    note: str = ""
    flush: str = "write"

    def as_dict(self) -> dict:
        return {"median_us": self.median_us, "min_us": self.min_us, "n": self.n, "method": self.method,
                "note": self.note, "flush": self.flush}


def capture_graph(fn: Callable[[], Any], warmup: int = 3):
    """Warm ``fn`` up ``warmup`` times on a side stream (as torch's graph docs require), then
    capture one call of it in a ``torch.cuda.CUDAGraph`` and return the graph."""
    import torch

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(warmup):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    torch.cuda.synchronize()
    return graph


def gpu_time(
    fn: Callable[[], Any],
    flusher: L2Flusher,
    use_graph: bool = True,
    warmup: int = 3,
    max_reps: int = 100,
    min_reps: int = 5,
    time_cap_s: float = 1.0,
    warm_s: float = 0.0,
) -> GpuTiming:
    """GPU time of ``fn`` in microseconds: median over replays, each after an L2 flush.

    fn(): the work, e.g. ``lambda: plan.run(q, cache, out=out)``; must not synchronize with the
    host if it is to be captured. With ``use_graph`` it is captured once in a CUDA graph (after
    ``warmup`` calls) and the graph is replayed; if capture fails, ``fn`` is timed eagerly.
    Repetitions: as many as fit in ``time_cap_s`` seconds of GPU time (flushes included), between
    ``min_reps`` and ``max_reps``. All events are enqueued back to back and read after one sync.
    warm_s: seconds of untimed runs (each after a flush, as timed) before the timed ones.
    A failed capture can leave torch's default CUDA random generator unusable in this process
    ("Offset increment outside graph capture"), so the harness generates its inputs with its own
    ``torch.Generator`` objects (``mixmla.inputs``).
    """
    import torch

    run, method, note = fn, "eager+flush", ""
    graph = None
    if use_graph:
        try:
            graph = capture_graph(fn, warmup)
            run, method = graph.replay, "graph+flush"
        except Exception as exc:  # a peer that syncs or allocates from the host cannot be captured
            torch.cuda.synchronize()
            note = f"graph capture failed ({type(exc).__name__}: {str(exc).splitlines()[0][:120]}); timed eagerly"
            graph = None
    if graph is None:
        for _ in range(warmup):
            fn()
        torch.cuda.synchronize()

    def timed(reps: int) -> list[float]:
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
        for s, e in zip(starts, ends):
            flusher.flush()
            s.record()
            run()
            e.record()
        torch.cuda.synchronize()
        return [s.elapsed_time(e) * 1e3 for s, e in zip(starts, ends)]

    t_warm = time.perf_counter()
    while time.perf_counter() - t_warm < warm_s:
        for _ in range(10):
            flusher.flush()
            run()
        torch.cuda.synchronize()

    # One probe (flush included) sizes the repetition count to the time cap.
    t0 = time.perf_counter()
    probe = timed(1)
    per_rep_s = max(time.perf_counter() - t0, probe[0] * 1e-6, 1e-6)
    reps = int(max(min_reps, min(max_reps, time_cap_s / per_rep_s)))
    samples = timed(reps)
    del graph
    return GpuTiming(median(samples), min(samples), len(samples), method, note, getattr(flusher, "mode", "write"))
