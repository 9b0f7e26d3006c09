"""The ``mixmla`` console script: a thin dispatcher over subcommands.

Each subcommand lives in its own module as ``main(argv: list[str] | None) -> int`` (its own
argparse parser, ``prog="mixmla NAME"``) and is imported only when it runs, so ``mixmla --help``
stays instant and a broken or missing subcommand cannot break the others. To add one, add a line
to :data:`COMMANDS`.
"""

from __future__ import annotations

import argparse
import importlib
import sys

#: name -> (``module:function``, one-line summary). The function gets the remaining arguments.
COMMANDS: dict[str, tuple[str, str]] = {
    "test": ("mixmla.harness.selftest:main",
             "check the best available implementation against the exact reference, per shape and "
             "cache format (bf16, fp8, mxfp4), with the loose harness rule and the strict rule"),
    "bench": ("mixmla.harness.bench:main",
              "time the implementation and its peers on the benchmark shapes (needs a CUDA GPU)"),
    "eval": ("mixmla.harness.evaluate:main",
             "run the original harness's modes: test, benchmark, leaderboard"),
    "accuracy": ("mixmla.accuracy.command:main",
                 "what each cache format costs in accuracy: the float64 reference on every decoded "
                 "layout, Gaussian and outlier-heavy caches (a CPU is enough)"),
}

DESCRIPTION = """\
mixmla: MLA (DeepSeek forward-absorb) decode attention over bf16, fp8 and MXFP4 KV caches.

Every subcommand has its own help: mixmla SUBCOMMAND --help."""

EPILOG = """\
examples:
  mixmla test                      built-in small test shapes, all three formats
  mixmla test shapes.txt           shapes from a spec file, one per line, e.g.
                                   'batchsize: 4; qseqlen: 1; kvseqlen: 1024; seed: 4220'
  mixmla bench                     the benchmark table (CUDA GPU)
  mixmla accuracy                  each cache format's error (docs/ACCURACY.md; CPU, minutes)

Without a CUDA GPU the Triton kernels run in the Triton interpreter (importing mixmla sets
TRITON_INTERPRET=1 unless the environment sets it), which is slow, so only small shapes are run
there.
Exit status: 0 when everything checked passed, nonzero otherwise."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mixmla", description=DESCRIPTION, epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", metavar="SUBCOMMAND", title="subcommands")
    for name, (_, summary) in COMMANDS.items():
        # add_help=False: ``mixmla NAME --help`` is answered by the subcommand's own parser.
        sub.add_parser(name, help=summary, add_help=False)
    return parser


def _load(target: str):
    module_name, _, function_name = target.partition(":")
    return getattr(importlib.import_module(module_name), function_name)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``mixmla`` script. argv: arguments without the program name."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    if not argv or argv[0] not in COMMANDS:
        args = parser.parse_args(argv)  # prints help / usage errors and exits
        if args.command is None:
            parser.print_help()
            return 2
    name, rest = argv[0], argv[1:]
    target = COMMANDS[name][0]
    try:
        command = _load(target)
    except (ImportError, AttributeError) as e:
        print(f"mixmla {name}: not available in this installation ({target}: {e})", file=sys.stderr)
        return 2
    return int(command(rest) or 0)


if __name__ == "__main__":
    sys.exit(main())
