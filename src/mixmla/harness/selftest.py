"""``mixmla test``: run an implementation on test shapes and check it against the exact reference.

For every shape and cache format the implementation's output is compared with
``mixmla.reference.mla_decode_reference`` computed on the *same* cache (so quantization error is
not blamed on the kernel) with both the original harness's loose rule and the strict rule (see
``mixmla.check``). The format's own error against the bf16 ground truth is shown beside it.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import sys
import time
from dataclasses import dataclass
from typing import Callable

#: Under the Triton interpreter (no CUDA GPU) larger shapes take minutes; skip them by default.
CPU_MAX_KV_TOKENS = 4096

FORMATS = ("bf16", "fp8", "mxfp4")


@dataclass
class CaseResult:
    """Outcome of one (shape, format) case. status: PASS, FAIL, ERROR or SKIP."""

    spec: str
    fmt: str
    status: str
    loose: str = ""
    strict: str = ""
    format_error: str = ""
    seconds: float = 0.0
    detail: str = ""


def _reference_implementation(q, cache, kv_indptr, qo_indptr=None, sm_scale=None):
    """The exact reference, rounded to bf16 like a kernel's output: (total_q, H, 512) bf16."""
    import torch

    from ..reference import mla_decode_reference

    return mla_decode_reference(q, cache, kv_indptr, qo_indptr, sm_scale)[0].to(torch.bfloat16)


def resolve_implementation(name: str) -> tuple[Callable, str]:
    """The function to test and a sentence saying what it is.

    name: ``auto`` (``mixmla.api.mla_decode`` if it imports, else the reference, saying why),
    ``api``, ``reference``, or ``package.module:function`` for any function with the signature
    ``f(q, cache, kv_indptr, qo_indptr=None, sm_scale=None[, out=None]) -> out | (out, lse)``.
    """
    if name == "reference":
        return _reference_implementation, "mixmla.reference.mla_decode_reference (exact, float64)"
    if name in ("auto", "api"):
        try:
            from ..api import mla_decode
        except Exception as e:  # any failure to import means: not available here
            if name == "api":
                raise RuntimeError(f"mixmla.api.mla_decode is not available: {type(e).__name__}: {e}") from e
            return _reference_implementation, (
                f"mixmla.reference.mla_decode_reference (FALLBACK: mixmla.api.mla_decode is not "
                f"available: {type(e).__name__}: {e})")
        return mla_decode, "mixmla.api.mla_decode"
    module_name, sep, function_name = name.partition(":")
    if not sep:
        raise ValueError(f"--impl must be auto, api, reference or module:function, got {name!r}")
    return getattr(importlib.import_module(module_name), function_name), name


def _accepts_out(fn: Callable) -> bool:
    try:
        return "out" in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


