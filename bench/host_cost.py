"""Host time per call of mixmla's entry points, and of FlashInfer's run where it is importable.

What a serving loop that does not capture graphs pays on the host for every call. For each shape
(batch x cached tokens per request, 16 heads, one query token) and cache format, on the GPU:

- ``run``: ``DecodePlan.run(q, cache, out=out)``, eager; ``run+lse``: the same with the lse.
- ``plan``: ``mixmla.plan(kv_indptr, qo_indptr, H, fmt)`` with the layout of the last call (what
  mixmla remembers per layout serves it); ``plan (new lengths)``: the same after forgetting the
  lengths (``forget_lengths``), what a plan of new lengths with known chunk counts costs (a serving
  loop's next step); ``plan (new counts)``: after forgetting the work arrays on the device too,
  what a plan costs when its chunk counts are new.
- ``mla_decode``: ``mixmla.mla_decode(q, cache, kv_indptr, qo_indptr)`` (a layout seen before: the
  same indptrs for every layer of a step); ``mla_decode (GPU idle)``: the same after a
  ``torch.cuda.synchronize()`` per call, so that its host read does not wait for the previous
  call's kernels (the part of ``mla_decode``'s cost that is that wait); ``indptr host read``: the
  one transfer of both indptrs to the host that ``mla_decode``'s checks make; ``mla_decode (new
  lengths)``: after ``forget_lengths``.
- ``plan (host indptrs)``, ``mla_decode (host indptrs)``: the same two with the indptrs as CPU
  tensors (and an fp8 cache's scale given as a number), which read nothing from the device.
- ``custom_kernel``: ``custom_kernel(data, fmt)`` (from its third call on, one graph replay and a
  copy of the output); ``custom_kernel eager``: ``use_graphs=False``.
- ``flashinfer run``: ``BatchMLAPagedAttentionWrapper.run`` after its plan (bf16 and fp8), as
  ``mixmla bench`` calls it.
- with ``--paged``, per paged shape, format and page size (pools of zeros, every request's pages
  in a random order, block tables padded with -1): ``plan_paged`` (``mixmla.plan_paged(block_table,
  seq_lens, P, qo_indptr, H, fmt)``), ``paged run`` (its ``run(q, pool, out=out)``), and
  ``mla_decode_paged`` (``mixmla.mla_decode_paged(q, pool, block_table, seq_lens)``); the same
  three in the CSR form (``plan_paged_csr``, ``paged csr run``, ``mla_decode_paged_csr``).
- ``triton @jit empty`` / ``triton handle empty``: an empty kernel of one pointer argument through
  Triton's dispatcher and through its compiled handle, the floors of the two launch paths.

A sample is ``time.perf_counter`` around one call, which returns once its GPU work is queued; calls
run in bursts of ``--burst`` after a ``torch.cuda.synchronize()``, so the launch queue never fills
and GPU time does not leak in. The calls are taken in ``--rounds`` rounds, each visiting every
entry point for ``calls / rounds`` calls (after 20 untimed), so that a host whose speed drifts over
the minutes of a run (freshly started machines do) shifts every entry alike. Reported per entry
point: the median, 10th and 90th percentiles over all its calls and the median of each round, in
microseconds.

Without a GPU the same entry points run on CPU tensors in Triton's interpreter with every kernel
launch replaced by nothing: the Python of mixmla's side only (``mode: cpu-python``), no transfers.

    PYTHONPATH=src python3 bench/host_cost.py --out DIR [--shapes 4x1024,64x1024,256x1024]
        [--formats bf16,fp8,mxfp4] [--calls 400] [--burst 20] [--rounds 4]
        [--paged [--paged-shapes 4x1024,64x8192,256x8192] [--page-sizes 1,64] [--paged-formats bf16]]

``--shapes ''`` skips the contiguous entry points.

Writes DIR/host_cost.json and prints a table.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import torch

import mixmla
from mixmla import api, validate
from mixmla.harness.env import device_info, source_commit
from mixmla.inputs import generate_input
from mixmla.kernels.triton import backend as triton_backend
from mixmla.kernels.triton import launch

HEADS = 16


def sample(fn, calls: int, burst: int, cuda: bool, before=None) -> list[float]:
    """Host microseconds of ``calls`` timed calls of ``fn()`` (after 20 untimed ones), in bursts of
    ``burst`` after a synchronize; ``before()`` runs untimed before each call."""
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    for _ in range(20):
        if before:
            before()
        fn()
    sync()
    times = []
    while len(times) < calls:
        sync()
        for _ in range(min(burst, calls - len(times))):
            if before:
                before()
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e6)
    sync()
    return times


def summary(times: list[float]) -> dict:
    """Median, p10 and p90 of host microseconds."""
    q = statistics.quantiles(times, n=10)
    return {"median_us": statistics.median(times), "p10_us": q[0], "p90_us": q[-1], "n": len(times)}


def _flashinfer_call(data, fmt):
    """FlashInfer's per-step call, prepared as ``mixmla bench`` does, or None if not importable."""
    from mixmla.harness.cases import Case
    from mixmla.harness.peers import FlashInfer

    peer = FlashInfer()
    if peer.unavailable() or fmt not in peer.formats:
        return None
    case = Case({"batchsize": 0, "qseqlen": 1, "kvseqlen": 0, "seed": 0}, data)
    return peer.prepare(case, fmt).call


