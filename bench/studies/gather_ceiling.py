"""How fast can the H200 read cache rows in a shuffled page order? (issue 14's page-1 bar)

A read-only kernel (each program reads 16 rows through an index array and reduces them to one
word) times a pool of 2**21 rows of each format's row size, in the order a paged cache of page
size P shuffled in its pool gives: P = 1, 16, 64 and in order (contiguous). The MXFP4 row is its
288 code bytes plus its 18 scale bytes in a separate array (row stride 18, as the benchmark
caches hold them). Also a shuffle that stays inside 2 MiB windows (the rows of each window
permuted among themselves) separates DRAM locality from address-translation reach.

``python bench/studies/gather_ceiling.py OUTDIR``: prints a table of GPU time (graph replay after
a read flush, ``harness.timing.gpu_time``) and GB/s of the bytes read (rows, scale rows, the index), writes OUTDIR/gather.json.
``--cpu-smoke``: a tiny pool through Triton's interpreter, order results checked against torch.
"""

import json
import os
import sys

import torch
import triton
import triton.language as tl

ROWS_PER_PROG = 16
FORMATS = {"bf16": (1152, 0), "fp8": (576, 0), "mxfp4": (288, 18)}  # (row bytes, scale bytes)


@triton.jit
def _gather_sum(pool, idx, scales, out, ROW_WORDS: tl.constexpr, WORDS_POW2: tl.constexpr, SC_BYTES: tl.constexpr,
                R: tl.constexpr):
    pid = tl.program_id(0)
    rows = tl.load(idx + pid * R + tl.arange(0, R)).to(tl.int64)
    cols = tl.arange(0, WORDS_POW2)
    x = tl.load(pool + rows[:, None] * ROW_WORDS + cols[None, :], mask=(cols < ROW_WORDS)[None, :], other=0)
    acc = tl.sum(tl.sum(x, axis=1), axis=0)
    if SC_BYTES > 0:
        sc = tl.arange(0, 32)
        s = tl.load(scales + rows[:, None] * SC_BYTES + sc[None, :], mask=(sc < SC_BYTES)[None, :], other=0)
        acc += tl.sum(tl.sum(s.to(tl.int32), axis=1), axis=0)
    tl.store(out + pid, acc)


def row_order(n: int, page: int, gen: torch.Generator, window: int = 0) -> torch.Tensor:
    """Cache rows in the order a request reads them: pages of ``page`` rows in a random order
    (``page == 0``: in order); ``window`` > 0: rows permuted only inside windows of that many rows."""
    if window:
        base = torch.arange(0, n, window).repeat_interleave(window)
        perm = torch.cat([torch.randperm(window, generator=gen) for _ in range(n // window)])
        return (base + perm).to(torch.int32)
    if page == 0:
        return torch.arange(n, dtype=torch.int32)
    pages = torch.randperm(n // page, generator=gen)
    return (pages[:, None] * page + torch.arange(page)[None, :]).reshape(-1).to(torch.int32)


def launcher(pool, idx, scales, out, row_bytes, sc_bytes):
    words = row_bytes // 4
    grid = (idx.numel() // ROWS_PER_PROG, )
    sc = scales if scales is not None else pool
    return lambda: _gather_sum[grid](pool, idx, sc, out, words, triton.next_power_of_2(words), sc_bytes,
                                     ROWS_PER_PROG, num_warps=4)


def cpu_smoke():
    gen = torch.Generator().manual_seed(0)
    n = 256
    for name, (rb, sb) in FORMATS.items():
        pool = torch.randint(0, 1 << 10, (n * rb // 4, ), dtype=torch.int32, generator=gen)
        scales = torch.randint(0, 255, (n * sb, ), dtype=torch.uint8, generator=gen) if sb else None
        for page in (0, 1, 16):
            idx = row_order(n, page, gen)
            out = torch.zeros(n // ROWS_PER_PROG, dtype=torch.int32)
            launcher(pool, idx, scales, out, rb, sb)()
            ref = pool.view(n, rb // 4)[idx.long()].sum(1)
            if sb:
                ref = ref + scales.view(n, sb)[idx.long()].to(torch.int32).sum(1)
            ref = ref.view(-1, ROWS_PER_PROG).sum(1).to(torch.int32)
            assert torch.equal(out, ref), (name, page)
    print("cpu smoke ok")


def main(outdir):
    from mixmla.harness.timing import L2Flusher, gpu_time

    os.makedirs(outdir, exist_ok=True)
    dev = torch.device("cuda")
    gen = torch.Generator().manual_seed(1)
    n = 1 << 21
    flusher = L2Flusher(dev, mode="read")
    results = []
    for name, (rb, sb) in FORMATS.items():
        pool = torch.randint(0, 1 << 20, (n * rb // 4, ), dtype=torch.int32, device=dev)
        scales = torch.randint(0, 255, (n * sb, ), dtype=torch.uint8, device=dev) if sb else None
        out = torch.empty(n // ROWS_PER_PROG, dtype=torch.int32, device=dev)
        window = (2 << 20) // rb
        window = 1 << (window.bit_length() - 1)
        orders = [("in order", row_order(n, 0, gen)), ("pages of 64", row_order(n, 64, gen)),
                  ("pages of 16", row_order(n, 16, gen)), ("pages of 1", row_order(n, 1, gen)),
                  (f"rows shuffled in {window}-row windows", row_order(n, 0, gen, window))]
        for label, idx in orders:
            idx = idx.to(dev)
            fn = launcher(pool, idx, scales, out, rb, sb)
            t = gpu_time(fn, flusher)
            us = t.median_us
            nbytes = n * (rb + sb) + idx.numel() * 4
            r = {"format": name, "order": label, "us": round(us, 2), "GB/s": round(nbytes / us / 1e3, 1)}
            results.append(r)
            print(r, flush=True)
        del pool, scales, out
    json.dump(results, open(os.path.join(outdir, "gather.json"), "w"), indent=1)
    print("| format | order | us | GB/s |")
    for r in results:
        print(f"| {r['format']} | {r['order']} | {r['us']} | {r['GB/s']} |")


if __name__ == "__main__":
    if "--cpu-smoke" in sys.argv:
        cpu_smoke()
    else:
        main(sys.argv[1] if len(sys.argv) > 1 else os.environ.get("OUT", "bench/out/gather"))
