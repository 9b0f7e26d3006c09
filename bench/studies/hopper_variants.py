"""GPU time of Hopper-kernel variants against the shipped one, same inputs, same run.

``python bench/studies/hopper_variants.py OUTDIR MODULE [MODULE ...]``: each MODULE is a module
name under ``mixmla.kernels.gluon`` defining ``mla_decode_hopper_kernel`` with the shipped
signature (a copy of decode.py with one change). Prints a table, writes OUTDIR/variants.json.
"""

import importlib
import json
import os
import sys

import torch
import triton
from triton.backends.compiler import GPUTarget
from triton.experimental.gluon._runtime import GluonASTSource

from mixmla.formats import as_cache
from mixmla.harness.timing import L2Flusher, gpu_time
from mixmla.inputs import generate_input
from mixmla.kernels.gluon import compile as gcompile
from mixmla.kernels.gluon.launch import HopperDecoder
from mixmla.reference import default_sm_scale, mla_decode_reference
from mixmla.check import check_strict

SHAPES = [(256, 8192), (64, 8192), (32, 1024), (4, 1024)]


def compile_variant(fn, spec):
    names = list(gcompile.SIGNATURE)
    attrs = {(names.index(n), ): [["tt.divisibility", d]] for n, d in gcompile.DIVISIBILITY.items()}
    src = GluonASTSource(fn, dict(gcompile.SIGNATURE), constexprs=spec.constexprs(), attrs=attrs)
    return triton.compile(src, target=GPUTarget("cuda", 90, 32),
                          options={"num_warps": gcompile.NUM_WARPS, "maxnreg": gcompile.MAX_REGISTERS})


def main(outdir, modules):
    os.makedirs(outdir, exist_ok=True)
    flusher = L2Flusher(mode="read")
    rows = []
    for b, l in SHAPES:
        q, kv, qo, kvp, _ = generate_input(b, 1, l, seed=b + l, device="cuda")
        lse = torch.empty(q.shape[0], 16, device="cuda")
        for fmt in ("fp8", "mxfp4"):
            cache = as_cache(kv[fmt])
            ref = mla_decode_reference(q, cache, kvp, qo)[0] if b * l <= 65536 else None
            row = {"shape": f"{b}x{l}", "fmt": fmt}
            for name in ["shipped"] + modules:
                dec = HopperDecoder(b, 16, fmt, q.device)
                if name != "shipped":
                    mod = importlib.import_module(f"mixmla.kernels.gluon.{name}")
                    dec.kernel = compile_variant(mod.mla_decode_hopper_kernel, dec.spec)
                out = torch.full((q.shape[0], 16, 512), float("nan"), dtype=torch.bfloat16, device="cuda")
                fn = lambda: dec.launch(q, cache, kvp, qo, out, lse, default_sm_scale())  # noqa: E731
                fn()
                torch.cuda.synchronize()
                ok = check_strict(out, ref).passed if ref is not None else "-"
                row[name] = round(gpu_time(fn, flusher, warm_s=0.1, time_cap_s=0.4).median_us, 1)
                row[name + " ok"] = ok
            rows.append(row)
            print(row, flush=True)
    json.dump(rows, open(os.path.join(outdir, "variants.json"), "w"), indent=1)
    cols = list(rows[0])
    print("| " + " | ".join(cols) + " |")
    for r in rows:
        print("| " + " | ".join(str(r[c]) for c in cols) + " |")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