def _synchronize(device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def run_case(fn: Callable, data, fmt: str, spec_text: str, ground_truth, strict_tol: float) -> CaseResult:
    """Run ``fn`` on one format of the benchmark tuple ``data`` and check it.

    ground_truth: the reference output on the bf16 cache, (total_q, H, 512) float64, used only to
    report the format's own error.
    """
    import torch

    from ..check import check_loose, check_strict
    from ..reference import mla_decode_reference

    q, kv_data, qo_indptr, kv_indptr, config = data
    cache = kv_data[fmt]
    kwargs = {"qo_indptr": qo_indptr, "sm_scale": config["sm_scale"]}
    if _accepts_out(fn):
        # Poisoned so that elements the implementation never writes are caught.
        kwargs["out"] = torch.full((q.shape[0], q.shape[1], 512), float("nan"), dtype=torch.bfloat16, device=q.device)
    try:
        start = time.perf_counter()
        result = fn(q, cache, kv_indptr, **kwargs)
        _synchronize(q.device)
        seconds = time.perf_counter() - start
    except Exception as e:
        first_line = (str(e).splitlines() or [""])[0]
        return CaseResult(spec_text, fmt, "ERROR", detail=f"{type(e).__name__}: {first_line}")
    out = result[0] if isinstance(result, (tuple, list)) else result
    if out is None:
        out = kwargs.get("out")
    ref, _ = mla_decode_reference(q, cache, kv_indptr, qo_indptr, config["sm_scale"])
    loose, strict = check_loose(out, ref), check_strict(out, ref, tol=strict_tol)
    fmt_err = check_strict(ref, ground_truth, tol=float("inf")).rel_l2
    status = "PASS" if loose.passed and strict.passed else "FAIL"
    detail = "" if status == "PASS" else "; ".join(c.message for c in (loose, strict) if not c.passed)
    return CaseResult(
        spec_text, fmt, status,
        loose=f"{'ok' if loose.passed else 'FAIL'} {loose.mismatches / max(loose.num_elements, 1):.1%}",
        strict=f"{'ok' if strict.passed else 'FAIL'} {strict.rel_l2:.2e}",
        format_error=f"{fmt_err:.2e}", seconds=seconds, detail=detail,
    )


def shape_label(spec: dict) -> str:
    """Short label of a spec dict, e.g. ``b4 q1 kv1024 h16 s4220`` (``kv<=N`` when ragged)."""
    kv = f"kv<={spec['kvseqlen']}" if spec.get("ragged") else f"kv{spec['kvseqlen']}"
    return f"b{spec['batchsize']} q{spec['qseqlen']} {kv} h{spec.get('numheads', 16)} s{spec['seed']}"


def kv_tokens(spec: dict) -> int:
    """Cached tokens of a spec at most (batchsize x kvseqlen; a ragged spec has fewer): what its
    time under the interpreter grows with."""
    return int(spec["batchsize"]) * int(spec["kvseqlen"])


def _print_table(results: list[CaseResult], plain: bool) -> None:
    headers = ("shape", "format", "status", "loose: miss", "strict: rel L2", "format err", "time")
    rows = [
        (r.spec, r.fmt, r.status, r.loose, r.strict, r.format_error,
         f"{r.seconds * 1e3:.1f} ms" if r.status in ("PASS", "FAIL") else "")
        for r in results
    ]
    if not plain:
        try:
            from rich.console import Console
            from rich.table import Table
        except ImportError:
            plain = True
    if plain:
        widths = [max(len(h), *(len(row[i]) for row in rows)) if rows else len(h) for i, h in enumerate(headers)]
        print("  ".join(h.ljust(w) for h, w in zip(headers, widths)))
        for row in rows:
            print("  ".join(c.ljust(w) for c, w in zip(row, widths)))
        return
    colour = {"PASS": "green", "FAIL": "bold red", "ERROR": "bold red", "SKIP": "yellow"}
    table = Table(*headers, caption="format err: the format's own error, reference on it vs on bf16")
    for row in rows:
        table.add_row(*row[:2], f"[{colour[row[2]]}]{row[2]}[/]", *row[3:])
    Console(width=max(Console().width, 100)).print(table)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mixmla test",
        description=(
            "Check an implementation against the exact reference on the same cache, per shape and "
            "format, with the original harness's loose rule (|out-ref| <= 0.1 + 0.1*|ref| for all "
            "but 5% of the elements) and the strict rule (relative L2 error <= 1e-2, no NaN/Inf). "
            "Output buffers are poisoned with NaN first when the implementation takes out=. "
            "'format vs bf16' is the format's own quantization error (the reference on that "
            "format against the reference on bf16), for information."),
        epilog=(
            "Spec file: one shape per line, 'batchsize: 4; qseqlen: 1; kvseqlen: 1024; seed: 4220'; "
            "optional keys 'numheads: 32' and 'ragged: 1' (random per-request lengths up to "
            "kvseqlen, including 0 and 1); blank lines and lines starting with # are skipped. "
            "Without a CUDA GPU the kernels run in the Triton interpreter and shapes with more than "
            f"{CPU_MAX_KV_TOKENS} cached tokens are skipped (see --max-kv-tokens). "
            "Exit status 0 only if every case that ran passed."),
    )
    parser.add_argument("spec_file", nargs="?", help="spec-line file (default: the built-in test shapes)")
    parser.add_argument("--benchmark-shapes", action="store_true",
                        help="use the 8 benchmark shapes of docs/SPEC.md instead of the test shapes")
    parser.add_argument("--impl", default="auto",
                        help="auto (default: mixmla.api.mla_decode, or the reference if that is not "
                             "available), api, reference, or module:function")
    parser.add_argument("--formats", default=",".join(FORMATS), help="comma-separated subset of bf16,fp8,mxfp4")
    parser.add_argument("--device", default=None, help="torch device (default: cuda if available, else cpu)")
    parser.add_argument("--max-kv-tokens", type=int, default=None,
                        help=f"skip shapes with more cached tokens (default: {CPU_MAX_KV_TOKENS} without "
                             "CUDA, unlimited with it)")
    parser.add_argument("--strict-tol", type=float, default=1e-2, help="relative L2 bound of the strict rule")
    parser.add_argument("--plain", action="store_true", help="plain-text table even if rich is installed")
    return parser


