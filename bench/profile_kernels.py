"""Compile report and one profiled launch per format (run under ncu on the H200).

``PYTHONPATH=src python3 bench/profile_kernels.py --out DIR [--fmt fp8]``: writes DIR/<fmt>.ttgir
and prints registers, spills and shared memory of the decode kernel for each format (64 x 8192,
16 heads, the format's default config). Under ncu, as for docs/PERF.md::

    ncu --clock-control none --kernel-name mla_decode_kernel --launch-skip 1 --launch-count 1 \
        --section SpeedOfLight --section Occupancy \
        --metrics 'regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio',\
    smsp__issue_active.avg.pct_of_peak_sustained_active,smsp__inst_executed.sum,\
    l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum \
        python3 bench/profile_kernels.py --fmt fp8 --out /tmp/x
"""

import argparse
import dataclasses
import os

import torch

import mixmla
from mixmla.formats import as_cache
from mixmla.inputs import generate_input
from mixmla.kernels.triton.configs import DEFAULT_CONFIGS


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="bench/out")
    ap.add_argument("--fmt", default="bf16,fp8,mxfp4")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--kv", type=int, default=8192)
    ap.add_argument("--block-t", type=int, default=None, help="override the format's default config")
    ap.add_argument("--warps", type=int, default=None)
    ap.add_argument("--stages", type=int, default=None)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    q, kv, qo, kvp, _ = generate_input(args.batch, 1, args.kv, seed=1, device="cuda")
    for fmt in args.fmt.split(","):
        base = DEFAULT_CONFIGS[fmt]
        cfg = dataclasses.replace(base, block_t=args.block_t or base.block_t, num_warps=args.warps or base.num_warps,
                                  num_stages=args.stages or base.num_stages)
        p = mixmla.plan(kvp, qo, 16, fmt, config=cfg)
        for _ in range(2):
            p.run(q, as_cache(kv[fmt]))
        torch.cuda.synchronize()
        from mixmla.kernels.triton.decode import mla_decode_kernel
        kernels = []
        for entry in mla_decode_kernel.device_caches.values():
            cache = entry[0] if isinstance(entry, tuple) else entry
            kernels.extend(v for v in cache.values() if hasattr(v, "asm"))
        k = kernels[-1]
        print(f"{fmt}: regs={k.n_regs} spills={k.n_spills} shared={k.metadata.shared} "
              f"warps={k.metadata.num_warps} stages={k.metadata.num_stages}", flush=True)
        with open(os.path.join(args.out, f"{fmt}.ttgir"), "w") as f:
            f.write(k.asm["ttgir"])


if __name__ == "__main__":
    main()
