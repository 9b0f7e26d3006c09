"""Is the Triton kernel's cost over pages of whole tiles the page table or the memory pattern?

For each shape (bf16, the Triton kernel): the contiguous cache; the same rows in pages of 64 tokens
laid out in order (page k of the pool is the batch's k-th page, so every request's rows are as
contiguous as before and only the page-table reads differ); and in a shuffled order
(``mixmla.paged.scatter_to_pages``, as ``mixmla bench --paged``). GPU time as
``paged_triton.py`` (graph replay after a 256 MiB read flush, median us). Every paged output is
compared with the contiguous one (the order of summation is the same, so rel L2 is 0 unless a row
is wrong). ``--ncu`` instead launches each case twice (warm-up, then the profiled launch) for ncu.

    PYTHONPATH=src python3 bench/studies/paged_order_study.py --out DIR [--shapes 256x1024,256x8192]
"""

import argparse
import json
import os
from unittest import mock

import torch

import mixmla
from mixmla.formats import as_cache
from mixmla.harness.timing import L2Flusher, gpu_time
from mixmla.inputs import generate_input
from mixmla.paged import plan_paged, scatter_to_pages

PAGE = 64


def in_order(cache, kvp, page):
    """``scatter_to_pages`` with the identity page order."""
    with mock.patch("torch.randperm", lambda n, generator=None: torch.arange(n)):
        return scatter_to_pages(cache, kvp, page)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "bench/out"))
    ap.add_argument("--shapes", default="256x1024,256x8192,64x8192,32x8192")
    ap.add_argument("--fmt", default="bf16")
    ap.add_argument("--ncu", action="store_true", help="two launches per case, no timing")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    flusher = L2Flusher(torch.device("cuda"), mode="read")
    rows = []
    for shape in a.shapes.split(","):
        b, l = (int(x) for x in shape.split("x"))
        q, kv, qo, kvp, _ = generate_input(b, 1, l, seed=7 + b + l, device="cuda")
        cache = as_cache(kv[a.fmt])
        plan = mixmla.plan(kvp, qo, num_heads=16, fmt=a.fmt, backend="triton")
        out_c = torch.empty(q.shape[0], 16, 512, dtype=torch.bfloat16, device="cuda")
        cases = [("contiguous", lambda: plan.run(q, cache, out=out_c), out_c)]
        for name, batch in (("p64 in order", in_order(cache, kvp, PAGE)),
                            ("p64 shuffled", scatter_to_pages(cache, kvp, PAGE, generator=torch.Generator().manual_seed(1)))):
            pplan = plan_paged(batch.block_table, batch.seq_lens, PAGE, qo_indptr=qo, num_heads=16, fmt=a.fmt,
                               backend="triton")
            out_p = torch.full_like(out_c, float("nan"))
            cases.append((name, (lambda pp, bb, oo: lambda: pp.run(q, bb.cache, out=oo))(pplan, batch, out_p), out_p))
        for name, fn, out in cases:
            fn()
            torch.cuda.synchronize()
            if a.ncu:
                fn()
                torch.cuda.synchronize()
                continue
            t = gpu_time(fn, flusher, warmup=3, max_reps=60, min_reps=10, time_cap_s=0.3, warm_s=0.1)
            err = (torch.linalg.vector_norm(out.double() - out_c.double()) / torch.linalg.vector_norm(out_c.double())).item()
            row = dict(shape=shape, fmt=a.fmt, case=name, us=round(t.median_us, 1), rel_l2=err)
            rows.append(row)
            print(row, flush=True)
        del q, kv, cache, cases
        torch.cuda.empty_cache()
    if rows:
        json.dump(rows, open(os.path.join(a.out, "paged_order.json"), "w"), indent=1)
        base = {r["shape"]: r["us"] for r in rows if r["case"] == "contiguous"}
        for r in rows:
            print(f"{r['shape']:<10} {r['case']:<14} {r['us']:>8.1f} {r['us'] / base[r['shape']]:>7.3f} {r['rel_l2']:.1e}")


if __name__ == "__main__":
    main()
