"""Where the fixed per-call time goes: the whole plan, the decode kernel alone, and plan variants.

For each shape, format and kernel config (``KernelConfig`` fields over the format's default), this
checks the output strictly (poisoned buffer, float64 reference) and then times CUDA-graph replays
(median, microseconds) after a *read* flush (256 MiB summed: L2 holds only clean lines) and after
the bench's *write* flush (256 MiB filled). ``decode only`` is the same graph with the combine
launch left out (its output is then incomplete; it is timed, not checked). One JSON line per
measurement to OUT/overhead_study.jsonl; a table last.

``PYTHONPATH=src python3 bench/studies/overhead_study.py [--shapes 4x1024,...] [--formats bf16]
[--configs "bt32:block_t=32,num_stages=2,items_per_sm=2"]``
"""

import argparse
import dataclasses
import json
import os

import torch

import mixmla
from mixmla.formats import as_cache
from mixmla.kernels.triton import launch
from mixmla.check import check_strict
from mixmla.harness.timing import L2Flusher, capture_graph
from mixmla.kernels.triton.configs import config_fields, default_config
from mixmla.schedule import rows_per_request

from flush_study import bench_case, shape_list, time_graphs

SHAPES = "4x1024,4x8192,32x1024,32x8192,64x1024,64x8192,256x1024,256x8192"


def parse_configs(text):
    """``"name:field=value,field=value;..."`` -> [(name, {field: value})]; "default" is always first."""
    out = [("default", {})]
    for item in filter(None, (t.strip() for t in text.split(";"))):
        name, _, fields = item.partition(":")
        out.append((name.strip(), config_fields(fields)))
    return out


def time_graph(graph, before, reps):
    """Median GPU time (us) of ``reps`` replays of ``graph``, ``before()`` enqueued before each."""
    return time_graphs([graph], before, reps)[0]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default=SHAPES)
    ap.add_argument("--formats", default="bf16,fp8,mxfp4")
    ap.add_argument("--configs", default="")
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--out", default=os.environ.get("OUT", "bench/out"))
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    log = open(os.path.join(a.out, "overhead_study.jsonl"), "a")
    read_flush = L2Flusher(mode="read").flush
    write_flush = L2Flusher(mode="write").flush
    rows = []
    for shape in shape_list(a.shapes):
        case = bench_case(shape)
        q, _, qo_indptr, kv_indptr, _ = case.data
        for fmt in a.formats.split(","):
            cache = case.cache(fmt)
            ref = case.ref(fmt)
            base = default_config(fmt, rows_per_request([int(case.spec["qseqlen"])], case.num_heads))
            for name, fields in parse_configs(a.configs):
                cfg = dataclasses.replace(base, **fields)
                rec = dict(shape=shape, fmt=fmt, config=name, cfg=dataclasses.asdict(cfg), bytes=case.bytes(fmt))
                try:
                    p = mixmla.plan(kv_indptr, qo_indptr, case.num_heads, fmt, sm_scale=case.sm_scale, config=cfg)
                    out = torch.full_like(ref, float("nan"), dtype=torch.bfloat16)
                    p.run(q, cache, out=out)
                    chk = check_strict(out, ref)
                    rec.update(rel_l2=chk.rel_l2, ok=bool(chk.passed), work_items=p.schedule.num_work,
                               direct=p.schedule.direct)
                    g = capture_graph(lambda: p.run(q, cache, out=out))
                    rec["read_us"] = time_graph(g, read_flush, a.reps)
                    rec["write_us"] = time_graph(g, write_flush, a.reps)
                    del g
                    if not p.schedule.direct:
                        # The plan's launches without the combine (its output is then incomplete).
                        decode = launch.launches(p._plan.constants, q, as_cache(cache), p.kv_indptr, p.qo_indptr,
                                                 out, None)[0]
                        g = capture_graph(lambda: launch.run(decode))
                        rec["decode_only_read_us"] = time_graph(g, read_flush, a.reps)
                        del g
                except Exception as exc:  # a config that does not fit is recorded, not fatal
                    rec["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:160]}"
                log.write(json.dumps(rec) + "\n")
                log.flush()
                rows.append(rec)
                print(json.dumps({k: v for k, v in rec.items() if k != "cfg"}), flush=True)
        del case
        torch.cuda.empty_cache()

    print("\nshape      fmt    config           items  read_us  decode_only  write_us  rel_l2")
    for r in rows:
        if "error" in r:
            print(f"{r['shape']:10} {r['fmt']:6} {r['config']:16} ERROR {r['error']}")
            continue
        d = r.get("decode_only_read_us")
        print(f"{r['shape']:10} {r['fmt']:6} {r['config']:16} {r['work_items']:5} {r['read_us']:8.1f} "
              f"{(f'{d:8.1f}' if d else '       -'):>11} {r['write_us']:9.1f}  {r['rel_l2']:.1e}{'' if r['ok'] else ' FAIL'}")


if __name__ == "__main__":
    main()
