"""Kernel-shape sweep on a GPU: correctness first, then GPU time per format and config.

Usage (on the H200): ``PYTHONPATH=src python3 bench/studies/sweep_kernels.py --out $OUT [--quick]``.
Kernel shapes to try at 256 x 8192: ``SWEEP_CFGS="bt,nw,ns;..."`` (``KernelConfig``'s block_t,
num_warps, num_stages; "none" skips this step); each is checked (strict, relative L2 logged) before it is timed unless
``--skip-check``. The split policies are then timed on the 8 benchmark shapes with the best shape.
Writes one JSON line per measurement to ``OUT/sweep.jsonl`` and prints a short table last.
GPU time: ``triton.testing.do_bench`` median; do_bench zeroes a 256 MB buffer before every call,
so the cache is read from HBM. Bytes and ceiling as mixmla bench counts and measures them
(``harness.cases.min_bytes``, ``harness.ceiling.measure_hbm_ceiling``).
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import math
import os
import sys
import time

import torch
import triton

import mixmla
from mixmla.check import check_strict
from mixmla.formats import as_cache
from mixmla.harness.cases import min_bytes
from mixmla.harness.ceiling import measure_hbm_ceiling
from mixmla.inputs import generate_input
from mixmla.kernels.triton.configs import DEFAULT_CONFIGS, KernelConfig
from mixmla.reference import mla_decode_reference

FORMATS = ("bf16", "fp8", "mxfp4")
BENCH_SHAPES = [(4, 1024), (4, 8192), (32, 1024), (32, 8192), (64, 1024), (64, 8192), (256, 1024), (256, 8192)]


def bytes_moved(batch, lq, lk, heads, fmt):
    return min_bytes(batch * lq, batch * lk, heads, fmt)


def time_plan(p, q, cache, out):
    """GPU time (ms) of one run: median of CUDA-graph replays, L2 zeroed by do_bench before each."""
    p.run(q, cache, out)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        p.run(q, cache, out)
    return triton.testing.do_bench(graph.replay, warmup=10, rep=60, return_mode="median")


def correctness(log):
    cases = [(4, 1, 1024, 16), (3, 1, 5000, 16), (2, 4, 777, 16), (2, 1, 300, 32), (2, 4, 129, 128), (5, 1, 0, 16),
             (32, 1, 8192, 16)]
    worst = {}
    for (b, lq, lk, h), fmt in itertools.product(cases, FORMATS):
        q, kv, qo, kvp, _ = generate_input(b, lq, lk, seed=b * 7 + lk, num_heads=h, device="cuda")
        out = torch.full((q.shape[0], h, 512), float("nan"), dtype=torch.bfloat16, device="cuda")
        out, lse = mixmla.mla_decode(q, kv[fmt], kvp, qo, out=out, return_lse=True)
        ref, rlse = mla_decode_reference(q, kv[fmt], kvp, qo)
        result = check_strict(out, ref)
        nan = bool(torch.isnan(out).any())
        lse_err = (lse.double() - rlse).nan_to_num(0.0).abs().max().item()
        log(dict(kind="check", shape=[b, lq, lk, h], fmt=fmt, rel_l2=result.rel_l2, nan=nan, lse_err=lse_err,
                 ok=result.passed))
        worst[fmt] = max(worst.get(fmt, 0.0), result.rel_l2 if result.passed else float("inf"))
    return worst


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "bench/out"))
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--skip-check", action="store_true")
    ap.add_argument("--formats", default=",".join(FORMATS))
    args = ap.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    fh = open(os.path.join(args.out, "sweep.jsonl"), "w")

    def log(rec):
        fh.write(json.dumps(rec) + "\n")
        fh.flush()
        print(json.dumps(rec), flush=True)

    log(dict(kind="env", gpu=torch.cuda.get_device_name(), torch=torch.__version__, triton=triton.__version__,
             sms=torch.cuda.get_device_properties(0).multi_processor_count))
    formats = args.formats.split(",")
    t0 = time.time()
    worst = {} if args.skip_check else correctness(log)
    ceiling = measure_hbm_ceiling().read_gbps * 1e9  # bytes/s, the same measurement as mixmla bench
    log(dict(kind="ceiling", bytes_per_s=ceiling))

    # 1) kernel shape at the largest shape
    big = (256, 1, 8192, 16)
    best = {}
    grid = os.environ.get("SWEEP_CFGS", "32,4,2;32,4,3;64,4,2;64,4,3;64,8,2;16,4,3")
    shapes_cfg = [] if grid == "none" else [
        KernelConfig(block_t=f[0], num_warps=f[1], num_stages=f[2])
        for f in ([int(x) for x in c.split(",")] for c in grid.split(";"))]
    if args.quick:
        shapes_cfg = shapes_cfg[:4]
    if grid == "none":
        shapes_cfg = []
    for fmt in formats if shapes_cfg else []:
        q, kv, qo, kvp, _ = generate_input(big[0], big[1], big[2], seed=11, num_heads=big[3], device="cuda")
        cache = as_cache(kv[fmt])
        out = torch.empty(q.shape[0], big[3], 512, dtype=torch.bfloat16, device="cuda")
        ref = None if args.skip_check else mla_decode_reference(q, kv[fmt], kvp, qo)[0]
        for cfg in shapes_cfg:
            try:
                p = mixmla.plan(kvp, qo, big[3], fmt, config=cfg)
                out.fill_(float("nan"))
                p.run(q, cache, out)
                rel_l2 = None if ref is None else check_strict(out, ref).rel_l2
                ms = time_plan(p, q, cache, out)
            except Exception as e:  # a config that does not compile (registers, shared memory) is skipped
                log(dict(kind="cfg_fail", fmt=fmt, cfg=cfg.__dict__, err=repr(e)[:300]))
                continue
            bw = bytes_moved(*big[:3], big[3], fmt) / (ms * 1e-3)
            log(dict(kind="cfg", fmt=fmt, shape=list(big), cfg=cfg.__dict__, us=ms * 1e3, frac=bw / ceiling,
                     rel_l2=rel_l2))
            if fmt not in best or ms < best[fmt][0]:
                best[fmt] = (ms, cfg)
        del q, kv, cache, out
        torch.cuda.empty_cache()

    # 2) split policy on every benchmark shape with the best kernel shape
    table = []
    policies = [(1.0, 32), (2.0, 32), (2.0, 128), (4.0, 32), (4.0, 128)]
    if args.quick:
        policies = [(2.0, 64)]
    for (b, lk), fmt in itertools.product(BENCH_SHAPES, formats):
        q, kv, qo, kvp, _ = generate_input(b, 1, lk, seed=b + lk, num_heads=16, device="cuda")
        cache = as_cache(kv[fmt])
        out = torch.empty(q.shape[0], 16, 512, dtype=torch.bfloat16, device="cuda")
        base = best.get(fmt, (0, DEFAULT_CONFIGS[fmt]))[1]
        results = []
        for ips, mc in policies:
            cfg = dataclasses.replace(base, items_per_sm=ips, min_chunk=max(mc, base.block_t))
            p = mixmla.plan(kvp, qo, 16, fmt, config=cfg)
            ms = time_plan(p, q, cache, out)
            results.append((ms, ips, mc, p.schedule.num_work, p.schedule.direct))
            log(dict(kind="policy", fmt=fmt, shape=[b, 1, lk, 16], items_per_sm=ips, min_chunk=mc, us=ms * 1e3,
                     work=p.schedule.num_work, direct=p.schedule.direct))
        ms, ips, mc, nw, direct = min(results)
        bw = bytes_moved(b, 1, lk, 16, fmt) / (ms * 1e-3)
        table.append((f"{b}x{lk}", fmt, ms * 1e3, bw / ceiling, ips, mc, nw))
        del q, kv, cache, out
        torch.cuda.empty_cache()

    log(dict(kind="best_cfg", best={k: dict(us=v[0] * 1e3, cfg=v[1].__dict__) for k, v in best.items()}))
    print(f"\nceiling {ceiling / 1e12:.2f} TB/s; worst strict rel L2 per format: {worst}; {time.time() - t0:.0f}s")
    for fmt, (ms, cfg) in best.items():
        print(f"best 256x8192 {fmt}: {ms * 1e3:.1f} us  bt={cfg.block_t} nw={cfg.num_warps} ns={cfg.num_stages}")
    print(f"{'shape':>10} {'fmt':>6} {'us':>9} {'%HBM':>6} {'ips':>4} {'minc':>5} {'work':>5}")
    for row in table:
        print(f"{row[0]:>10} {row[1]:>6} {row[2]:9.1f} {100 * row[3]:6.1f} {row[4]:4.0f} {row[5]:5d} {row[6]:5d}")
    for fmt in formats:
        vals = [r[2] for r in table if r[1] == fmt]
        print(f"geomean {fmt}: {math.exp(sum(map(math.log, vals)) / len(vals)):.1f} us")
    fh.close()


if __name__ == "__main__":
    sys.exit(main())
