"""``mixmla bench``: our paths and the peers on the benchmark shapes, one table, files for later.

For every shape (docs/SPEC.md's 8 by default) and every implementation path: prepare (untimed), check
the output strictly against the reference on the same cache format (a failing output is reported
and never timed), warm up, time the call latency the original harness's way and the GPU time by
graph replay, and compute bytes, GB/s, share of the HBM ceiling measured at the start of the run.
Then print the table and the geometric mean per path, and write ``results.json``, ``summary.md``
and ``bench.png`` into ``--out``. Without a CUDA GPU it runs the small interpreter demo of
:mod:`mixmla.harness.demo` instead. The method is documented in docs/PERF.md.
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys
import time
from dataclasses import dataclass

from .progress import Progress
from .stats import StopRule

__all__ = ["main", "build_parser", "Settings", "settings_for", "select"]

DEFAULT_PATHS = "bf16,fp8,mxfp4,auto"
DEFAULT_PEERS = "torch,flashinfer,flashmla"
#: The whole default run must finish within 10 minutes on the H200; this leaves a minute spare.
DEFAULT_BUDGET_S = 540.0

EPILOG = """\
examples:
  mixmla bench                               8 docs/SPEC.md shapes x (bf16, fp8, mxfp4, auto) + peers
  mixmla bench --quick --peers none          fewer repetitions, no peers
  mixmla bench --shape 32,1,8192 --shape 4,4,1024,32 --paths fp8,mxfp4
  mixmla bench --spec shapes.txt --out bench/results/today
  mixmla bench --paged --quick               each shape contiguous and in shuffled pages of 1 and 64,
                                             FlashInfer's paged MLA beside it; append_kv at 256 tokens
  torchrun --nproc-per-node 2 -m mixmla bench --dcp     decode context parallelism on 2 GPUs (NCCL)

