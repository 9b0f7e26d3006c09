"""GPU time of the two Hopper kernels on contiguous MXFP4 caches, same inputs, same run: ``decode``
(the one served) and ``decode_tma``'s staged form (``HopperDecoder(staged_kernel=True)``), with
contiguous fp8 on its staged kernel beside them.

``python bench/studies/hopper_staged_mxfp4.py OUTDIR [--shapes 256x8192,...]``: GPU time after a
read flush (median, us), the strict check against the reference where it is affordable; prints a
table and writes OUTDIR/staged_mxfp4.json.
"""

import json
import os
import sys

import torch

from mixmla.check import check_strict
from mixmla.formats import as_cache
from mixmla.harness.timing import L2Flusher, gpu_time
from mixmla.inputs import generate_input
from mixmla.kernels.gluon.launch import HopperDecoder
from mixmla.reference import default_sm_scale, mla_decode_reference

SHAPES = [(256, 8192), (64, 8192), (32, 8192), (256, 1024), (4, 1024)]
KERNELS = (("fp8", None), ("mxfp4", None), ("mxfp4", True))  # (format, staged_kernel)


def main(outdir, shapes):
    os.makedirs(outdir, exist_ok=True)
    flusher = L2Flusher(mode="read")
    rows = []
    for b, l in shapes:
        q, kv, qo, kvp, _ = generate_input(b, 1, l, seed=b + l, device="cuda")
        row = {"shape": f"{b}x{l}"}
        for fmt, staged in KERNELS:
            name = fmt + (" staged" if staged else "")
            cache = as_cache(kv[fmt])
            dec = HopperDecoder(b, 16, fmt, q.device, staged_kernel=staged)
            out = torch.full((q.shape[0], 16, 512), float("nan"), dtype=torch.bfloat16, device="cuda")
            lse = torch.full((q.shape[0], 16), float("nan"), device="cuda")
            fn = lambda: dec.launch(q, cache, kvp, qo, out, lse, default_sm_scale())  # noqa: E731
            fn()
            torch.cuda.synchronize()
            row[name] = round(gpu_time(fn, flusher, warm_s=0.1, time_cap_s=0.4).median_us, 1)
            ok = check_strict(out, mla_decode_reference(q, cache, kvp, qo)[0]).passed if b * l <= 65536 else "-"
            row[name + " ok"] = ok
        rows.append(row)
        print(row, flush=True)
        del q, kv
        torch.cuda.empty_cache()
    json.dump(rows, open(os.path.join(outdir, "staged_mxfp4.json"), "w"), indent=1)
    cols = list(rows[0])
    print("| " + " | ".join(cols) + " |")
    for r in rows:
        print("| " + " | ".join(str(r.get(c, "")) for c in cols) + " |")


if __name__ == "__main__":
    args = sys.argv[2:]
    shapes = SHAPES
    if "--shapes" in args:
        shapes = [tuple(int(x) for x in s.split("x")) for s in args[args.index("--shapes") + 1].split(",")]
    main(sys.argv[1], shapes)
