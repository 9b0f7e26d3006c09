"""What a small shape's GPU time is made of: cold code, cold data, or the work itself.

The bench times each call after reading 256 MiB (a read flush), which evicts from L2 the call's
data and also its kernels' instructions and page-table entries. Issue 13 asks <= 8 us for the
small shapes, where an empty graph measures 3-4.3 us by the same method. This script times the
same planned call (``mixmla.plan(...).run``, one CUDA graph per input copy) five ways, all with
the same plan, grid and compiled kernels:

- ``cold``: flush, then the timed replay (the bench's GPU time);
- ``code warm``: flush, then an untimed replay of the same plan on a second copy of the inputs
  (q, cache, indptrs, output), then the timed replay: the kernels' instructions and the plan's
  workspace are in L2, the timed call's inputs are not;
- ``data warm``: flush, then the timed call's inputs read by a sum kernel (into L2 and the TLB),
  then the timed replay: the data in L2, the code not;
- ``both warm``: flush, the second copy's replay, the data read, then the timed replay;
- ``empty``: flush, then one replay of a graph holding one 1-element kernel.

If ``code warm`` is several us under ``cold``, the small shapes pay for fetching their kernels'
instructions from HBM, which smaller code (less unrolling) or fewer distinct kernels per call
would cut; if ``data warm`` is, the dependent first loads are what is paid; what is left under
``both warm`` is launch, synchronization and work.

A backend may carry Triton kernel-shape fields, ``triton/num_stages=1/block_t=32`` (over the
format's default ``KernelConfig``): less pipelining and smaller tiles make less code (compiled for
sm_90 on the CPU, the bf16 decode kernel is 2256 instructions by default, 1632 with one stage,
1240 with one stage of 32-token tiles; MXFP4 2816, 2592, 1840), so if ``code warm`` is well
under ``cold``, such a plan's ``cold`` says what smaller code buys.

``PYTHONPATH=src python bench/studies/cold_code.py OUTDIR [--shapes 4x1024,4x8192,32x1024,64x1024]
[--formats bf16,fp8,mxfp4] [--backends auto,gluon,triton/num_stages=1] [--reps 200]``: prints a
table, writes OUTDIR/cold_code.jsonl.
"""

import argparse
import dataclasses
import json
import os

import torch

import mixmla
from mixmla.formats import as_cache
from mixmla.harness.timing import L2Flusher, capture_graph
from mixmla.inputs import generate_input
from mixmla.kernels.triton.configs import config_fields, default_config

from flush_study import time_graphs


def case(batch: int, kv_len: int, fmt: str, seed: int):
    """(q, cache container, kv_indptr, qo_indptr, out) of one benchmark case on the GPU."""
    q, kv, qo_indptr, kv_indptr, _ = generate_input(batch, 1, kv_len, seed=seed, device="cuda")
    out = torch.empty(q.shape[0], q.shape[1], 512, dtype=torch.bfloat16, device="cuda")
    return q, as_cache(kv[fmt]), kv_indptr, qo_indptr, out


def reader(tensors):
    """A function that reads every byte of ``tensors`` (sums as int32 words or bytes)."""
    sinks = []
    views = []
    for t in tensors:
        flat = t.reshape(-1).view(torch.uint8)
        views.append(flat.view(torch.int32) if flat.numel() % 4 == 0 else flat)
        sinks.append(torch.empty((), dtype=torch.int64, device="cuda"))

    def read():
        for v, s in zip(views, sinks):
            torch.sum(v, dim=0, out=s)
    return read


def timed(graph, befores, flusher, reps: int) -> float:
    """Median us of ``graph``'s replays, each after the flush and then ``befores`` (callables)."""
    def before():
        flusher.flush()
        for b in befores:
            b()
    return time_graphs([graph], before, reps)[0]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("outdir")
    ap.add_argument("--shapes", default="4x1024,4x8192,32x1024,64x1024")
    ap.add_argument("--formats", default="bf16,fp8,mxfp4")
    ap.add_argument("--reps", type=int, default=200)
    ap.add_argument("--backends", default="auto", help="comma-separated plan backends, e.g. auto,gluon "
                    "(a backend that cannot run a case is skipped)")
    args = ap.parse_args()
    os.makedirs(args.outdir, exist_ok=True)
    flusher = L2Flusher(mode="read")
    empty_t = torch.zeros(1, device="cuda")
    empty = capture_graph(lambda: empty_t.add_(1.0))
    rows = []
    e_us = timed(empty, [], flusher, args.reps)
    print(f"empty graph after the flush: {e_us:.2f} us")
    print(f"{'shape':>9} {'fmt':>6} {'backend':>7} {'cold':>7} {'code':>7} {'data':>7} {'both':>7}   us")
    for shape in args.shapes.split(","):
        batch, kv_len = (int(x) for x in shape.split("x"))
        for fmt in args.formats.split(","):
            a = case(batch, kv_len, fmt, seed=batch + kv_len)
            b = case(batch, kv_len, fmt, seed=batch + kv_len + 1)
            for backend in args.backends.split(","):
                _time_case(shape, fmt, backend, a, b, flusher, e_us, args.reps, rows)
    with open(os.path.join(args.outdir, "cold_code.jsonl"), "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")


def _time_case(shape, fmt, backend, a, b, flusher, e_us, reps, rows) -> None:
    """The plan of ``backend`` timed the four ways, the call on input copy ``a`` and the code
    warmed on copy ``b`` (each ``case``'s tuple); appends the row to ``rows`` and prints it."""
    name, *fields = backend.split("/")
    config = None
    if fields:  # Triton kernel-shape fields over the format's default
        config = dataclasses.replace(default_config(fmt), **config_fields("/".join(fields), sep="/"))
    try:
        p = mixmla.plan(a[2], a[3], 16, fmt, config=config, backend=name)
    except ValueError as exc:
        print(f"{shape:>9} {fmt:>6} {backend}: skipped ({exc})")
        return
    ga = capture_graph(lambda: p.run(a[0], a[1], out=a[4], kv_indptr=a[2], qo_indptr=a[3]))
    gb = capture_graph(lambda: p.run(b[0], b[1], out=b[4], kv_indptr=b[2], qo_indptr=b[3]))
    cache_tensors = [t for t in (getattr(a[1], n, None) for n in ("data", "scale", "scales")) if
                     isinstance(t, torch.Tensor)]
    read_a = reader([a[0], a[2], a[3]] + cache_tensors)
    for _ in range(20):  # untimed: clocks up, every lazy first-use cost paid
        flusher.flush()
        ga.replay()
    torch.cuda.synchronize()
    row = {"shape": shape, "fmt": fmt, "backend": backend if fields else p.backend, "empty_us": e_us,
           "cold": timed(ga, [], flusher, reps),
           "code": timed(ga, [gb.replay], flusher, reps),
           "data": timed(ga, [read_a], flusher, reps),
           "both": timed(ga, [gb.replay, read_a], flusher, reps),
           "cold_again": timed(ga, [], flusher, reps)}
    rows.append(row)
    print(f"{shape:>9} {fmt:>6} {row['backend']:>7} {row['cold']:7.2f} {row['code']:7.2f} {row['data']:7.2f} "
          f"{row['both']:7.2f}   (cold again {row['cold_again']:.2f})", flush=True)


if __name__ == "__main__":
    main()
