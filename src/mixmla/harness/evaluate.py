"""``mixmla eval test|benchmark|leaderboard SPECFILE [--submission FILE]``: the original harness's modes.

Runs a ``custom_kernel(data)`` (ours, ``mixmla.api.custom_kernel``, by default; or the one defined
in a user's submission file) on every spec line of SPECFILE
(``batchsize: 32; qseqlen: 1; kvseqlen: 8192; seed: 5415``), the way the GPU MODE harness did:

- ``test``: one call per spec; the output is checked with the original loose rule (rtol = atol =
  0.1, at most 5% of elements off, against the fp8-cache reference) *and* this project's strict rule
  (relative L2 <= 1e-2 against the reference on the cache format the output matches best).
- ``benchmark``: one checked call, then the call-latency loop of :mod:`mixmla.harness.timing`
  (L2 flush, CUDA events around the whole call, until the standard error is < 0.1% of the mean,
  100 calls, 10 s of summed time or 120 s of wall time); mean, std, err, best, worst.
- ``leaderboard``: as benchmark, but every timed call gets freshly generated inputs (seed + 13 per
  call, as the original did) and every timed output is re-checked (loose and strict); a failing
  output ends the case as failed. Summed-time cap 30 s.

The geometric mean of the per-spec means is the ranking number. Without a CUDA GPU, ``test`` runs
on the CPU (our kernels in the Triton interpreter) and the timed modes fall back to wall-clock time,
clearly labelled and not comparable with GPU numbers; there, specs with more cached tokens than
``--max-kv-tokens`` (default: ``mixmla test``'s CPU cap) are skipped, as the interpreter takes
minutes on them, and a live progress line says what runs on a terminal. Exit status: 0 when every
spec that ran passed both checks (and one ran).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import sys
import types

from .progress import Progress
from .selftest import CPU_MAX_KV_TOKENS, kv_tokens, shape_label
from .stats import StopRule, geomean

__all__ = ["SubmissionError", "load_submission", "main", "build_parser", "MODES", "rule_for"]

MODES = ("test", "benchmark", "leaderboard")
#: The original harness advanced the seed by 13 for every timed call in leaderboard mode.
LEADERBOARD_SEED_STEP = 13


class SubmissionError(Exception):
    """The submission file could not be loaded or has no callable ``custom_kernel``."""


def _ensure_task_module() -> None:
    """GPU MODE submissions start with ``from task import input_t, output_t``; provide those type
    aliases when no ``task`` module exists."""
    if "task" in sys.modules or importlib.util.find_spec("task") is not None:
        return
    import torch

    task = types.ModuleType("task")
    task.__doc__ = "Stand-in for the GPU MODE harness's task module (types only), made by mixmla eval."
    task.input_t = tuple
    task.output_t = torch.Tensor
    sys.modules["task"] = task


def load_submission(path: str | None = None):
    """``(custom_kernel, name)`` from a submission file, or ours when ``path`` is None.

    path: a Python file defining ``custom_kernel(data) -> Tensor`` (total_q, H, 512). It is imported
    under a private module name with its own folder first on ``sys.path`` (so its sibling modules
    import); ``from task import input_t, output_t`` works. Raises :class:`SubmissionError`.
    """
    if path is None:
        from ..api import custom_kernel

        return custom_kernel, "mixmla.api.custom_kernel"
    path = os.path.abspath(path)
    if not os.path.isfile(path):
        raise SubmissionError(f"submission file not found: {path}")
    stem = re.sub(r"\W", "_", os.path.splitext(os.path.basename(path))[0])
    name = f"mixmla_submission_{stem}"
    _ensure_task_module()
    folder = os.path.dirname(path)
    sys.path.insert(0, folder)
    try:
        spec = importlib.util.spec_from_file_location(name, path)
        if spec is None or spec.loader is None:
            raise SubmissionError(f"cannot import {path} as a Python module")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        try:
            spec.loader.exec_module(module)
        except Exception as e:
            sys.modules.pop(name, None)
            raise SubmissionError(f"importing {path} failed: {type(e).__name__}: {e}") from e
    finally:
        if sys.path and sys.path[0] == folder:
            sys.path.pop(0)
    fn = getattr(module, "custom_kernel", None)
    if not callable(fn):
        raise SubmissionError(f"{path} defines no callable custom_kernel(data)")
    return fn, os.path.basename(path)


def rule_for(mode: str, max_count: int | None = None, wall_cap_s: float | None = None) -> StopRule:
    """The stopping rule of ``mode``: 0.1% standard error, at least 3 and at most 100 calls, 10 s
    (benchmark) or 30 s (leaderboard) of summed call time (expressed in us), 120 s of wall time."""
    time_cap_us = (30e6 if mode == "leaderboard" else 10e6)
    return StopRule(rel_err=1e-3, min_count=min(3, max_count or 3), max_count=max_count or 100,
                    time_cap=time_cap_us, wall_cap_s=120.0 if wall_cap_s is None else wall_cap_s)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="mixmla eval", description=__doc__.split("\n\n")[0].replace("``", ""),
                                epilog="example: mixmla eval leaderboard specs.txt --submission my_kernel.py",
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("mode", choices=MODES)
    p.add_argument("specfile", help="one spec per line: 'batchsize: 4; qseqlen: 1; kvseqlen: 1024; seed: 4220'")
    p.add_argument("--submission", metavar="FILE", help="a .py file defining custom_kernel(data) (default: ours)")
    p.add_argument("--max-count", type=int, default=None, help="timed calls per spec at most (default 100)")
    p.add_argument("--wall-cap", type=float, default=None, help="wall-clock seconds per spec at most (default 120)")
    p.add_argument("--json", metavar="FILE", help="also write the per-spec results as JSON")
    p.add_argument("--max-kv-tokens", type=int, default=None,
                   help=f"skip specs with more cached tokens (batchsize x kvseqlen; default: {CPU_MAX_KV_TOKENS} "
                        "without CUDA, unlimited with it)")
    return p


def _check(out, case, fmt: str | None):
    """Loose + strict verdict; strict against ``fmt``'s reference or, if None, the closest one."""
    from .verify import verify, verify_any_format

    return verify(out, case, fmt) if fmt else verify_any_format(out, case)


