"""GPU time of the Triton decode kernel over shuffled pages against the contiguous layout, in one
process on the same inputs: each shape and format contiguous, in pages of 1 token and of 64, the
pages of every request in a seeded random order in the pool (``mixmla.paged.scatter_to_pages``).
With ``--baseline FILE`` it also times, on the same paged plans, another decode kernel: a module
file defining ``mla_decode_kernel_baseline`` whose parameters are a subset of the shipped kernel's
(same names; each gets the shipped launch's value): main's kernel at 982e0da, before the windowed
gather, is ``bench/studies/paged_triton_baseline_main.py``; the kernel before PERF step 44 is
``git show 1c07946:bench/studies/paged_triton_baseline.py``.

Pages smaller than the tile are gathered in one of two ways, which the launcher chooses per grid
(``WINDOW``, ``paging.windowed_gather``: a window of page-table entries per tile, or one entry per
token as main's kernel at 982e0da): the column ``gather`` says which a row ran (``window`` or
``token``; ``-`` where nothing is gathered) and ``stages`` the loop's ``LOOP_STAGES``; each gathered
layout is also timed with the shipped kernel forced to the gather not chosen (kernel ``other``).

    PYTHONPATH=src python bench/studies/paged_triton.py --out DIR [--baseline old.py]
    PYTHONPATH=src python bench/studies/paged_triton.py --cpu-smoke    # tiny shapes, interpreter

GPU time: ``mixmla.harness.timing.gpu_time`` (median over CUDA-graph replays, each after a 256 MiB
read flush of the L2), in microseconds. Every output is compared with the shipped kernel's
contiguous output of the same shape and format (rel L2; the orders of summation are the same, so
it is 0 unless a kernel reads a wrong row). Prints a table; writes DIR/paged_triton.json.
``--cpu-smoke`` runs the same code path on CPU tensors in Triton's interpreter (wall time of one
call, not a measurement) to check the script, not the kernel's speed.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import sys
import time

import torch

import mixmla  # noqa: F401  (on a machine without CUDA this selects Triton's interpreter first)
from mixmla.formats import as_cache
from mixmla.inputs import generate_input
from mixmla.kernels.triton import launch as tlaunch
from mixmla.paged import plan_paged, scatter_to_pages

#: (batch, cached tokens per request, formats); 16 heads, one query token each.
GPU_CASES = [
    (32, 8192, ("bf16",)),
    (64, 8192, ("bf16",)),
    (64, 1024, ("bf16", "fp8", "mxfp4")),
    (32, 1024, ("bf16", "fp8", "mxfp4")),
    (256, 8192, ("bf16",)),
    (256, 1024, ("bf16",)),
]
#: Tiny shapes for --cpu-smoke: split plans whose chunks end inside a tile, and a direct plan.
SMOKE_CASES = [(3, 130, ("bf16", "fp8", "mxfp4")), (2, 200, ("bf16",)), (133, 20, ("bf16",))]
PAGE_SIZES = (1, 64)
SEED = 4242


def rel_l2(out: torch.Tensor, ref: torch.Tensor) -> float:
    """``||out - ref|| / ||ref||`` in float64 (inf when out has a NaN)."""
    o, r = out.double(), ref.double()
    err = torch.linalg.vector_norm(o - r).item()
    return err / max(torch.linalg.vector_norm(r).item(), 1e-300) if math.isfinite(err) else math.inf


def load_baseline(path: str):
    """``mla_decode_kernel_baseline`` of the module file ``path``."""
    spec = importlib.util.spec_from_file_location("paged_triton_baseline", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.mla_decode_kernel_baseline


def plan_launches(pplan, q, paged_batch, out) -> list:
    """The shipped launches of ``pplan``'s call (``launch.launches``)."""
    return tlaunch.launches(pplan._plan.constants, q, paged_batch.cache.rows, None, pplan.qo_indptr, out, None,
                            pplan.pages)


def decode_arguments(pplan, q, paged_batch, out) -> dict:
    """The shipped decode launch's arguments of ``pplan``'s call, by parameter name."""
    decode = plan_launches(pplan, q, paged_batch, out)[0]
    return dict(zip(decode.kernel.arg_names, decode.args))


def runner(pplan, q, paged_batch, out, kernel=None, **values):
    """A callable running ``pplan``'s launches (through Triton's dispatcher; the combine launch, if
    any, is the shipped one) with ``kernel`` as the decode kernel (default: the shipped one) and the
    decode arguments named in ``values`` replaced."""
    launches = plan_launches(pplan, q, paged_batch, out)
    # By name: a baseline kernel lacks the parameters added since it was taken.
    launches[0] = tlaunch.with_arguments(launches[0], kernel, **values)

    def run():
        for one in launches:
            tlaunch.run(one)
    return run


def timer(device: torch.device, quick: bool):
    """``time(fn) -> dict`` with the GPU time of ``fn`` in us (CUDA), or one call's wall time (CPU)."""
    if device.type == "cuda":
        from mixmla.harness.timing import L2Flusher, gpu_time

        flusher = L2Flusher(device, mode="read")

        def time_gpu(fn):
            t = gpu_time(fn, flusher, warmup=3, max_reps=40 if quick else 80, min_reps=10,
                         time_cap_s=0.15 if quick else 0.3, warm_s=0.05 if quick else 0.15)
            return {"us": t.median_us, "min_us": t.min_us, "n": t.n, "method": t.method, "note": t.note}
        return time_gpu

    def time_wall(fn):
        t0 = time.perf_counter()
        fn()
        return {"us": (time.perf_counter() - t0) * 1e6, "min_us": None, "n": 1, "method": "wall (interpreter)",
                "note": ""}
    return time_wall