Without a CUDA GPU it says so and runs a tiny Triton-interpreter demo (correctness only).
Exit status: 0 when every mixmla path passed its strict check, 1 otherwise (peers do not count)."""


@dataclass(frozen=True)
class Settings:
    """Timing budget of one run. rule: call-latency stopping rule (see ``StopRule``); gpu_cap_s /
    gpu_max_reps: GPU-time repetitions per case (seconds of GPU time / count); warmup: untimed
    calls before timing; budget_s: wall-clock budget of the whole run (seconds); gpu_warm_s:
    untimed graph replays (seconds) before the GPU time is measured."""

    rule: StopRule
    gpu_cap_s: float
    gpu_max_reps: int
    warmup: int
    budget_s: float
    gpu_warm_s: float = 0.2

    def as_dict(self) -> dict:
        r = self.rule
        return {"rel_err": r.rel_err, "min_count": r.min_count, "max_count": r.max_count,
                "wall_cap_s": r.wall_cap_s, "gpu_cap_s": self.gpu_cap_s, "gpu_max_reps": self.gpu_max_reps,
                "warmup": self.warmup, "budget_s": self.budget_s, "gpu_warm_s": self.gpu_warm_s}


def settings_for(quick: bool, budget_s: float = DEFAULT_BUDGET_S) -> Settings:
    """Default caps: up to 100 timed calls or 2 s of wall time per case (the original harness's
    100-repetition cap), GPU time over up to 100 replays / 0.5 s. ``quick``: 20 calls / 0.3 s and
    20 replays / 0.1 s."""
    if quick:
        return Settings(StopRule(max_count=20, wall_cap_s=0.3), 0.1, 20, 2, budget_s, 0.05)
    return Settings(StopRule(max_count=100, wall_cap_s=2.0), 0.5, 100, 3, budget_s)


def select(text: str, allowed, what: str) -> list[str]:
    """Split a comma list (``"none"`` or empty: nothing), rejecting names not in ``allowed``."""
    names = [t.strip() for t in (text or "").split(",") if t.strip() and t.strip() != "none"]
    bad = [n for n in names if n not in allowed]
    if bad:
        raise ValueError(f"unknown {what} {', '.join(bad)}; choose from {', '.join(allowed)}")
    return list(dict.fromkeys(names))


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="mixmla bench", description=__doc__.split("\n\n")[0].replace("``", ""),
                                epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shape", action="append", metavar="B,Lq,Lk[,H]",
                   help="a shape to run (repeatable): requests, query tokens, cached tokens per request, heads (16)")
    p.add_argument("--spec", metavar="FILE", help="spec-line file ('batchsize: 4; qseqlen: 1; kvseqlen: 1024; seed: 1')")
    p.add_argument("--paths", default=DEFAULT_PATHS, help=f"our paths to run (default {DEFAULT_PATHS})")
    p.add_argument("--peers", default=DEFAULT_PEERS, help=f"peers to run, or 'none' (default {DEFAULT_PEERS})")
    p.add_argument("--out", metavar="DIR", help="output folder (default bench/out/<timestamp>/)")
    p.add_argument("--quick", action="store_true", help="fewer repetitions per case")
    p.add_argument("--budget-s", type=float, default=DEFAULT_BUDGET_S,
                   help="wall-clock budget of the whole run in seconds; later cases are skipped past it "
                        f"(default {DEFAULT_BUDGET_S:.0f})")
    p.add_argument("--ceiling-gb", type=float, default=3.0, help="buffer size of the HBM ceiling measurement, GiB")
    p.add_argument("--paged", action="store_true",
                   help="paged mode: every shape also in pages of 1 and 64 tokens, shuffled in the pool (our "
                        "bf16/fp8/mxfp4 paths and FlashInfer's paged MLA), a paged/contiguous table, and "
                        "append_kv's GPU time for one decode step of 256 tokens (harness/paged.py)")
    from .dcp_bench import add_arguments

    add_arguments(p)
    return p


def _line(k: int, n: int, row: dict) -> str:
    head = f"[{k}/{n}] {row['shape_label']:<10} {row['label']:<17} {row['status']}"
    if row["status"] != "ok":
        return head + (f": {row['note']}" if row.get("note") else "")
    lat, gpu = row.get("latency_us"), row.get("gpu")
    s = head + (f"  rel_l2 {row['check']['strict']['rel_l2']:.1e}" if row.get("check") else "")
    if lat:
        s += f"  call {lat['mean']:.1f}±{lat['err']:.1f} us (n={lat['n']}, {lat['stop']})"
    if gpu:
        s += f"  gpu {gpu['median_us']:.1f} us"
    if row.get("gbps"):
        s += f"  {row['gbps']:.0f} GB/s ({row['pct_ceiling']:.0f}%)"
    return s


# ---------------------------------------------------------------------------------------------- main
def _default_out() -> str:
    return os.path.join("bench", "out", datetime.datetime.now().strftime("%Y%m%d-%H%M%S"))


def run_gpu(args, specs: list[dict], paths: list[str], peer_names: list[str]) -> int:
    import torch

    from .cases import Case
    from .ceiling import measure_hbm_ceiling
    from .env import device_info, source_commit
    from .measure import check_impl_case, exit_status, peer_formats, time_impl_case
    from .peers import make_impl
    from .report import format_table, geomeans, make_row, new_results, write_all
    from .timing import CudaEventTimer, L2Flusher

    t_start = time.perf_counter()
    settings = settings_for(args.quick, args.budget_s)
    info = device_info()
    print(f"mixmla bench on {info['name']} ({info.get('sm_count')} SMs), torch {info['torch']}, "
          f"triton {info['triton']}, CUDA {info.get('cuda')}", flush=True)

    print(f"measuring the HBM read ceiling ({args.ceiling_gb:g} GiB streaming read) ...", flush=True)
    ceiling = measure_hbm_ceiling(int(args.ceiling_gb * 2**30))
    print(f"  read ceiling {ceiling.read_gbps:.0f} GB/s ({ceiling.method}; torch.sum {ceiling.torch_sum_gbps:.0f}, "
          f"triton {ceiling.triton_read_gbps or float('nan'):.0f}); copy {ceiling.copy_gbps:.0f} GB/s", flush=True)

    impls = [("mixmla", p) for p in paths]
    peers_doc, peer_objs = {}, {}
    for name in peer_names:
        obj = make_impl(name)
        reason = obj.unavailable()
        peers_doc[name] = {"available": reason is None, "reason": reason, "formats": list(obj.formats)}
        if reason is None:
            peer_objs[name] = obj
            impls += [(name, f) for f in peer_formats(obj.formats, paths)]
        else:
            print(f"peer {name}: {reason}", flush=True)
    objs = {"mixmla": make_impl("mixmla"), **peer_objs}

    results = new_results("gpu", info, ceiling.as_dict(),
                          dict(settings.as_dict(), shapes=len(specs), paths=",".join(paths), peers=",".join(peer_names)),
                          commit=source_commit())
    results["peers"] = peers_doc
    timer, flushers = CudaEventTimer(), (L2Flusher(mode="read"), L2Flusher(mode="write"))
    total = len(specs) * len(impls)
    progress, done = Progress(total, "mixmla bench"), 0
    base_case, base_key = None, None
    for spec in specs:
        case = None
        # Paged variants of a shape follow it: they share its inputs and references.
        key = tuple(sorted((k, v) for k, v in spec.items() if k != "page_size"))
        if spec.get("page_size") and base_case is not None and key == base_key:
            case = base_case.with_pages(spec["page_size"])
        for name, fmt in impls:
            elapsed = time.perf_counter() - t_start
            left = total - done
            if elapsed > settings.budget_s:
                row = make_row(spec, _label(spec), name, fmt, "skipped", f"time budget of {settings.budget_s:.0f} s spent")
            else:
                if case is None:
                    progress.describe(f"{_label(spec)}: inputs + references")
                    case = Case.generate(spec, device="cuda")
                    if args.paged:
                        base_case, base_key = case, key
                progress.describe(f"{case.label} {name} {fmt}")
                # Share what is left of the budget among the cases still to run (2 s of setup each).
                per_case = (settings.budget_s - elapsed) / max(1, left)
                wall_cap = max(0.1, min(settings.rule.wall_cap_s, 0.5 * (per_case - 2.0)))
                row, prep = check_impl_case(objs[name], case, fmt)
                if prep is not None:
                    row = time_impl_case(row, prep, case, settings, timer, flushers, ceiling.read_gbps, wall_cap)
                del prep
            results["rows"].append(row)
            done += 1
            progress.done(_line(done, total, row), show=row["status"] not in ("ok", "skipped"))
        del case
        torch.cuda.empty_cache()
    progress.close()
    if args.paged:
        from .paged import bench_append, paged_ratios

        del base_case
        torch.cuda.empty_cache()
        results["paged"] = {"ratios": paged_ratios(results["rows"]),
                            "append_kv": bench_append(flushers[0], settings)}

    results["geomean"] = geomeans(results["rows"])
    results["settings"]["wall_s"] = round(time.perf_counter() - t_start, 1)
    out_dir = args.out or _default_out()
    paths_written = write_all(results, out_dir)
    print()
    print(format_table(results))
    status = exit_status(results["rows"])
    if args.paged:
        from .paged import format_append, format_ratios

        print("\n" + format_ratios(results["paged"]["ratios"]) + "\n\n" + format_append(results["paged"]["append_kv"]))
        status = status or int(any(r["status"] != "ok" for r in results["paged"]["append_kv"]))
    print(f"\nwrote {', '.join(paths_written.values())}  (total {results['settings']['wall_s']:.0f} s)")
    return status


def _label(spec: dict) -> str:
    from .cases import spec_label

    return spec_label(spec)


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``mixmla bench``. argv: arguments after ``bench``. Returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    from .cases import load_specs
    from .peers import PEER_NAMES

    try:
        paths = select(args.paths, ("bf16", "fp8", "mxfp4", "auto"), "path")
        peer_names = select(args.peers, PEER_NAMES, "peer")
        specs = load_specs(args.shape, args.spec)
    except (ValueError, OSError) as e:
        print(f"mixmla bench: {e}", file=sys.stderr)
        return 2
    if args.dcp:  # decode context parallelism over the torchrun ranks: the cache formats of --paths
        from .dcp_bench import run_dcp

        fmts = [p for p in paths if p != "auto"]
        if not fmts:
            print("mixmla bench --dcp: --paths names no cache format (bf16, fp8, mxfp4)", file=sys.stderr)
            return 2
        return run_dcp(args, specs if (args.shape or args.spec) else None, fmts)
    if not paths and not peer_names:
        print("mixmla bench: nothing to run (no paths, no peers)", file=sys.stderr)
        return 2
    if args.paged:
        from .paged import paged_specs

        # 'auto' is custom_kernel (contiguous only), the plain-PyTorch peer reads no pages.
        paths = [p for p in paths if p != "auto"] or ["bf16", "fp8", "mxfp4"]
        peer_names = [p for p in peer_names if p != "torch"]
        explicit = bool(args.shape or args.spec)
        specs = paged_specs(specs)
    from .env import has_cuda

    if not has_cuda():
        from .demo import run_demo

        if args.paged:
            from .demo import DEMO_SPEC

            return run_demo(args, specs if explicit else paged_specs([DEMO_SPEC]), paths, peer_names)
        return run_demo(args, specs if (args.shape or args.spec) else None, paths, peer_names)
    return run_gpu(args, specs, paths, peer_names)


if __name__ == "__main__":
    sys.exit(main())
