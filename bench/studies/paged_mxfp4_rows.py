"""Does MXFP4 in pages of one token pay for its scale rows living apart from its code rows?

A paged MXFP4 pool is two tensors in the usual layout, codes ``(pages, P, 288)`` and scales
``(pages, P, 18)``: at page size 1 every token is two reads from two distant places (288 bytes and
18 bytes), where the contiguous cache reads a tile's 64 scale rows as one 1152-byte run. SPEC's
pool takes the scale rows' stride as given, so one allocation can hold both: rows of ``ROW`` bytes
(a multiple of 32, what the Hopper kernel reads), codes in bytes 0..287 and scales in 288..305, the
codes and scales passed as two strided views of it. This study times, per shape, the contiguous
cache, the shuffled pool in the two-tensor layout (``scatter_to_pages``, as ``mixmla bench
--paged``) and the same pool interleaved, at the page sizes given, through ``plan_paged(...).run``
(``backend`` as given; 'auto' takes the Hopper kernel for MXFP4 on sm_90). GPU time as
``paged_order_study.py`` (graph replay after a 256 MiB read flush, median us). Every paged output
is compared with the contiguous one (the same sums in the same order: rel L2 0 unless a row is
wrong), and the interleaved output with the two-tensor one bitwise.

    PYTHONPATH=src python3 bench/studies/paged_mxfp4_rows.py --out DIR [--shapes 256x8192,64x8192]
        [--pages 1,64] [--row 320] [--rounds 2]
"""

import argparse
import json
import os

import torch

import mixmla
from mixmla.formats import as_cache
from mixmla.formats.cache import MX_PACKED_DIM, MX_SCALES_PER_ROW, Mxfp4Cache
from mixmla.formats.paged import PagedCache
from mixmla.paged import plan_paged, scatter_to_pages


def interleaved(pool: PagedCache, row: int) -> PagedCache:
    """The rows of ``pool`` (MXFP4) copied into one ``(rows, row)`` uint8 buffer: codes then scales."""
    codes, scales = pool.rows.data, pool.rows.scales
    n = codes.shape[0]
    buf = torch.zeros(n, row, dtype=torch.uint8, device=codes.device)
    buf[:, :MX_PACKED_DIM] = codes
    buf[:, MX_PACKED_DIM:MX_PACKED_DIM + MX_SCALES_PER_ROW] = scales[:n, :MX_SCALES_PER_ROW]
    return PagedCache(Mxfp4Cache(buf[:, :MX_PACKED_DIM], buf[:, MX_PACKED_DIM:MX_PACKED_DIM + MX_SCALES_PER_ROW]),
                      pool.page_size)


def main():
    from mixmla.harness.timing import L2Flusher, gpu_time
    from mixmla.inputs import generate_input

    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "bench/out"))
    ap.add_argument("--shapes", default="256x8192,64x8192,32x8192,256x1024")
    ap.add_argument("--pages", default="1,64")
    ap.add_argument("--row", type=int, default=320, help="bytes per row of the interleaved pool (a multiple of 32)")
    ap.add_argument("--rounds", type=int, default=2, help="times every case is timed, in turn")
    ap.add_argument("--backend", default="auto")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    flusher = L2Flusher(torch.device("cuda"), mode="read")
    rows = []
    for shape in a.shapes.split(","):
        b, l = (int(x) for x in shape.split("x"))
        q, kv, qo, kvp, _ = generate_input(b, 1, l, seed=7 + b + l, device="cuda")
        cache = as_cache(kv["mxfp4"])
        plan = mixmla.plan(kvp, qo, num_heads=16, fmt="mxfp4", backend=a.backend)
        out_c = torch.empty(q.shape[0], 16, 512, dtype=torch.bfloat16, device="cuda")
        cases = [("contiguous", lambda: plan.run(q, cache, out=out_c), out_c, plan.backend)]
        for page in (int(p) for p in a.pages.split(",")):
            batch = scatter_to_pages(cache, kvp, page, generator=torch.Generator().manual_seed(1))
            pplan = plan_paged(batch.block_table, batch.seq_lens, page, qo_indptr=qo, num_heads=16, fmt="mxfp4",
                               backend=a.backend)
            for name, pool in ((f"p{page} two tensors", batch.cache), (f"p{page} rows of {a.row}", interleaved(batch.cache, a.row))):
                out_p = torch.full_like(out_c, float("nan"))
                fn = (lambda pp, cc, oo: lambda: pp.run(q, cc, out=oo))(pplan, pool, out_p)
                cases.append((name, fn, out_p, pplan.backend))
        for _, fn, _, _ in cases:
            fn()
        torch.cuda.synchronize()
        times = {name: [] for name, *_ in cases}
        for _ in range(a.rounds):
            for name, fn, _, _ in cases:
                t = gpu_time(fn, flusher, warmup=3, max_reps=40, min_reps=10, time_cap_s=0.3, warm_s=0.05)
                times[name].append(round(t.median_us, 1))
        two = {}
        for name, fn, out, backend in cases:
            err = (torch.linalg.vector_norm(out.double() - out_c.double()) / torch.linalg.vector_norm(out_c.double())).item()
            if "two tensors" in name:
                two[name.split()[0]] = out
            same = None if name == "contiguous" or "two tensors" in name else bool(torch.equal(out, two[name.split()[0]]))
            row = dict(shape=shape, case=name, backend=backend, us=times[name], rel_l2_vs_contiguous=err,
                       bitwise_as_two_tensors=same)
            rows.append(row)
            print(row, flush=True)
        del q, kv, cache, cases, two
        torch.cuda.empty_cache()
    if rows:
        json.dump(rows, open(os.path.join(a.out, "paged_mxfp4_rows.json"), "w"), indent=1)
        base = {r["shape"]: min(r["us"]) for r in rows if r["case"] == "contiguous"}
        print(f"{'shape':<10} {'case':<22} {'us (rounds)':<20} {'x contiguous':>12}  rel L2   bitwise")
        for r in rows:
            us = " / ".join(f"{u:.1f}" for u in r["us"])
            print(f"{r['shape']:<10} {r['case']:<22} {us:<20} {min(r['us']) / base[r['shape']]:>12.3f}  "
                  f"{r['rel_l2_vs_contiguous']:.1e}  {r['bitwise_as_two_tensors']}")


if __name__ == "__main__":
    main()
