"""GPU time of the cache writer for one decode step, against the timing method's own floor.

``PYTHONPATH=src python bench/studies/append_kv_study.py --out DIR``: for each format, ``append_kv``
of 256 new tokens into a shuffled pool of 4096 pages of 64 tokens (as ``mixmla bench --paged``),
with 1, 2, 4 and 8 warps per program, each checked bit for bit against the torch quantizers first;
and an empty Triton kernel timed the same way (graph replay after an L2 read flush), which is the
floor any one-launch writer pays under this method. Prints a table, writes DIR/append_kv.json.
"""

import argparse
import json
import os

import torch
import triton
import triton.language as tl

from mixmla.harness.paged import APPEND_FORMATS, APPEND_POOL_PAGES, APPEND_TOKENS, append_case, check_append
from mixmla.harness.timing import L2Flusher, gpu_time
from mixmla.writer import _check, launch_append

WARPS = (1, 2, 4, 8)


@triton.jit
def _empty(x):
    pass


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.environ.get("OUT", "bench/out/append_kv"))
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    flusher = L2Flusher(mode="read")
    sink = torch.empty(1, device="cuda")
    floor = gpu_time(lambda: _empty[(APPEND_TOKENS,)](sink), flusher, max_reps=200, time_cap_s=0.5)
    rows = [{"what": "empty kernel", "warps": 4, "gpu_us": floor.median_us, "min_us": floor.min_us}]
    for fmt in APPEND_FORMATS:
        for warps in WARPS:
            pool, kv, slots = append_case(fmt, APPEND_TOKENS, APPEND_POOL_PAGES, 64, "cuda")
            cache_rows, num_slots, kv2 = _check(pool, kv, slots)
            launch_append(cache_rows, num_slots, kv2, slots, num_warps=warps)
            torch.cuda.synchronize()
            # check_append runs the shipped launch again on a fresh pool and compares its bits;
            # here the variant's own bits are compared by writing into a fresh pool.
            fresh, _, _ = append_case(fmt, APPEND_TOKENS, APPEND_POOL_PAGES, 64, "cuda")
            problem = check_append(fmt, fresh, kv, slots)
            variant_ok = all(torch.equal(a, b) for a, b in zip(_tensors(pool), _tensors(fresh)))
            g = gpu_time(lambda: launch_append(cache_rows, num_slots, kv2, slots, num_warps=warps), flusher,
                         max_reps=200, time_cap_s=0.5)
            rows.append({"what": f"append_kv {fmt}", "warps": warps, "gpu_us": g.median_us, "min_us": g.min_us,
                         "shipped_check": problem or "ok", "same_bits_as_shipped": variant_ok})
            del pool, fresh
    print(f"{'what':<18} {'warps':>5} {'GPU us':>8} {'min us':>8}  check")
    for r in rows:
        print(f"{r['what']:<18} {r['warps']:>5} {r['gpu_us']:>8.2f} {r['min_us']:>8.2f}  "
              f"{r.get('shipped_check', '')} {'' if r.get('same_bits_as_shipped', True) else 'BITS DIFFER'}")
    with open(os.path.join(args.out, "append_kv.json"), "w") as f:
        json.dump({"device": torch.cuda.get_device_name(), "rows": rows}, f, indent=1)


def _tensors(pool):
    """The tensors a writer may change in ``pool`` (data, and MXFP4's scale bytes)."""
    rows = pool.rows
    return [t for t in (getattr(rows, "data", None), getattr(rows, "scales", None)) if isinstance(t, torch.Tensor)]


if __name__ == "__main__":
    main()
