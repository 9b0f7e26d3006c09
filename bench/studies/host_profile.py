"""Where the host time of one call goes on the GPU machine: cProfile of the entry points, and the
cost of the torch and Triton primitives they are built from, measured on that machine's CPU.

``PYTHONPATH=src python bench/studies/host_profile.py --out DIR``: at 4x1024 (16 heads, one query
token), bf16 and fp8, ``DecodePlan.run`` and ``mixmla.plan`` under cProfile (2000 and 500 calls,
synchronizing every 20 so the launch queue never fills); the 25 functions of most own time each;
then the per-call time of primitives (``torch.empty``, ``Tensor.data_ptr``/``stride``/``dtype``,
a host-to-device copy of 16 int32, ``.item()`` after a sync, a compiled-handle launch of an empty
kernel, a Python function call) with ``timeit``. Writes DIR/host_profile.txt.
"""

import argparse
import cProfile
import io
import os
import pstats
import timeit

import torch
import triton
import triton.language as tl

import mixmla
from mixmla.formats import as_cache
from mixmla.inputs import generate_input


@triton.jit
def _empty(x):
    pass


def _profile(fn, calls: int, burst: int = 20) -> str:
    for _ in range(50):
        fn()
    torch.cuda.synchronize()
    prof = cProfile.Profile()
    prof.enable()
    for i in range(calls):
        fn()
        if i % burst == burst - 1:
            torch.cuda.synchronize()
    prof.disable()
    s = io.StringIO()
    pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(25)
    return s.getvalue()


def _per_call_us(stmt, number: int = 20000) -> float:
    return min(timeit.repeat(stmt, number=number, repeat=5)) / number * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.environ.get("OUT", "bench/out/host_profile"))
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    lines = []
    for fmt in ("bf16", "fp8"):
        q, kv, qo, kvp, _ = generate_input(4, 1, 1024, seed=1, device="cuda")
        cache = as_cache(kv[fmt])
        plan = mixmla.plan(kvp, qo, 16, fmt)
        out = torch.empty(q.shape[0], 16, 512, device="cuda", dtype=torch.bfloat16)
        lines.append(f"==== {fmt} DecodePlan.run, 2000 calls ({plan.backend} backend)")
        lines.append(_profile(lambda: plan.run(q, cache, out=out), 2000))
        lines.append(f"==== {fmt} mixmla.plan, 500 calls")
        lines.append(_profile(lambda: mixmla.plan(kvp, qo, 16, fmt), 500))
    x = torch.empty(16, dtype=torch.int32, device="cuda")
    host = torch.arange(16, dtype=torch.int32).pin_memory()
    _empty[(1,)](x)
    handle = _empty.warmup(x, grid=(1,)) if hasattr(_empty, "warmup") else None
    prims = {
        "python call of a 3-argument function": lambda: (lambda a, b, c: None)(1, 2, 3),
        "torch.empty((16,), int32, cuda)": lambda: torch.empty(16, dtype=torch.int32, device="cuda"),
        "Tensor.data_ptr()": x.data_ptr,
        "Tensor.stride()": x.stride,
        "Tensor.dtype": lambda: x.dtype,
        "Tensor.is_cuda": lambda: x.is_cuda,
        "Tensor.untyped_storage().data_ptr()": lambda: x.untyped_storage().data_ptr(),
        "isinstance(x, torch.Tensor)": lambda: isinstance(x, torch.Tensor),
        "torch.cuda.current_stream()": torch.cuda.current_stream,
        "copy 16 int32 pinned -> device (non_blocking)": lambda: x.copy_(host, non_blocking=True),
        "triton @jit launch, empty kernel": lambda: _empty[(1,)](x),
    }
    if handle is not None:
        prims["triton compiled handle launch, empty kernel"] = lambda: handle[(1, 1, 1)](x)
    lines.append("==== primitives, us per call (min of 5 x 20000, no sync)")
    for name, fn in prims.items():
        n = 2000 if "launch" in name or "copy" in name else 20000
        try:
            us = _per_call_us(fn, n)
            torch.cuda.synchronize()
            lines.append(f"{us:9.3f}  {name}")
        except Exception as exc:  # a primitive this torch/triton lacks is reported, not fatal
            lines.append(f"    error  {name}: {type(exc).__name__}: {exc}")
    y = torch.ones(1, device="cuda")
    torch.cuda.synchronize()
    lines.append(f"{_per_call_us(lambda: y.item(), 2000):9.3f}  Tensor.item() on an idle GPU (a sync and a copy)")
    text = "\n".join(lines)
    print("\n".join(line for block in lines for line in block.splitlines()[:40])[-9000:])
    with open(os.path.join(args.out, "host_profile.txt"), "w") as f:
        f.write(text)


if __name__ == "__main__":
    main()
