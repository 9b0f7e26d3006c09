"""Contiguous fp8 on the two Hopper kernels: ``decode_tma`` (the one the library runs: one program
of two warpgroups per SM, whole tiles by TMA) against ``decode``'s register-load kernel (two
programs of one warpgroup per SM, which the library runs for paged fp8 and MXFP4), same inputs,
same run (design log step 85, where this kernel was first built here as a study).

``PYTHONPATH=src:bench/studies python3 bench/studies/hopper_ws_fp8.py --out OUT [--shapes
4x1024,...]`` on the GPU: GPU time (graph replay after a read flush), the staged kernel at the
plan's grid, at one program per SM and at 128 programs; the register kernel at two per SM; the
strict check against the reference where it is affordable, the relative L2 distance between the
two kernels' outputs elsewhere, NaN and repeatability. ``--compile`` (any machine,
``TRITON_INTERPRET=0``): registers, spills, shared memory, barriers and register budgets of the
staged kernel's PTX.
"""

import argparse
import json
import os
import re

import numpy as np
import torch

from mixmla.kernels.gluon.compile import KernelSpec, compile_decode

SHAPES = [(4, 1024), (32, 1024), (4, 8192), (64, 1024), (256, 1024), (32, 8192), (64, 8192), (256, 8192)]


def compile_facts():
    from mixmla.kernels.gluon import sass

    k = compile_decode(KernelSpec(H=16, ROWS=16, FORMAT=1, BLOCK_B=256, C0=2, WRITE_LSE=False, PAGED=0))
    f = sass.kernel_facts(k)
    ptx = k.asm["ptx"]
    maxnreg = sorted(set(re.findall(r"setmaxnreg[.a-z0-9]*\s+\d+", ptx)))
    bars = sorted(set(re.findall(r"bar\.sync\s+[^;]*", ptx)))
    print(f"{f.registers} registers, spill {f.spill_bytes} B, shared {f.shared} B, wgmma {f.wgmma}, "
          f"global scratch {k.metadata.global_scratch_size} B; PTX: setmaxnreg {maxnreg}, bar.sync forms {bars}")


def register_decoder(b, device):
    """A ``HopperDecoder`` of ``b`` contiguous fp8 requests that launches ``decode``'s kernel."""
    from hopper_variants import compile_variant
    from mixmla.kernels.gluon.decode import mla_decode_hopper_kernel
    from mixmla.kernels.gluon.launch import PROGRAMS_PER_SM, HopperDecoder, Workspace, new_counters, workspace_floats

    sms = torch.cuda.get_device_properties(device).multi_processor_count
    dec = HopperDecoder(b, 16, "fp8", device, paged=0, programs=PROGRAMS_PER_SM * sms, allocate=False)
    dec.kernel = compile_variant(mla_decode_hopper_kernel, dec.spec)
    dec.scratch_per_program = 0
    dec.workspace = Workspace.of(torch.empty(workspace_floats(dec.programs), dtype=torch.float32, device=device),
                                 new_counters(b, device), dec.programs)
    return dec


def run(out_dir, shapes):
    from hopper_variants import _timed
    from mixmla.check import check_strict
    from mixmla.formats import as_cache
    from mixmla.harness.timing import L2Flusher
    from mixmla.inputs import generate_input
    from mixmla.kernels.gluon.backend import grid_size
    from mixmla.kernels.gluon.launch import HopperDecoder
    from mixmla.reference import default_sm_scale, mla_decode_reference

    os.makedirs(out_dir, exist_ok=True)
    flusher = L2Flusher(mode="read")
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    rows = []
    for b, l in shapes:
        q, kv, qo, kvp, _ = generate_input(b, 1, l, seed=b + l, device="cuda")
        cache = as_cache(kv["fp8"])
        ref = mla_decode_reference(q, cache, kvp, qo)[0] if b * l <= 65536 else None
        plan_grid = grid_size(np.full(b, l), sms)
        row = {"shape": f"{b}x{l}", "plan grid": plan_grid}
        outs = {}
        for name, make in (("register", lambda: register_decoder(b, q.device)),
                           ("staged plan", lambda: HopperDecoder(b, 16, "fp8", q.device, programs=plan_grid)),
                           (f"staged {sms}", lambda: HopperDecoder(b, 16, "fp8", q.device, programs=sms)),
                           ("staged 128", lambda: HopperDecoder(b, 16, "fp8", q.device, programs=128))):
            dec = make()
            out = torch.full((q.shape[0], 16, 512), float("nan"), dtype=torch.bfloat16, device="cuda")
            lse = torch.full((q.shape[0], 16), float("nan"), device="cuda")
            fn = lambda: dec.launch(q, cache, kvp, qo, out, lse, default_sm_scale())  # noqa: E731
            fn()
            torch.cuda.synchronize()
            first = out.clone()
            row[name] = _timed(fn, flusher)
            row[name + " repeat bits"] = bool(torch.equal(out.view(torch.int16), first.view(torch.int16)))
            if ref is not None:
                row[name + " ok"] = check_strict(out, ref).passed
            if name != "register":
                a, s0 = out.float(), outs["register"][0].float()
                row[name + " relL2 vs register"] = float((a - s0).norm() / s0.norm())
                row[name + " lse maxdiff"] = float((lse - outs["register"][1]).abs().max())
            row[name + " nan"] = bool(torch.isnan(out.float()).any())
            outs[name] = (out, lse)
        rows.append(row)
        print(row, flush=True)
        del q, kv, cache, outs
        torch.cuda.empty_cache()
    with open(os.path.join(out_dir, "ws_fp8.json"), "w") as f:
        json.dump(rows, f, indent=1)
    times = ("register", "staged plan", f"staged {sms}", "staged 128")
    print("| shape | plan grid | " + " | ".join(times) + " |")
    for r in rows:
        print(f"| {r['shape']} | {r['plan grid']} | " + " | ".join(str(r[k]) for k in times) + " |")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.environ.get("OUT", "bench/out/ws_fp8"))
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--shapes", default=",".join(f"{b}x{l}" for b, l in SHAPES))
    args = ap.parse_args()
    if args.compile:
        compile_facts()
    else:
        run(args.out, [tuple(int(v) for v in x.split("x")) for x in args.shapes.split(",")])
