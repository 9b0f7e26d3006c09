"""Is a slow GPU-time sample the kernel or the GPU's state? Times one plan in blocks over a few
seconds, logging the SM clock and power (NVML, through torch) beside each block's median.

Sequence: generate the 256 x 8192 inputs; 15 blocks of 10 replays (read flush before each); compute
the float64 reference (heavy, as the bench's correctness gate does); 15 more blocks; idle 3 s;
15 more blocks. One JSON line per block to OUT/clock_study.jsonl.

``PYTHONPATH=src python3 bench/studies/clock_study.py [--shape 256x8192] [--fmt bf16]``
"""

import argparse
import json
import os
import statistics
import time

import torch

import mixmla
from mixmla.harness.timing import L2Flusher

from flush_study import bench_case


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="256x8192")
    ap.add_argument("--fmt", default="bf16")
    ap.add_argument("--out", default=os.environ.get("OUT", "bench/out"))
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    log = open(os.path.join(a.out, "clock_study.jsonl"), "a")
    t0 = time.perf_counter()
    read_flush = L2Flusher(mode="read")
    case = bench_case(a.shape)
    q, _, qo_indptr, kv_indptr, _ = case.data
    cache = case.cache(a.fmt)
    p = mixmla.plan(kv_indptr, qo_indptr, case.num_heads, a.fmt, sm_scale=case.sm_scale)
    out = torch.empty(q.shape[0], q.shape[1], 512, dtype=torch.bfloat16, device="cuda")
    p.run(q, cache, out=out)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        p.run(q, cache, out=out)

    def blocks(phase, n=15, reps=10):
        for b in range(n):
            starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
            ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
            for s, e in zip(starts, ends):
                read_flush.flush()
                s.record()
                g.replay()
                e.record()
            clock = torch.cuda.clock_rate()
            power = torch.cuda.power_draw()
            torch.cuda.synchronize()
            us = [s.elapsed_time(e) * 1e3 for s, e in zip(starts, ends)]
            rec = dict(phase=phase, block=b, t_s=round(time.perf_counter() - t0, 3), median_us=statistics.median(us),
                       min_us=min(us), max_us=max(us), sm_clock_mhz=clock, power_mw=power, shape=a.shape, fmt=a.fmt)
            log.write(json.dumps(rec) + "\n")
            print(f"{phase:16} {b:3} t={rec['t_s']:6.2f}s  median {rec['median_us']:7.1f}  min {rec['min_us']:7.1f}  "
                  f"max {rec['max_us']:7.1f} us  clock {clock} MHz  power {power / 1000:.0f} W", flush=True)

    blocks("after inputs")
    case.ref(a.fmt)
    torch.cuda.synchronize()
    blocks("after reference")
    time.sleep(3)
    blocks("after 3 s idle")


if __name__ == "__main__":
    main()
