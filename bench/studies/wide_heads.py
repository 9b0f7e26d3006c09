"""64-row programs (H = 128, or Lq x H >= 64): 4 warps against 8 on the H200.

With 64 query rows a program's float32 accumulator is 64 x 512 values; over 4 warps that is 256
registers per thread, so ptxas spills (about 1 KB per thread, `bench/compile_report.py --heads
128`); 8 warps halve it. Prints GPU time (CUDA-graph replay, L2 flushed by do_bench) and the strict
check per format and config; writes one JSON line per measurement to OUT/wide_heads.jsonl.

``PYTHONPATH=src python3 bench/studies/wide_heads.py [--batch 32] [--kv 4096] [--out DIR]``
"""

import argparse
import dataclasses
import json
import os

import torch
import triton

import mixmla
from mixmla.check import check_strict
from mixmla.formats import as_cache
from mixmla.inputs import generate_input
from mixmla.kernels.triton.configs import default_config
from mixmla.reference import mla_decode_reference


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--kv", type=int, default=4096)
    ap.add_argument("--out", default=os.environ.get("OUT", "bench/out"))
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    log = open(os.path.join(a.out, "wide_heads.jsonl"), "w")
    q, kv, qo, kvp, _ = generate_input(a.batch, 1, a.kv, seed=3, num_heads=128, device="cuda")
    for fmt in ("bf16", "fp8", "mxfp4"):
        cache = as_cache(kv[fmt])
        ref = mla_decode_reference(q, kv[fmt], kvp, qo)[0]
        base = default_config(fmt, 128)
        for name, cfg in (("default", base), ("8 warps", dataclasses.replace(base, num_warps=8)),
                          ("8 warps, 32-token tiles", dataclasses.replace(base, num_warps=8, block_t=32))):
            p = mixmla.plan(kvp, qo, 128, fmt, config=cfg)
            out = torch.full((q.shape[0], 128, 512), float("nan"), dtype=torch.bfloat16, device="cuda")
            p.run(q, cache, out)
            check = check_strict(out, ref)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                p.run(q, cache, out)
            us = triton.testing.do_bench(graph.replay, warmup=5, rep=40, return_mode="median") * 1e3
            rec = dict(fmt=fmt, config=name, cfg=dataclasses.asdict(cfg), us=us, rel_l2=check.rel_l2, ok=check.passed,
                       batch=a.batch, kv=a.kv, heads=128)
            log.write(json.dumps(rec) + "\n")
            print(f"{fmt:6} {name:26} {us:9.1f} us  rel L2 {check.rel_l2:.2e} {'ok' if check.passed else 'FAIL'}",
                  flush=True)


if __name__ == "__main__":
    main()
