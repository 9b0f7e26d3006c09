"""GPU time of the shipped Hopper kernel at several persistent-grid sizes, same inputs, same run.

``PYTHONPATH=src:bench/studies python3 bench/studies/hopper_programs.py OUTDIR [--shapes 256x1024,...]
[--formats fp8,mxfp4]``

The kernel cuts its cost units (a request's tiles plus ``C0``) into one equal range per program,
so with ``programs = k * batch`` and requests of one length every k-th range ends exactly at a
request's end: no program holds pieces of two requests, and each program pays one piece's start
and end. With 264 programs (two per SM) and 256 requests nearly every program holds two pieces.
This times, per shape and format, the grid sizes 264, 256, ``k * batch`` for the largest k that
fits 264, half and a quarter of it. Checks: strict against the float64 reference up to
``REF_MAX_TOKENS`` cached tokens, otherwise against the 264-program output (both are the same
computation, summed in another grouping). Writes OUTDIR/programs.json and prints a table.
"""

import argparse
import json
import os

import torch

from mixmla.check import check_strict
from mixmla.formats import as_cache
from mixmla.harness.timing import L2Flusher, gpu_time
from mixmla.inputs import generate_input
from mixmla.kernels.gluon.launch import HopperDecoder
from mixmla.reference import default_sm_scale, mla_decode_reference

SHAPES = [(4, 1024), (4, 8192), (32, 1024), (32, 8192), (64, 1024), (64, 8192), (256, 1024), (256, 8192)]
REF_MAX_TOKENS = 1 << 19


def candidates(batch: int, full: int) -> list[int]:
    """Grid sizes to time: ``full`` (two per SM), 256, and the request-aligned ``k * batch``."""
    k = full // batch
    sizes = {full, min(256, full)}
    if k >= 1:
        sizes |= {k * batch, max(1, k // 2) * batch, max(1, k // 4) * batch}
    if batch % 2 == 0 and batch // 2 >= full // 4:
        sizes.add(batch // 2)  # two whole requests per program
    return sorted(sizes, reverse=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("outdir")
    ap.add_argument("--shapes", default=",".join(f"{b}x{l}" for b, l in SHAPES))
    ap.add_argument("--formats", default="fp8,mxfp4")
    args = ap.parse_args()
    os.makedirs(args.outdir, exist_ok=True)
    shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")]
    full = 2 * torch.cuda.get_device_properties(0).multi_processor_count
    flusher = L2Flusher(mode="read")
    rows = []
    for b, l in shapes:
        q, kv, qo, kvp, _ = generate_input(b, 1, l, seed=b + l, device="cuda")
        for fmt in args.formats.split(","):
            cache = as_cache(kv[fmt])
            ref = mla_decode_reference(q, cache, kvp, qo)[0] if b * l <= REF_MAX_TOKENS else None
            row = {"shape": f"{b}x{l}", "fmt": fmt}
            base = None
            for programs in candidates(b, full):
                dec = HopperDecoder(b, 16, fmt, q.device, programs=programs)
                out = torch.full((q.shape[0], 16, 512), float("nan"), dtype=torch.bfloat16, device="cuda")
                lse = torch.full((q.shape[0], 16), float("nan"), device="cuda")
                fn = lambda: dec.launch(q, cache, kvp, qo, out, lse, default_sm_scale())  # noqa: E731
                fn()
                torch.cuda.synchronize()
                t = gpu_time(fn, flusher, warm_s=0.1, time_cap_s=0.4).median_us
                against = ref if ref is not None else (base if base is not None else out)
                ok = check_strict(out, against).passed and not torch.isnan(lse).any().item()
                again = out.clone()
                fn()
                torch.cuda.synchronize()
                row[f"P{programs}"] = round(t, 1)
                row[f"P{programs} ok"] = bool(ok and torch.equal(again.view(torch.int16), out.view(torch.int16)))
                if base is None:
                    base = out
            rows.append(row)
            print(row, flush=True)
        del q, kv
        torch.cuda.empty_cache()
    json.dump(rows, open(os.path.join(args.outdir, "programs.json"), "w"), indent=1)
    for r in rows:
        times = {k: v for k, v in r.items() if k.startswith("P") and not k.endswith("ok")}
        best = min(times, key=times.get)
        print(f"| {r['shape']} {r['fmt']} | " + " | ".join(f"{k} {v}{'' if r[k + ' ok'] else ' FAIL'}"
                                                            for k, v in times.items()) + f" | best {best} |")


if __name__ == "__main__":
    main()