def _fail_text(verdict) -> str | None:
    bad = [r.message for r in (verdict.loose, verdict.strict) if r is not None and not r.passed]
    return "; ".join(bad) if bad else None


def _new_result(spec: dict, skipped: str | None = None) -> dict:
    from ..inputs import format_spec

    return {"spec": format_spec(spec), "passed": False, "loose": None, "strict": None, "format": None,
            "timing": None, "error": None, "skipped": skipped}


def _run_spec(mode: str, spec: dict, kernel, device: str, timer, rule: StopRule, phase=lambda text: None) -> dict:
    """One spec in ``mode``; ``phase(text)`` is told what runs now (for a progress line)."""
    from .cases import Case
    from .timing import time_calls

    res = _new_result(spec)
    try:
        phase("inputs and references")
        case = Case.generate(spec, device=device)
        for fmt in ("bf16", "fp8", "mxfp4"):  # references before the call, in case it writes its inputs
            case.ref(fmt)
        phase("checked call")
        verdict = _check(kernel(case.data), case, None)
    except Exception as e:
        res["error"] = f"{type(e).__name__}: {e}"
        return res
    d = verdict.as_dict()
    res.update(loose=d["loose"], strict=d["strict"], format=verdict.fmt, passed=verdict.passed)
    if mode == "test" or not verdict.passed:
        return res
    fmt = verdict.fmt
    prepare = check = None
    if mode == "leaderboard":
        def prepare(i: int):
            fresh = dict(spec, seed=int(spec["seed"]) + LEADERBOARD_SEED_STEP * (i + 1))
            c = Case.generate(fresh, device=device)
            c.ref(fmt), c.ref("fp8")  # untimed, before the call
            return c

        def check(c, out):
            return _fail_text(_check(out, c, fmt))

        call = lambda c: kernel(c.data)  # noqa: E731
    else:
        call = lambda _c: kernel(case.data)  # noqa: E731
        phase("warm-up")
        for _ in range(2):  # warm-up, as the original's first quick pass did
            kernel(case.data)
    timed = []

    def counted(inputs):
        timed.append(None)
        phase(f"timed call {len(timed)}")
        return call(inputs)

    try:
        t = time_calls(counted, timer, rule, prepare=prepare, check=check)
    except Exception as e:
        res.update(passed=False, error=f"timing failed: {type(e).__name__}: {e}")
        return res
    res["timing"] = dict(t.stats.as_dict(), stop=t.stop, unit="us") if t.stats else None
    if t.failure:
        res.update(passed=False, error=f"re-check failed on timed call {len(t.samples) + 1}: {t.failure}")
    return res