def main(argv: list[str] | None = None) -> int:
    """``mixmla test``; argv: its arguments. Returns the exit status (0: all checked cases passed)."""
    args = build_parser().parse_args(argv)
    formats = [f.strip() for f in args.formats.split(",") if f.strip()]
    unknown = [f for f in formats if f not in FORMATS]
    if unknown or not formats:
        print(f"mixmla test: unknown formats {unknown}; choose from {', '.join(FORMATS)}", file=sys.stderr)
        return 2

    import torch

    from .. import interpreter
    from ..inputs import BENCHMARK_SHAPES, TEST_SHAPES, generate_from_spec, parse_spec_file
    from ..reference import mla_decode_reference

    if args.spec_file:
        try:
            specs = parse_spec_file(args.spec_file)
        except (OSError, ValueError) as e:
            print(f"mixmla test: {e}", file=sys.stderr)
            return 2
    else:
        specs = BENCHMARK_SHAPES if args.benchmark_shapes else TEST_SHAPES
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    interpreted = interpreter.active()
    max_tokens = args.max_kv_tokens
    if max_tokens is None and device.type != "cuda":
        max_tokens = CPU_MAX_KV_TOKENS
    try:
        fn, description = resolve_implementation(args.impl)
    except Exception as e:
        print(f"mixmla test: {e}", file=sys.stderr)
        return 2

    print(f"implementation: {description}")
    print(f"device: {device}" + (" (Triton interpreter: TRITON_INTERPRET=1)" if interpreted else ""))
    if max_tokens is not None and device.type != "cuda":
        print(f"no CUDA GPU: only shapes with at most {max_tokens} cached tokens are run (--max-kv-tokens)")

    results: list[CaseResult] = []
    for spec in specs:
        text = shape_label(spec)
        if max_tokens is not None and kv_tokens(spec) > max_tokens:
            reason = f"skipped: {kv_tokens(spec)} cached tokens > {max_tokens}"
            results.extend(CaseResult(text, fmt, "SKIP", detail=reason) for fmt in formats)
            continue
        data = generate_from_spec(spec, device=device)
        q, kv_data, qo_indptr, kv_indptr, config = data
        ground_truth, _ = mla_decode_reference(q, kv_data["bf16"], kv_indptr, qo_indptr, config["sm_scale"])
        for fmt in formats:
            results.append(run_case(fn, data, fmt, text, ground_truth, args.strict_tol))

    _print_table(results, args.plain)
    failed = [r for r in results if r.status in ("FAIL", "ERROR")]
    for r in failed:
        print(f"{r.status} {r.spec} [{r.fmt}]: {r.detail}")
    checked = sum(r.status in ("PASS", "FAIL", "ERROR") for r in results)
    skipped = sum(r.status == "SKIP" for r in results)
    print(f"{checked - len(failed)} passed, {len(failed)} failed, {skipped} skipped")
    if checked == 0:
        print("mixmla test: nothing was checked (every shape was skipped)", file=sys.stderr)
        return 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
