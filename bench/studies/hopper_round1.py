"""Round 1 of the Hopper kernel on the H200: diagnostics, then GPU time against the Triton path.

Run on the GPU machine: ``python bench/studies/hopper_round1.py OUTDIR``. Prints a table and
writes ``OUTDIR/hopper_round1.json``.
"""

from __future__ import annotations

import json
import os
import sys
import time

import torch

from mixmla.api import plan
from mixmla.check import check_strict
from mixmla.formats import as_cache
from mixmla.harness.ceiling import measure_hbm_ceiling
from mixmla.harness.timing import L2Flusher, gpu_time
from mixmla.inputs import generate_input
from mixmla.kernels.gluon.launch import HopperDecoder
from mixmla.reference import default_sm_scale, mla_decode_reference

SHAPES = [(4, 1024), (4, 8192), (32, 1024), (32, 8192), (64, 1024), (64, 8192), (256, 1024), (256, 8192)]
BYTES = {"bf16": 1152, "fp8": 576, "mxfp4": 306}


def diagnose(fmt, batch, kv_len, seed=3):
    q, kv, qo, kvp, _ = generate_input(batch, 1, kv_len, seed=seed, device="cuda")
    cache = as_cache(kv[fmt])
    dec = HopperDecoder(batch, 16, fmt, q.device)
    out = torch.full((q.shape[0], 16, 512), float("nan"), dtype=torch.bfloat16, device="cuda")
    lse = torch.full((q.shape[0], 16), float("nan"), device="cuda")
    dec.launch(q, cache, kvp, qo, out, lse, default_sm_scale())
    torch.cuda.synchronize()
    ref, ref_lse = mla_decode_reference(q, cache, kvp, qo)
    r = check_strict(out, ref)
    lse_err = (lse.double() - ref_lse).abs().max().item()
    row = {"fmt": fmt, "batch": batch, "kv_len": kv_len, "passed": r.passed, "rel_l2": r.rel_l2 if hasattr(r, "rel_l2") else None,
           "message": r.message, "lse_max_abs_err": lse_err, "nan_out": int(torch.isnan(out).sum())}
    if not r.passed:
        # Which reference column does each output column of row 0 follow? (a column-order bug)
        o = out[:, 0].float().T
        rr = ref[:, 0].float().T
        o = (o - o.mean(1, keepdim=True)) / (o.std(1, keepdim=True) + 1e-9)
        rr = (rr - rr.mean(1, keepdim=True)) / (rr.std(1, keepdim=True) + 1e-9)
        corr = o @ rr.T / o.shape[1]
        row["col_map_first32"] = corr.argmax(1)[:32].tolist()
        row["col_corr_first8"] = corr.max(1).values[:8].tolist()
    return row


def main(outdir):
    os.makedirs(outdir, exist_ok=True)
    res = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "diagnostics": [], "timing": []}
    for fmt in ("fp8", "mxfp4"):
        for b, l in [(1, 64), (1, 1000), (4, 1024), (3, 8192), (300, 100)]:
            try:
                res["diagnostics"].append(diagnose(fmt, b, l))
            except Exception as e:  # keep going: the table says what failed
                res["diagnostics"].append({"fmt": fmt, "batch": b, "kv_len": l, "error": repr(e)[:300]})
            print(res["diagnostics"][-1], flush=True)
    ceiling = measure_hbm_ceiling()
    res["ceiling_gbps"] = ceiling.read_gbps if hasattr(ceiling, "read_gbps") else str(ceiling)
    print("ceiling", res["ceiling_gbps"], flush=True)
    flusher = L2Flusher(mode="read")
    for b, l in SHAPES:
        q, kv, qo, kvp, _ = generate_input(b, 1, l, seed=b + l, device="cuda")
        row = {"shape": f"{b}x{l}"}
        for path in ("triton-bf16", "triton-fp8", "triton-mxfp4", "gluon-fp8", "gluon-mxfp4"):
            kind, fmt = path.split("-")
            cache = as_cache(kv[fmt])
            out = torch.empty(q.shape[0], 16, 512, dtype=torch.bfloat16, device="cuda")
            try:
                if kind == "triton":
                    p = plan(kvp, qo, num_heads=16, fmt=fmt)
                    fn = lambda: p.run(q, cache, out)  # noqa: E731
                else:
                    dec = HopperDecoder(b, 16, fmt, q.device)
                    lse = torch.empty(q.shape[0], 16, device="cuda")
                    fn = lambda: dec.launch(q, cache, kvp, qo, out, lse, default_sm_scale())  # noqa: E731
                fn()
                torch.cuda.synchronize()
                t = gpu_time(fn, flusher, warm_s=0.1, time_cap_s=0.4)
                row[path] = round(t.median_us, 1)
            except Exception as e:
                row[path] = f"ERR {type(e).__name__}: {str(e)[:120]}"
        res["timing"].append(row)
        print(row, flush=True)
    json.dump(res, open(os.path.join(outdir, "hopper_round1.json"), "w"), indent=1)
    print("\n| shape | " + " | ".join(k for k in res["timing"][0] if k != "shape") + " |")
    for row in res["timing"]:
        print("| " + " | ".join(str(v) for v in row.values()) + " |")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "/tmp/hopper_round1")