def _print_result(r: dict) -> None:
    if r["skipped"]:
        print(f"    SKIPPED {r['skipped']}")
    if r["error"]:
        print(f"    ERROR {r['error']}")
    for key in ("loose", "strict"):
        if r[key]:
            extra = f" (against the {r['format']} cache reference)" if key == "strict" else ""
            print(f"    {r[key]['message']}{extra}")
    t = r.get("timing")
    if t:
        print(f"    time: mean {t['mean']:.2f} us ± {t['err']:.2f} (std {t['std']:.2f}), best {t['best']:.2f}, "
              f"worst {t['worst']:.2f}, n={t['n']} ({t['stop']})")
    sys.stdout.flush()


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``mixmla eval``. argv: arguments after ``eval``. Returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    from .env import has_cuda

    cuda = has_cuda()
    from ..inputs import parse_spec_file

    try:
        specs = parse_spec_file(args.specfile)
        kernel, name = load_submission(args.submission)
    except (OSError, ValueError, SubmissionError) as e:
        print(f"mixmla eval: {e}", file=sys.stderr)
        return 2
    if not specs:
        print(f"mixmla eval: no spec lines in {args.specfile}", file=sys.stderr)
        return 2
    if cuda:
        from .timing import CudaEventTimer

        timer, device = (CudaEventTimer() if args.mode != "test" else None), "cuda"
    else:
        from .timing import WallTimer

        timer, device = WallTimer(), "cpu"
        print("mixmla eval: no CUDA GPU; running on the CPU" + ("" if args.mode == "test" else
              ", timing with the host wall clock (NOT comparable with GPU numbers)"))
    max_tokens = args.max_kv_tokens if args.max_kv_tokens is not None or cuda else CPU_MAX_KV_TOKENS
    if max_tokens is not None and not cuda:
        print(f"mixmla eval: only specs with at most {max_tokens} cached tokens are run on the CPU (the Triton "
              f"interpreter takes minutes on larger ones; --max-kv-tokens changes it)")
    print(f"mixmla eval {args.mode}: {name} on {len(specs)} spec(s) from {args.specfile}", flush=True)
    rule = rule_for(args.mode, args.max_count, args.wall_cap)
    # The live line only off the GPU: there its refreshes would share the host with the timed calls.
    progress = Progress(len(specs), f"mixmla eval {args.mode}", live=False if cuda else None)
    results = []
    try:
        for i, spec in enumerate(specs):
            head = f"[{i + 1}/{len(specs)}] {_new_result(spec)['spec']}"
            print(head, flush=True)
            if max_tokens is not None and kv_tokens(spec) > max_tokens:
                r = _new_result(spec, skipped=f"{kv_tokens(spec)} cached tokens > {max_tokens} (--max-kv-tokens)")
            else:
                label = f"[{i + 1}/{len(specs)}] {shape_label(spec)}"
                r = _run_spec(args.mode, spec, kernel, device, timer, rule,
                              phase=lambda text, label=label: progress.describe(f"{label}: {text}"))
            results.append(r)
            progress.done()
            _print_result(r)
    finally:
        progress.close()
    ran = [r for r in results if not r["skipped"]]
    passed = sum(r["passed"] for r in ran)
    skipped = len(results) - len(ran)
    print(f"\n{passed} of {len(ran)} specs passed both checks (loose: original harness rule; strict: rel L2 "
          f"<= 1e-2)" + (f"; {skipped} skipped" if skipped else ""))
    means = [r["timing"]["mean"] for r in ran if r.get("timing")]
    summary = {"mode": args.mode, "kernel": name, "timer": getattr(timer, "kind", None), "results": results,
               "geomean_us": geomean(means) if means and len(means) == len(ran) else None}
    if args.mode != "test":
        if summary["geomean_us"] is not None:
            print(f"geomean of means: {summary['geomean_us']:.2f} us over {len(means)} specs ({timer.kind})"
                  + (f", {skipped} skipped" if skipped else ""))
        else:
            print("geomean: not computed (" + ("a spec failed" if ran else "no spec ran") + ")")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(summary, f, indent=1)
    if not ran:
        print("mixmla eval: nothing was run (every spec was skipped)", file=sys.stderr)
        return 1
    return 0 if passed == len(ran) else 1


if __name__ == "__main__":
    sys.exit(main())
