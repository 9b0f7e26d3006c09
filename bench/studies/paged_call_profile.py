"""Where the host time of a one-call paged decode goes, on the GPU machine's host.

``PYTHONPATH=src:bench python bench/studies/paged_call_profile.py``: ``mla_decode_paged`` (block
table) and ``mla_decode_paged_csr`` of bf16 4x1024 in pages of 64 and 1 (``host_cost.paged_batch``:
shuffled pages, zeros), median host us per call with the GPU idle before each call (a synchronize,
so the call's own host read does not wait for the previous call's kernels) and back to back; then
cProfile of 300 idle calls each (the 14 functions of most own time, the 30 of most cumulative time). Prints everything.
"""

import cProfile
import io
import pstats
import statistics
import time

import torch

import mixmla
from host_cost import paged_batch


def median_us(fn, calls: int = 300, idle: bool = True) -> float:
    for _ in range(20):
        fn()
    times = []
    for _ in range(calls):
        if idle:
            torch.cuda.synchronize()
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1e6)
    return statistics.median(times)


def main() -> None:
    dev = torch.device("cuda", 0)
    profiles = []
    print("one-call paged decode, bf16 4x1024, host us per call (median)")
    print(f"{'entry point':<26} {'page':>5} {'GPU idle':>9} {'back to back':>13}")
    for page in (64, 1):
        d = paged_batch(4, 1024, page, "bf16", dev, seed=1)
        calls = {
            "mla_decode_paged": lambda: mixmla.mla_decode_paged(d["q"], d["pool"], d["block_table"], d["seq_lens"]),
            "mla_decode_paged_csr": lambda: mixmla.mla_decode_paged_csr(d["q"], d["pool"], d["kv_indptr"],
                                                                        d["kv_indices"], d["seq_lens"]),
        }
        for name, fn in calls.items():
            print(f"{name:<26} {page:>5} {median_us(fn):>9.1f} {median_us(fn, idle=False):>13.1f}")
            prof = cProfile.Profile()
            for _ in range(300):
                torch.cuda.synchronize()
                prof.enable()
                fn()
                prof.disable()
            s = io.StringIO()
            stats = pstats.Stats(prof, stream=s)
            stats.sort_stats("tottime").print_stats(14)
            stats.sort_stats("cumulative").print_stats(30)
            profiles.append(f"== {name} page {page} (300 calls, GPU idle before each)\n{s.getvalue()}")
    for p in profiles:
        print(p)


if __name__ == "__main__":
    main()
