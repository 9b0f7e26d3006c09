"""A small matrix of decode calls for compute-sanitizer (memcheck, racecheck, initcheck, synccheck).

Every format x case goes through ``mla_decode`` and through ``plan(...).run(...)``, with tensors
of exactly the size the call needs (q, the cache, MXFP4 scales without the producer's padding,
out), so a read or write one element past any of them lands outside its allocation. Run it with
``PYTORCH_NO_CUDA_MEMORY_CACHING=1`` under the sanitizer, so each tensor is its own cudaMalloc and
memcheck sees the true bounds instead of the caching allocator's big segments.

The reference is computed on the CPU (float64) so that the sanitizer spends its time on the
kernels, not on the reference's matrix products. Each case prints one line; the last line is a
summary; the exit status is 1 if any output fails the strict check.

Usage (repo root, on a GPU): ``PYTHONPATH=src python3 bench/sanitize_driver.py [--quick]``.
Without CUDA it runs on CPU tensors under the Triton interpreter (a smoke test of the driver).
``--quick``: a subset (one split case and one direct case per format, plus H = 128) for the
slower tools (racecheck, initcheck). ``--backend gluon``: the Hopper kernel, on the cases it
serves (16 heads, one query token) in fp8 and MXFP4, each cut into pieces merged in the launch.
"""

from __future__ import annotations

import argparse
import sys
import time

import torch

from mixmla import api  # without CUDA, importing mixmla runs the kernels in Triton's interpreter
from mixmla.check import check_strict
from mixmla.formats import Bf16Cache, quantize_fp8, quantize_mxfp4
from mixmla.reference import mla_decode_reference

# name: (kv lens, q lens, heads). Lengths <= 64 give single-chunk ("direct") requests; longer ones
# are split into chunks and merged by the combine kernel.
CASES = {
    "lk0": ([0], [1], 16),
    "lk1": ([1], [1], 16),
    "lk17": ([17], [1], 16),
    "all-empty": ([0, 0, 0], [1, 2, 1], 16),
    "ragged": ([0, 1, 33, 200, 5], [1, 2, 1, 4, 1], 16),
    "lq-gt-lk": ([2, 0, 70], [4, 3, 4], 16),
    "split-long": ([3000, 2, 65], [1, 1, 1], 16),
    "h32-lq2": ([100, 64, 7], [2, 2, 2], 32),
    "h64": ([129, 31], [1, 3], 64),
    "h128-lq4": ([37, 2, 300], [4, 4, 4], 128),
    "batch-300": ([1, 2, 3, 40, 0, 9] * 50, [1] * 300, 16),
}
QUICK = ("lk17", "ragged", "split-long", "h128-lq4")
FORMATS = ("bf16", "fp8", "mxfp4")


def _indptr(lens, device):
    ptr = [0]
    for n in lens:
        ptr.append(ptr[-1] + n)
    return torch.tensor(ptr, dtype=torch.int32, device=device)


def make_case(kv_lens, q_lens, heads, fmt, seed, device):
    """Exact-size tensors on ``device``: q (total_q, H, 576) bf16, the cache container, indptrs."""
    gen = torch.Generator().manual_seed(seed)
    total_q, total_kv = sum(q_lens), sum(kv_lens)
    q = torch.randn(total_q, heads, 576, generator=gen).to(torch.bfloat16).to(device)
    kv = torch.randn(total_kv, 576, generator=gen)
    if fmt == "bf16":
        cache = Bf16Cache(kv.to(torch.bfloat16).to(device))
    elif fmt == "fp8":
        c = quantize_fp8(kv)
        cache = type(c)(c.data.to(device), c.scale.to(device))
    else:
        c = quantize_mxfp4(kv, pad_scales=False)  # scales exactly (N, 18)
        cache = type(c)(c.data.to(device).contiguous(), c.scales.to(device).contiguous())
    return q, cache, _indptr(kv_lens, device), _indptr(q_lens, device)


def to_cpu(cache):
    fields = [getattr(cache, f) for f in ("data", "scale", "scales") if hasattr(cache, f)]
    return type(cache)(*[t.cpu() for t in fields])


def _gluon_serves(name: str) -> bool:
    kv_lens, q_lens, heads = CASES[name]
    return heads == 16 and max(q_lens) == 1


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="a subset for the slower sanitizer tools")
    ap.add_argument("--backend", default="triton", choices=("triton", "gluon"))
    args = ap.parse_args(argv)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    names = QUICK if args.quick else tuple(CASES)
    formats = FORMATS
    if args.backend == "gluon":
        names = tuple(n for n in CASES if _gluon_serves(n) and (not args.quick or n in ("lk17", "split-long")))
        formats = ("fp8", "mxfp4")
    failures, calls, t0 = 0, 0, time.time()
    for fmt in formats:
        for i, name in enumerate(names):
            kv_lens, q_lens, heads = CASES[name]
            q, cache, kv_indptr, qo_indptr = make_case(kv_lens, q_lens, heads, fmt, seed=1000 + i, device=device)
            ref, _ = mla_decode_reference(q.cpu(), to_cpu(cache), kv_indptr.cpu(), qo_indptr.cpu())
            out = torch.full((q.shape[0], heads, 512), float("nan"), dtype=torch.bfloat16, device=device)
            api.mla_decode(q, cache, kv_indptr, qo_indptr, out=out, return_lse=True, backend=args.backend)
            plan = api.plan(kv_indptr, qo_indptr, num_heads=heads, fmt=fmt, device=device, backend=args.backend)
            out2 = torch.full_like(out, float("nan"))
            plan.run(q, cache, out=out2, return_lse=True)
            plan.run(q, cache, out=out2)
            sync()
            calls += 3
            results = [check_strict(o.cpu(), ref) for o in (out, out2)]
            ok = all(results)
            failures += not ok
            s = plan.schedule
            how = (f"{s.num_work} work items, {'direct' if s.direct else 'split+combine'}" if s is not None
                   else f"{plan.backend} backend")
            print(f"{'ok  ' if ok else 'FAIL'} {fmt:5s} {name:11s} H={heads:<3d} batch={len(kv_lens):<3d} "
                  f"kv={sum(kv_lens):<5d} {how}; {results[0].message}", flush=True)
    print(f"sanitize_driver: {calls} decode calls, {len(names) * len(formats)} cases, {failures} failed, "
          f"{time.time() - t0:.1f} s", flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