def run_case(b: int, l: int, fmts, device, time_fn, baseline) -> list[dict]:
    q, kv, qo, kvp, _ = generate_input(b, 1, l, seed=SEED + b + l, device=device)
    rows = []
    for fmt in fmts:
        cache = as_cache(kv[fmt])
        plan = mixmla.plan(kvp, qo, num_heads=16, fmt=fmt, backend="triton")
        out_c = torch.empty(q.shape[0], 16, 512, dtype=torch.bfloat16, device=device)
        t = time_fn(lambda: plan.run(q, cache, out=out_c))
        ref = out_c.clone()
        base = dict(shape=f"{b}x{l}", fmt=fmt)
        sched = lambda p: dict(num_work=p.schedule.num_work, direct=p.schedule.direct,  # noqa: E731
                               max_splits=p.schedule.max_splits, config=repr(p.config))
        rows.append(dict(base, layout="contiguous", kernel="shipped", rel_l2=rel_l2(out_c, ref), gather="-",
                         stages=None, **t, **sched(plan)))
        for page in PAGE_SIZES:
            batch = scatter_to_pages(cache, kvp, page, generator=torch.Generator().manual_seed(SEED + page))
            pplan = plan_paged(batch.block_table, batch.seq_lens, page, qo_indptr=qo, num_heads=16, fmt=fmt,
                               backend="triton")
            out_p = torch.full_like(out_c, float("nan"))
            shipped = decode_arguments(pplan, q, batch, out_p)
            gathered = page % pplan.config.block_t != 0
            chosen = shipped["WINDOW"]
            name_of = lambda window: ("window" if window else "token") if gathered else "-"  # noqa: E731
            kernels = [("shipped", name_of(chosen), lambda: pplan.run(q, batch.cache, out=out_p))]
            if gathered:
                kernels.append(("other", name_of(not chosen), runner(pplan, q, batch, out_p, WINDOW=not chosen)))
            if baseline is not None:
                kernels.append(("baseline", name_of(False), runner(pplan, q, batch, out_p, baseline)))
            for name, gather, fn in kernels:
                out_p.fill_(float("nan"))
                t = time_fn(fn)
                rows.append(dict(base, layout=f"p{page}", kernel=name, rel_l2=rel_l2(out_p, ref), gather=gather,
                                 stages=shipped["LOOP_STAGES"], **t, **sched(pplan)))
            del batch, pplan, out_p
        del cache, plan, out_c, ref
    del q, kv
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return rows


def table(rows: list[dict]) -> str:
    contiguous = {(r["shape"], r["fmt"]): r["us"] for r in rows if r["layout"] == "contiguous"}
    lines = [f"{'shape':<10} {'fmt':<6} {'layout':<10} {'kernel':<9} {'gather':<7} {'us':>9} {'/contig':>8} "
             f"{'rel_l2':>9} {'work':>5} {'direct':>6} {'stages':>6}"]
    for r in rows:
        ratio = r["us"] / contiguous[(r["shape"], r["fmt"])]
        lines.append(f"{r['shape']:<10} {r['fmt']:<6} {r['layout']:<10} {r['kernel']:<9} {r['gather']:<7} "
                     f"{r['us']:>9.1f} {ratio:>8.3f} {r['rel_l2']:>9.2e} {r['num_work']:>5} {str(r['direct']):>6} "
                     f"{str(r['stages'] or '-'):>6}")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", help="folder for paged_triton.json (required on the GPU)")
    ap.add_argument("--baseline", metavar="FILE", help="a module file with mla_decode_kernel_baseline to time too")
    ap.add_argument("--quick", action="store_true", help="fewer replays per timing")
    ap.add_argument("--cpu-smoke", action="store_true", help="tiny shapes on CPU in Triton's interpreter")
    a = ap.parse_args(argv)
    if a.cpu_smoke:
        device, cases = torch.device("cpu"), SMOKE_CASES
    else:
        if not torch.cuda.is_available():
            ap.error("needs a CUDA GPU (or --cpu-smoke)")
        if not a.out:
            ap.error("--out DIR is required")
        device, cases = torch.device("cuda"), GPU_CASES
    time_fn = timer(device, a.quick)
    baseline = load_baseline(a.baseline) if a.baseline else None
    t_start = time.time()
    rows = []
    for b, l, fmts in cases:
        t0 = time.time()
        rows += run_case(b, l, fmts, device, time_fn, baseline)
        print(f"[{b}x{l} {','.join(fmts)}: {time.time() - t0:.1f}s]", flush=True)
    text = table(rows)
    print(text)
    bad = [r for r in rows if not r["rel_l2"] <= 1e-6]
    if bad:
        print(f"OUTPUT MISMATCH in {len(bad)} rows: " + ", ".join(f"{r['shape']} {r['fmt']} {r['layout']} "
                                                                  f"{r['kernel']} {r['rel_l2']:.2e}" for r in bad))
    print(f"total {time.time() - t_start:.1f}s")
    if a.out:
        os.makedirs(a.out, exist_ok=True)
        info = dict(device=torch.cuda.get_device_name() if device.type == "cuda" else "cpu (interpreter)",
                    torch=torch.__version__, triton=__import__("triton").__version__, seed=SEED,
                    page_sizes=PAGE_SIZES, flush="read 256 MiB" if device.type == "cuda" else None)
        with open(os.path.join(a.out, "paged_triton.json"), "w") as f:
            json.dump({"info": info, "rows": rows, "table": text}, f, indent=1)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