def _empty_kernel_calls():
    """Calls launching an empty one-argument kernel through the dispatcher and through its handle."""
    import triton

    @triton.jit
    def empty(x_ptr):
        pass

    x = torch.empty(1, device="cuda")
    compiled = empty[(1,)](x)
    stream = triton.runtime.driver.active.get_current_stream(torch.cuda.current_device())
    return (lambda: empty[(1,)](x)), (lambda: launch.launch_compiled(compiled, (1,), stream, (x,)))


def paged_batch(batch: int, kv_len: int, page_size: int, fmt: str, device, seed: int = 0) -> dict:
    """A paged batch of ``batch`` requests of ``kv_len`` cached tokens in pages of ``page_size``,
    as an engine holds it: the pool in its page-major tensor form (zeros), a block table (batch,
    pages per request + 1) of int32 whose pages are a random permutation of the pool's and whose
    last column is -1 padding, seq_lens (batch,) int32, the CSR form of the same table (kv_indptr
    (batch+1,), kv_indices), and q (batch, H, 576) bf16."""
    gen = torch.Generator().manual_seed(seed)
    per_req = -(-kv_len // page_size)
    num_pages = batch * per_req
    shape = (num_pages, page_size)
    if fmt == "bf16":
        pool = torch.zeros(*shape, 576, dtype=torch.bfloat16, device=device)
    elif fmt == "fp8":
        pool = (torch.zeros(*shape, 576, dtype=torch.float8_e4m3fn, device=device),
                torch.ones(1, dtype=torch.float32, device=device))
    else:
        pool = (torch.zeros(*shape, 288, dtype=torch.uint8, device=device),
                torch.zeros(*shape, 18, dtype=torch.uint8, device=device))
    order = torch.randperm(num_pages, generator=gen).to(torch.int32)
    table = torch.full((batch, per_req + 1), -1, dtype=torch.int32)
    table[:, :per_req] = order.view(batch, per_req)
    i32 = dict(dtype=torch.int32, device=device)
    return dict(pool=pool, block_table=table.to(device), seq_lens=torch.full((batch,), kv_len, **i32),
                kv_indptr=torch.arange(0, num_pages + 1, per_req, **i32), kv_indices=order.to(device),
                qo_indptr=torch.arange(batch + 1, **i32),
                q=torch.zeros(batch, HEADS, 576, dtype=torch.bfloat16, device=device))


def forget_lengths() -> None:
    """Empty what mixmla remembers of the lengths it has seen (the per-layout plans and the
    checked indptr values), not the work arrays, which depend on the chunk counts only: a call
    after this costs what a call for new lengths with the same counts costs."""
    api._LAYOUTS.clear()
    validate._ORDERED.clear()


def forget_counts() -> None:
    """``forget_lengths`` and the work arrays on the device: a call for new chunk counts."""
    forget_lengths()
    triton_backend._schedule_on_device.cache_clear()


def measure(shapes, formats, calls, burst, paged_shapes=(), page_sizes=(), paged_formats=(), rounds=4) -> list[dict]:
    """One row per (shape, format, entry point): the ``summary`` of its ``calls`` samples and the
    median of each round. The samples are taken in ``rounds`` rounds, each visiting every entry
    point in turn for ``calls / rounds`` calls, so that a host that runs faster or slower over the
    minutes of a run (seen on freshly started machines) shifts every entry alike instead of the
    ones measured last."""
    cuda = torch.cuda.is_available()
    device = "cuda" if cuda else "cpu"
    jobs = []

    def add(shape, fmt, entry, fn, before=None):
        jobs.append((shape, fmt, entry, fn, before))

    if cuda:
        jit_call, handle_call = _empty_kernel_calls()
        add("-", None, "triton @jit empty", jit_call)
        add("-", None, "triton handle empty", handle_call)
    # Each batch's entry points are made in a function of their own, so that every closure keeps
    # its own batch (they run later, round after round).
    def paged_entries(shape, batch, kv_len, fmt, page):
        d = paged_batch(batch, kv_len, page, fmt, device, seed=batch + kv_len)
        q, pool, bt, lens, qo = d["q"], d["pool"], d["block_table"], d["seq_lens"], d["qo_indptr"]
        ind, idx = d["kv_indptr"], d["kv_indices"]
        out = torch.empty(batch, HEADS, 512, dtype=torch.bfloat16, device=device)
        label = f"{shape}/{page}"
        p = mixmla.plan_paged(bt, lens, page, qo, HEADS, fmt)
        add(label, fmt, "plan_paged", lambda: mixmla.plan_paged(bt, lens, page, qo, HEADS, fmt))
        add(label, fmt, "paged run", lambda: p.run(q, pool, out=out))
        add(label, fmt, "mla_decode_paged", lambda: mixmla.mla_decode_paged(q, pool, bt, lens))
        pc = mixmla.plan_paged_csr(ind, idx, lens, page, qo, HEADS, fmt)
        add(label, fmt, "plan_paged_csr", lambda: mixmla.plan_paged_csr(ind, idx, lens, page, qo, HEADS, fmt))
        add(label, fmt, "paged csr run", lambda: pc.run(q, pool, out=out))
        add(label, fmt, "mla_decode_paged_csr", lambda: mixmla.mla_decode_paged_csr(q, pool, ind, idx, lens))

    for shape in paged_shapes:
        batch, kv_len = (int(x) for x in shape.split("x"))
        for fmt in paged_formats:
            for page in page_sizes:
                paged_entries(shape, batch, kv_len, fmt, page)

    def entries(shape, data, fmt):
        q, kv, qo_indptr, kv_indptr, _ = data
        cache = kv[fmt]
        p = mixmla.plan(kv_indptr, qo_indptr, HEADS, fmt)
        out = torch.empty(q.shape[0], HEADS, 512, dtype=torch.bfloat16, device=device)
        add(shape, fmt, "run", lambda: p.run(q, cache, out=out))
        add(shape, fmt, "run+lse", lambda: p.run(q, cache, out=out, return_lse=True))
        add(shape, fmt, "plan", lambda: mixmla.plan(kv_indptr, qo_indptr, HEADS, fmt))
        add(shape, fmt, "plan (new lengths)", lambda: mixmla.plan(kv_indptr, qo_indptr, HEADS, fmt),
            before=forget_lengths)
        add(shape, fmt, "plan (new counts)", lambda: mixmla.plan(kv_indptr, qo_indptr, HEADS, fmt),
            before=forget_counts)
        add(shape, fmt, "mla_decode", lambda: mixmla.mla_decode(q, cache, kv_indptr, qo_indptr))
        add(shape, fmt, "indptr host read", lambda: validate._host_values([kv_indptr, qo_indptr]))
        add(shape, fmt, "mla_decode (GPU idle)", lambda: mixmla.mla_decode(q, cache, kv_indptr, qo_indptr),
            before=torch.cuda.synchronize if cuda else None)
        add(shape, fmt, "mla_decode (new lengths)", lambda: mixmla.mla_decode(q, cache, kv_indptr, qo_indptr),
            before=forget_lengths)
        # The same with the indptrs on the host (and an fp8 scale given as a number): no value is
        # read from the device, so the call need not wait for the previous call's kernels.
        kv_host, qo_host = kv_indptr.cpu(), qo_indptr.cpu()
        host_cache = mixmla.Fp8Cache(cache[0], float(cache[1].item())) if fmt == "fp8" else cache
        add(shape, fmt, "plan (host indptrs)", lambda: mixmla.plan(kv_host, qo_host, HEADS, fmt, device=q.device))
        add(shape, fmt, "mla_decode (host indptrs)", lambda: mixmla.mla_decode(q, host_cache, kv_host, qo_host))
        add(shape, fmt, "custom_kernel", lambda: api.custom_kernel(data, fmt))
        add(shape, fmt, "custom_kernel eager", lambda: api.custom_kernel(data, fmt, use_graphs=False))
        peer = _flashinfer_call(data, fmt) if cuda else None
        if peer is not None:
            add(shape, fmt, "flashinfer run", peer)

    for shape in shapes:
        batch, kv_len = (int(x) for x in shape.split("x"))
        data = generate_input(batch, 1, kv_len, seed=batch + kv_len, num_heads=HEADS, device=device)
        for fmt in formats:
            entries(shape, data, fmt)

    per_round = max(10, calls // rounds)
    times = [[] for _ in jobs]
    medians = [[] for _ in jobs]
    for r in range(rounds):
        for i, (shape, fmt, entry, fn, before) in enumerate(jobs):
            t = sample(fn, per_round, burst, cuda, before)
            times[i] += t
            medians[i].append(round(statistics.median(t), 1))
        print(f"  round {r + 1}/{rounds} done", flush=True)
    rows = []
    for (shape, fmt, entry, _, _), t, m in zip(jobs, times, medians):
        row = dict(shape=shape, format=fmt, entry=entry, **summary(t), round_medians_us=m)
        rows.append(row)
        print(f"  {shape:>9} {fmt or '':>6} {entry:<26} {row['median_us']:8.1f} us  (p10 {row['p10_us']:.1f}, "
              f"p90 {row['p90_us']:.1f}; rounds {' '.join(f'{x:.0f}' for x in m)})", flush=True)
    return rows


def table(rows) -> str:
    """Entry points down, shape/format across: median host us per call."""
    columns = list(dict.fromkeys((r["shape"], r["format"]) for r in rows if r["format"]))
    entries = list(dict.fromkeys(r["entry"] for r in rows))
    cell = {(r["entry"], r["shape"], r["format"]): r["median_us"] for r in rows}
    header = ["host us per call"] + [f"{s} {f}" for s, f in columns]
    body = []
    for e in entries:
        if (e, "-", None) in cell:
            body.append([e, f"{cell[(e, '-', None)]:.1f}"] + [""] * (len(columns) - 1))
        else:
            body.append([e] + [f"{cell[(e, s, f)]:.1f}" if (e, s, f) in cell else "" for s, f in columns])
    widths = [max(len(r[i]) for r in [header] + body) for i in range(len(header))]
    return "\n".join("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths)))
                     for r in [header] + body)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=os.environ.get("OUT", os.path.join("bench", "out")))
    ap.add_argument("--shapes", default="4x1024,64x1024,256x1024", help="batch x cached tokens, comma-separated")
    ap.add_argument("--formats", default="bf16,fp8,mxfp4")
    ap.add_argument("--calls", type=int, default=400, help="timed calls per entry point")
    ap.add_argument("--burst", type=int, default=20, help="calls between synchronizations")
    ap.add_argument("--rounds", type=int, default=4, help="rounds over all entry points, calls / rounds each")
    ap.add_argument("--paged", action="store_true", help="also the paged entry points")
    ap.add_argument("--paged-shapes", default="4x1024,64x8192,256x8192", help="batch x cached tokens (paged)")
    ap.add_argument("--page-sizes", default="1,64", help="tokens per page (paged)")
    ap.add_argument("--paged-formats", default="bf16", help="cache formats (paged)")
    a = ap.parse_args(argv)
    cuda = torch.cuda.is_available()
    if not cuda:
        # mixmla's Python only: the interpreter runs no kernel (its run would dominate everything).
        import triton.runtime.interpreter as triton_interpreter

        triton_interpreter.InterpretedFunction.run = lambda self, *args, **kwargs: None
    commit = source_commit()
    info = device_info()
    print(f"host cost per call on {info['name']}, commit {commit}, torch {info['torch']}, triton {info['triton']}"
          + ("" if cuda else " (CPU: mixmla's Python only, kernel launches stubbed out)"), flush=True)
    def items(text):
        return [x.strip() for x in text.split(",") if x.strip()]

    rows = measure(items(a.shapes), items(a.formats), a.calls, a.burst,
                   items(a.paged_shapes) if a.paged else (), [int(p) for p in items(a.page_sizes)],
                   items(a.paged_formats), a.rounds)
    doc = {"schema": "mixmla-host-cost/1", "mode": "gpu" if cuda else "cpu-python", "device": info, "commit": commit,
           "settings": {"calls": a.calls, "burst": a.burst, "rounds": a.rounds, "heads": HEADS,
                                                                        "paged": a.paged}, "rows": rows}
    os.makedirs(a.out, exist_ok=True)
    path = os.path.join(a.out, "host_cost.json")
    with open(path, "w") as f:
        json.dump(doc, f, indent=1)
    print()
    print(table(rows))
    print(f"\nwrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
