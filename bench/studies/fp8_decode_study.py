"""Is the fp8 kernel bound by its conversion instructions? Times the fp8 decode kernel with the
e4m3 -> f16 step done three ways (patched into ``mixmla.kernels.triton.fp8`` before anything
compiles, so run one decoder per process):

- ``cvt``: the shipped decoder, one ``cvt.rn.f16x2.e4m3x2`` per pair of values;
- ``int``: integer bit moves only (a byte permute puts each byte in the high byte of a 16-bit
  half, a shift right by one moves sign/exponent/mantissa into f16's places, and adding the
  shifted sign bit to itself carries it into bit 15): 4 full-rate integer operations per pair,
  exact, but the f16 values are the stored values times 2**-8 (subnormals included), so the
  softmax scale is multiplied by 2**8 and the output checked times 2**8;
- ``none``: a byte permute only (wrong values): the kernel's time with a conversion that costs
  one permute per pair, an upper bound on what any decoder could gain.

Prints GPU time (CUDA-graph replay median after a read flush, us) and the strict check per shape
and config; one JSON line each to OUT/fp8_decode_study.jsonl.

``PYTHONPATH=src python3 bench/studies/fp8_decode_study.py --decoder int [--shapes 256x8192,64x8192]``
"""

import argparse
import dataclasses
import json
import os

import triton.language as tl

from mixmla.kernels.triton import fp8

DECODERS = {
    "cvt": None,
    "int": """
{
.reg .b32 t, s, m, zero;
mov.b32 zero, 0;
prmt.b32 t, $2, zero, 0x1404;
shr.b32 s, t, 1;
and.b32 m, s, 0x40004000;
add.u32 $0, s, m;
prmt.b32 t, $2, zero, 0x3424;
shr.b32 s, t, 1;
and.b32 m, s, 0x40004000;
add.u32 $1, s, m;
}
""",
    "none": """
{
.reg .b32 zero;
mov.b32 zero, 0;
prmt.b32 $0, $2, zero, 0x1404;
prmt.b32 $1, $2, zero, 0x3424;
}
""",
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--decoder", choices=list(DECODERS), default="cvt")
    ap.add_argument("--shapes", default="256x8192,64x8192")
    ap.add_argument("--configs", default="ns1ips3:num_stages=1,items_per_sm=3")
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--out", default=os.environ.get("OUT", "bench/out"))
    a = ap.parse_args()
    if DECODERS[a.decoder] is not None:
        fp8._TO_F16X2 = tl.constexpr(DECODERS[a.decoder])

    import torch

    import mixmla
    from mixmla.check import check_strict
    from mixmla.harness.timing import L2Flusher, capture_graph
    from mixmla.kernels.triton.configs import default_config

    from flush_study import bench_case, shape_list
    from overhead_study import parse_configs, time_graph

    os.makedirs(a.out, exist_ok=True)
    log = open(os.path.join(a.out, "fp8_decode_study.jsonl"), "a")
    read_flush = L2Flusher(mode="read").flush
    factor = 256.0 if a.decoder == "int" else 1.0
    for shape in shape_list(a.shapes):
        case = bench_case(shape)
        q, _, qo_indptr, kv_indptr, _ = case.data
        cache, ref = case.cache("fp8"), case.ref("fp8")
        for name, fields in parse_configs(a.configs):
            cfg = dataclasses.replace(default_config("fp8"), **fields)
            p = mixmla.plan(kv_indptr, qo_indptr, case.num_heads, "fp8", sm_scale=case.sm_scale * factor, config=cfg)
            out = torch.full_like(ref, float("nan"), dtype=torch.bfloat16)
            p.run(q, cache, out=out)
            chk = check_strict(out.double() * factor, ref)
            g = capture_graph(lambda: p.run(q, cache, out=out))
            time_graph(g, read_flush, 20)  # warm
            us = time_graph(g, read_flush, a.reps)
            rec = dict(decoder=a.decoder, shape=shape, config=name, us=us, rel_l2=chk.rel_l2, ok=bool(chk.passed),
                       cfg=dataclasses.asdict(cfg))
            log.write(json.dumps(rec) + "\n")
            print(f"{a.decoder:5} {shape:9} {name:9} {us:8.1f} us  rel L2 {chk.rel_l2:.1e} {'ok' if chk.passed else 'FAIL'}",
                  flush=True)
        del case
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
