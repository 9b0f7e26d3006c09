"""One implementation on one case: prepare and check it (untimed), then time it; and which rows
count for the exit status. Shared by ``mixmla bench`` on a GPU and its CPU demo."""

from __future__ import annotations

__all__ = ["check_impl_case", "time_impl_case", "exit_status", "peer_formats"]


def check_impl_case(impl, case, fmt: str):
    """Prepare ``impl`` for ``case`` in ``fmt`` and check its outputs (untimed).

    Checks ``call()``'s output, and ``gpu()``'s output when it is a different callable (written into
    its preallocated buffer, poisoned with NaN first). Returns ``(row, prepared)``: the row has
    status "ok" (strict check passed), "check failed", "unsupported" or "error"; ``prepared`` is
    None unless the status is ok.
    """
    import torch

    from .peers import Unsupported
    from .report import make_row
    from .verify import verify, verify_any_format

    row = make_row(case.spec, case.label, impl.name, fmt)
    try:
        prep = impl.prepare(case, fmt)
        out = prep.call()
        verdict = verify(out, case, prep.fmt) if prep.fmt else verify_any_format(out, case)
        del out
        row.update(check=verdict.as_dict(), format=verdict.fmt, note=prep.note)
        if not verdict.strict.passed:
            row.update(status="check failed", note=verdict.strict.message)
            return row, None
        if prep.gpu is not prep.call:
            if prep.out is not None:
                prep.out.fill_(float("nan"))
            out2 = prep.gpu()
            again = verify(out2, case, verdict.fmt, loose=False)
            if not again.strict.passed:
                row.update(status="check failed", note="graph-path output: " + again.strict.message)
                return row, None
        if case.q.is_cuda:
            torch.cuda.synchronize()
    except Unsupported as e:
        row.update(status="unsupported", note=str(e))
        return row, None
    except Exception as e:  # report, keep going with the other cases
        row.update(status="error", note=f"{type(e).__name__}: {str(e).strip().splitlines()[0][:200] if str(e).strip() else ''}")
        return row, None
    return row, prep


def time_impl_case(row: dict, prep, case, settings, timer, flushers, ceiling_gbps, wall_cap_s=None) -> dict:
    """Time a checked case (``settings``: a ``bench.Settings``): ``settings.warmup`` untimed calls, call latency (``time_calls``), GPU time
    (``gpu_time``) after each of ``flushers`` (``(read, write)`` L2 flushers: the first gives
    ``row["gpu"]``, the second ``row["gpu"]["write_flush_median_us"]``); then bytes and bandwidth.
    ``wall_cap_s`` overrides the rule's wall cap (the run's budget shrinks it). Errors become status
    "error". Returns the row."""
    import dataclasses

    from .report import fill_bandwidth
    from .timing import gpu_time, time_calls

    rule = settings.rule if wall_cap_s is None else dataclasses.replace(settings.rule, wall_cap_s=wall_cap_s)
    try:
        for _ in range(settings.warmup):
            prep.call()
        lat = time_calls(lambda _inputs: prep.call(), timer, rule)
        row["latency_us"] = dict(lat.stats.as_dict(), stop=lat.stop)
        main_flusher, write_flusher = flushers
        cap = min(settings.gpu_cap_s, rule.wall_cap_s)
        latency = lat.stats.mean if lat.stats else 0.0
        g, again = _checked_gpu_time(lambda: gpu_time(prep.gpu, main_flusher, time_cap_s=cap,
                                                      max_reps=settings.gpu_max_reps, warm_s=settings.gpu_warm_s),
                                     latency)
        row["gpu"] = g.as_dict()
        notes = [n for n in (g.note, again) if n]
        if write_flusher is not None:
            gw, again_w = _checked_gpu_time(lambda: gpu_time(prep.gpu, write_flusher, time_cap_s=cap,
                                                             max_reps=settings.gpu_max_reps), latency)
            row["gpu"]["write_flush_median_us"] = gw.median_us
            notes += [f"write flush: {again_w}"] if again_w else []
        for n in notes:
            row["note"] = (row["note"] + "; " if row["note"] else "") + n
    except Exception as e:
        row.update(status="error", latency_us=None, gpu=None,
                   note=f"timing failed: {type(e).__name__}: {str(e).strip().splitlines()[0][:200] if str(e).strip() else ''}")
        return row
    row["bytes"] = case.bytes(row["format"])
    return fill_bandwidth(row, ceiling_gbps)



#: A GPU time over this many times the call latency of the same case is measured again: a call
#: returns after its kernels, so its GPU time cannot be that much longer (a colder L2 after the
#: flush makes it at most somewhat longer).
SUSPECT_GPU_OVER_LATENCY = 2.0


def _checked_gpu_time(measure, latency_us: float):
    """``measure()`` (a ``gpu_time`` call), taken a second time when its median exceeds
    ``SUSPECT_GPU_OVER_LATENCY`` times ``latency_us`` (the same case's mean call latency, us; 0:
    unknown, no check). Returns the timing kept (the second, when taken) and a note saying what
    happened ("" if nothing)."""
    g = measure()
    if not latency_us or g.median_us <= SUSPECT_GPU_OVER_LATENCY * latency_us:
        return g, ""
    first = g.median_us
    g = measure()
    verdict = ("the second agrees with the call latency" if g.median_us <= SUSPECT_GPU_OVER_LATENCY * latency_us
               else "the second is over it too")
    return g, (f"GPU time measured twice: the first median, {first:.1f} us, was over "
               f"{SUSPECT_GPU_OVER_LATENCY:g}x the call latency ({latency_us:.1f} us); {verdict}")


def exit_status(rows: list[dict]) -> int:
    """1 when any of our (``mixmla``) rows failed its check or errored, else 0. Peers, unsupported
    and skipped cases do not count."""
    bad = [r for r in rows if r["impl"] == "mixmla" and r["status"] in ("check failed", "error")]
    return 1 if bad else 0


def peer_formats(offered, paths: list[str]) -> list[str]:
    """The formats a peer runs: those of ``offered`` named in ``paths``; all of them when ``paths``
    names no format (e.g. only ``auto``, or nothing)."""
    named = [f for f in offered if f in paths]
    return named if any(p in ("bf16", "fp8", "mxfp4") for p in paths) else list(offered)
