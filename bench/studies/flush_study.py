"""How the L2 flush before each timed replay changes the measured GPU time.

`mixmla bench` writes a 256 MiB buffer before each replay, which leaves the L2 full of dirty lines
that the GPU must write back to HBM while the timed kernel runs. This script times the same CUDA
graphs four ways and prints the difference, so the flush's own cost can be told from the kernel's:

- ``write``: the bench's flush (``fill_`` of 256 MiB, then the replay);
- ``read``: the L2 evicted by *reading* 256 MiB (a sum), so it holds only clean lines;
- ``rotate``: no flush; N copies of the inputs (q, cache, output), N x the cache bytes >= 256 MiB,
  replayed in turn, so each replay's cache was last touched N - 1 replays ago;
- ``warm``: no flush, the same inputs replayed back to back (small caches then come from L2: a
  lower bound, not a measurement of HBM reads).

Plus an ``empty`` row: a graph with one 1-element kernel, under the same flushes (the floor).
Medians over ``--reps`` replays, in microseconds; one JSON line per (shape, impl, method) to
OUT/flush_study.jsonl.

``PYTHONPATH=src python3 bench/studies/flush_study.py [--shapes 4x1024,...] [--formats bf16,fp8,mxfp4] [--peers]``
"""

import argparse
import json
import math
import os
import statistics

import torch

from mixmla import api
from mixmla.harness.cases import Case, parse_shape
from mixmla.harness.timing import FLUSH_BYTES, L2Flusher, capture_graph

SHAPES = "4x1024,4x8192,32x1024,32x8192,64x1024,64x8192,256x1024,256x8192"


def shape_list(text):
    """``"4x1024,256x8192"``, or ``"64,1,4096,32;32,2,4096"`` (";" separates shapes given as B,Lq,Lk[,H])."""
    return [t for t in text.split(";" if ";" in text else ",") if t.strip()]


def bench_case(label):
    """The benchmark's inputs for ``"BxLk"`` (q_seq_len 1, 16 heads; ``"B,Lq,Lk[,H]"`` also works)."""
    text = label.replace("x", ",1,", 1) if label.count("x") == 1 and "," not in label else label
    return Case.generate(parse_shape(text), device="cuda")


def time_graphs(graphs, before, reps):
    """Median and min over ``reps`` replays (graphs used in turn), ``before()`` enqueued before each."""
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for i in range(reps):
        if before is not None:
            before()
        starts[i].record()
        graphs[i % len(graphs)].replay()
        ends[i].record()
    torch.cuda.synchronize()
    us = [s.elapsed_time(e) * 1e3 for s, e in zip(starts, ends)]
    return statistics.median(us), min(us)


def measure(make_fn, copies_needed, flushers, reps):
    """make_fn(copy_index) -> a callable doing one call on its own copy of the inputs."""
    base = capture_graph(make_fn(0))
    res = {}
    res["write"] = time_graphs([base], flushers["write"].flush, reps)
    res["read"] = time_graphs([base], flushers["read"].flush, reps)
    res["warm"] = time_graphs([base], None, reps)
    graphs = [base] + [capture_graph(make_fn(i)) for i in range(1, copies_needed)]
    res["rotate"] = time_graphs(graphs, None, max(reps, 2 * len(graphs)))
    res["copies"] = copies_needed
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default=SHAPES)
    ap.add_argument("--formats", default="bf16,fp8,mxfp4")
    ap.add_argument("--peers", action="store_true", help="also FlashInfer bf16 and fp8, if importable")
    ap.add_argument("--reps", type=int, default=60)
    ap.add_argument("--out", default=os.environ.get("OUT", "bench/out"))
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    log = open(os.path.join(a.out, "flush_study.jsonl"), "w")
    flushes = {mode: L2Flusher(mode=mode) for mode in ("write", "read")}
    rows = []

    def record(shape, impl, res, nbytes):
        rec = dict(shape=shape, impl=impl, bytes=nbytes, copies=res.pop("copies"),
                   **{k: {"median_us": v[0], "min_us": v[1]} for k, v in res.items()})
        log.write(json.dumps(rec) + "\n")
        log.flush()
        rows.append(rec)
        print(f"{shape:10} {impl:16} " + "  ".join(f"{k} {rec[k]['median_us']:7.1f}" for k in
                                                   ("write", "read", "rotate", "warm")), flush=True)

    tiny = torch.zeros(1, device="cuda")
    res = measure(lambda i: (lambda: tiny.add_(1.0)), 2, flushes, a.reps)
    record("-", "empty", res, 0)

    peers = None
    if a.peers:
        try:
            from mixmla.harness.peers import FlashInfer
            peers = FlashInfer()
            if peers.unavailable():
                peers = None
        except Exception:
            peers = None

    for shape in shape_list(a.shapes):
        case = bench_case(shape)
        q, _, qo_indptr, kv_indptr, _ = case.data
        for fmt in a.formats.split(","):
            nbytes = case.bytes(fmt)
            copies = max(2, math.ceil(FLUSH_BYTES / nbytes) + 1)
            plan = api.plan(kv_indptr, qo_indptr, num_heads=case.num_heads, fmt=fmt, sm_scale=case.sm_scale,
                            device=q.device)
            base_cache = case.cache(fmt)
            inputs = {}

            def make(i, plan=plan, base_cache=base_cache, fmt=fmt):
                if i == 0:
                    qi, ci = q, base_cache
                else:
                    qi = q.clone()
                    ci = type(base_cache)(**{f: (getattr(base_cache, f).clone()
                                                 if torch.is_tensor(getattr(base_cache, f)) else getattr(base_cache, f))
                                             for f in base_cache.__dataclass_fields__})
                out = torch.empty(q.shape[0], q.shape[1], 512, dtype=torch.bfloat16, device="cuda")
                inputs[i] = (qi, ci, out)
                return lambda: plan.run(qi, ci, out=out)

            record(shape, f"mixmla {fmt}", measure(make, copies, flushes, a.reps), nbytes)
            inputs.clear()
            torch.cuda.empty_cache()
            if peers is not None and fmt in ("bf16", "fp8"):
                try:
                    prep = peers.prepare(case, fmt)
                    # FlashInfer reads one cache; rotation would need one plan per copy, so its
                    # rotate column repeats the same inputs (like warm).
                    record(shape, f"flashinfer {fmt}", measure(lambda i, p=prep: p.gpu, 1, flushes, a.reps),
                           nbytes)
                except Exception as exc:
                    print(f"{shape} flashinfer {fmt}: {type(exc).__name__}: {exc}")
        del case
        torch.cuda.empty_cache()

    print("\nmedian GPU time (us): write flush / read flush / rotated inputs / warm")
    for r in rows:
        print(f"{r['shape']:10} {r['impl']:18} {r['write']['median_us']:8.1f} {r['read']['median_us']:8.1f} "
              f"{r['rotate']['median_us']:8.1f} {r['warm']['median_us']:8.1f}")


if __name__ == "__main__":
    main()
