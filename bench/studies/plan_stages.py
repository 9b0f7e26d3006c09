"""Where the host time of ``mixmla.plan`` goes, stage by stage, on the GPU machine's host.

``PYTHONPATH=src python bench/studies/plan_stages.py [--shape 256x1024] [--calls 400]``: for bf16
(the Triton kernels), fp8 and MXFP4 (the Hopper kernel where 'auto' takes it), from device and from
host indptrs, the median host us per call of ``plan`` as a whole and of each stage it runs for a
layout seen before, each stage called alone with the arguments ``plan`` gives it: the indptr read,
the backend choice, the backend plan's copy (``take``), the plan's buffer (``torch.empty``), its
views, the workspace binding (for the Hopper kernel with the piece counts), the device indptrs;
and ways of reading a device indptr on the host. Calls run in bursts of 20 after a synchronize, so no call waits for queued kernels. Prints a table.
"""

import argparse
import statistics
import time

import numpy as np
import torch

import mixmla
from mixmla import api, validate
from mixmla.inputs import generate_input
from mixmla.kernels.backend import get_backend


def median_us(fn, calls: int, burst: int = 20) -> float:
    for _ in range(burst):
        fn()
    times = []
    for _ in range(max(1, calls // burst)):
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        for _ in range(burst):
            t = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t) * 1e6)
    return statistics.median(times)


def stages(kv, fmt: str, calls: int) -> dict:
    """Median us of ``plan(kv, None, 16, fmt)`` and of its stages for a layout seen before."""
    dev = torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")
    p = mixmla.plan(kv, None, 16, fmt, device=dev)
    host = validate._host_values([kv])
    kv_ptr = host[0]
    qo_ptr = np.arange(kv_ptr.shape[0], dtype=np.int64)
    planned = api._planned(dev, 16, fmt, p.sm_scale, kv_ptr, qo_ptr, 0, None, "auto")
    rows, heads = p.total_q, p.num_heads
    work = p._plan.workspace_floats
    floats = p.out.untyped_storage().nbytes() // 4  # the plan's one buffer: outputs, lse, workspace
    buffer = torch.empty(floats, dtype=torch.float32, device=dev)
    fresh = planned.take()
    out = {"backend": p.backend, "workspace MB": round(4 * floats / 2 ** 20, 1)}
    out["plan"] = median_us(lambda: mixmla.plan(kv, None, 16, fmt, device=dev), calls)
    out["read"] = median_us(lambda: validate._host_values([kv]), calls)
    out["backend choice"] = median_us(lambda: get_backend("auto", planned.layout, None), calls)
    out["take"] = median_us(planned.take, calls)
    out["empty"] = median_us(lambda: torch.empty(floats, dtype=torch.float32, device=dev), calls)
    out["views"] = median_us(lambda: (buffer.view(torch.bfloat16).as_strided((rows, heads, 512), (heads * 512, 512, 1)),
                                      buffer.as_strided((rows, heads), (heads, 1), 0)), calls)
    out["use_workspace"] = median_us(lambda: fresh.use_workspace(buffer if work else None, 64), calls)
    if p.backend == "gluon":
        from mixmla.kernels.gluon import launch
        counts = getattr(launch, "counter_part", launch.new_counters)  # new_counters before counter_part existed
        out["counts"] = median_us(lambda: counts(p.batch, dev), calls)
    out["device indptrs"] = median_us(lambda: api._device_indptrs(kv, None, kv_ptr, qo_ptr, dev), calls)
    return out


def read_primitives(kv, calls: int) -> dict:
    """Median us of ways to read a (batch+1,) device indptr on the host, the GPU idle: what the
    plan's read (``validate._host_values``) could cost at best."""
    pinned = torch.empty(kv.shape, dtype=kv.dtype, pin_memory=True)
    stream = torch.cuda.current_stream()
    out = {"_host_values": median_us(lambda: validate._host_values([kv]), calls),
           "copy_ to pinned": median_us(lambda: pinned.copy_(kv), calls),
           "copy_ async + sync": median_us(lambda: (pinned.copy_(kv, non_blocking=True), stream.synchronize()), calls),
           ".cpu()": median_us(lambda: kv.cpu(), calls),
           "item()": median_us(lambda: kv[-1].item(), calls),
           "synchronize": median_us(torch.cuda.synchronize, calls),
           "numpy of pinned": median_us(lambda: pinned.numpy().astype(np.int64), calls)}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", default="256x1024")
    ap.add_argument("--calls", type=int, default=400)
    args = ap.parse_args()
    batch, kv_len = (int(x) for x in args.shape.split("x"))
    device = "cuda" if torch.cuda.is_available() else "cpu"
    _, _, _, kvp, _ = generate_input(batch, 1, kv_len, seed=1, num_heads=16, device=device)
    rows = []
    for fmt in ("bf16", "fp8", "mxfp4"):
        for where, kv in (("device", kvp), ("host", kvp.cpu())):
            r = stages(kv, fmt, args.calls)
            rows.append((fmt, where, r))
    keys = [k for k in rows[0][2] if k not in ("backend", "workspace MB")]
    for _, _, r in rows:
        keys += [k for k in r if k not in keys and k not in ("backend", "workspace MB")]
    print(f"plan stages at {args.shape}, host us per call (median), {torch.cuda.get_device_name() if device == 'cuda' else 'CPU'}")
    print(f"{'stage':<16}" + "".join(f"{f + ' ' + w:>14}" for f, w, _ in rows))
    print(f"{'backend':<16}" + "".join(f"{r['backend']:>14}" for _, _, r in rows))
    print(f"{'buffer MB':<16}" + "".join(f"{r['workspace MB']:>14}" for _, _, r in rows))
    for k in keys:
        print(f"{k:<16}" + "".join(f"{r[k]:>14.1f}" if k in r else f"{'-':>14}" for _, _, r in rows))
    if device == "cuda":
        print("reading the device indptr, GPU idle, host us per call (median):")
        for k, v in read_primitives(kvp, args.calls).items():
            print(f"  {k:<20} {v:8.1f}")


if __name__ == "__main__":
    main()
