"""``mixmla accuracy``: what each cache layout costs in accuracy (the study of docs/ACCURACY.md).

Runs :mod:`mixmla.accuracy.study` (the float64 reference on every decoded layout; no kernel, so
a CPU is enough), prints the summary tables and writes accuracy.json, accuracy.md and
accuracy.png into the output folder.
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time

from .layouts import LAYOUTS

DEFAULT_OUT = "bench/out/accuracy"


def _layout_names(text: str) -> list[str]:
    """argparse type of --layouts: comma-separated names of LAYOUTS, at least one."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in LAYOUTS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"unknown layouts {unknown}; choose from {', '.join(LAYOUTS)}")
    return names


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def build_parser() -> argparse.ArgumentParser:
    from . import study

    contexts = ", ".join(f"{b}x{n}" for n, b in study.DEFAULT_CONTEXTS)
    parser = argparse.ArgumentParser(
        prog="mixmla accuracy",
        description=(
            "Measure what each KV-cache layout does to the attention output: every layout is "
            "quantized from the bf16 cache, decoded exactly, and run through the float64 reference; "
            "its output and log-sum-exp are compared with the reference on the bf16 cache and on the "
            "unrounded float cache. Caches: Gaussian, and outlier-heavy (a few latent channels 10-50x "
            "larger, rope dims 4x: mixmla.inputs.realistic_cache). Seeded: the same command gives the "
            "same numbers on any machine up to float64 rounding."),
        epilog=(
            f"Default problems: batch x cached tokens {contexts}; heads {', '.join(map(str, study.DEFAULT_HEADS))}; "
            f"{study.DEFAULT_REPEATS} seeds each; both cache kinds. Layouts: "
            + "; ".join(f"{n}: {layout.description}" for n, layout in LAYOUTS.items())
            + ". Relative L2 is ||a - ref|| / ||ref||; lse errors are absolute, in nats."),
    )
    parser.add_argument("--quick", action="store_true",
                        help="one small problem per cache kind (seconds; for tests and a first look)")
    parser.add_argument("--seed", type=int, default=study.DEFAULT_SEED, help="base seed (default %(default)s)")
    parser.add_argument("--repeats", type=_positive, default=None,
                        help=f"seeds per problem (default {study.DEFAULT_REPEATS}, --quick {study.QUICK_REPEATS})")
    parser.add_argument("--layouts", type=_layout_names, default=list(LAYOUTS),
                        help="comma-separated subset of the layouts (default: all)")
    parser.add_argument("--device", default="cpu", help="torch device for the reference (default cpu)")
    parser.add_argument("--out", default=DEFAULT_OUT, help="output folder (default %(default)s)")
    parser.add_argument("--plain", action="store_true", help="plain-text tables even if rich is installed")
    return parser


def main(argv: list[str] | None = None) -> int:
    """``mixmla accuracy``; argv: its arguments. Returns the exit status (0 on success; bad arguments
    exit with status 2, as argparse does)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)  # bad arguments: a usage message and exit status 2
    layouts = args.layouts

    import torch

    from ..harness.env import device_info
    from . import report, study

    try:
        device = torch.device(args.device)
    except RuntimeError as e:
        print(f"mixmla accuracy: bad --device: {e}", file=sys.stderr)
        return 2
    contexts = study.QUICK_CONTEXTS if args.quick else study.DEFAULT_CONTEXTS
    heads = study.QUICK_HEADS if args.quick else study.DEFAULT_HEADS
    repeats = args.repeats or (study.QUICK_REPEATS if args.quick else study.DEFAULT_REPEATS)
    cases = study.make_cases(contexts, heads, args.seed, repeats)
    settings = {"quick": args.quick, "seed": args.seed, "repeats": repeats, "layouts": layouts,
                "contexts": [list(c) for c in contexts], "heads": heads, "device": str(device),
                "threads": torch.get_num_threads()}
    doc = report.new_document(settings, device_info(device if device.type == "cuda" else None),
                              "mixmla accuracy" + "".join(f" {shlex.quote(a)}" for a in argv))
    start = time.perf_counter()

    def progress(i, case):
        print(f"[{i + 1}/{len(cases)}] {case.label} (batch {case.batch}, seed {case.seed}) "
              f"{time.perf_counter() - start:.0f} s", flush=True)

    doc["runs"] = study.run_study(cases, layouts, device, progress=progress)
    doc["seconds"] = time.perf_counter() - start
    report.print_tables(doc, plain=args.plain)
    paths = report.write_all(doc, args.out)
    print(f"{len(cases)} cases in {doc['seconds']:.0f} s; wrote " + ", ".join(paths.values()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
