"""How far apart are two correct decodes of the same tokens, split differently? (CPU, minutes)

Decode context parallelism merges the ranks' float32 partial results exactly, so its output is the
exact merge of those partials rounded once. Compared with the unsharded one-GPU decode it still
differs by more: the decode kernel rounds each probability to bf16 (f16 for fp8 caches) for the
value product, relative to the running maximum of the tokens its program has seen, so another
split of the tokens rounds every probability differently. This study measures, per shape, format,
world size and interleave, the relative L2 distance between the sharded-and-merged output and the
unsharded one, and each one's distance to the float64 reference, in Triton's interpreter on a CPU,
with the interpreter's float32 -> bf16 cast (truncation) and with it replaced by round-to-nearest-
even, which is what the compiled kernels do on a GPU (``cvt.rn``; tests/test_float32_out.py).

    PYTHONPATH=src TRITON_INTERPRET=1 python3 bench/studies/dcp_split_rounding.py [--rne] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np
import torch


def _round_to_nearest_even_in_the_interpreter() -> None:
    """Replace Triton 3.6's interpreter cast from float32 to bf16 (it drops the low bits) by
    torch's round-to-nearest-even. For this study only."""
    import triton.language as tl
    import triton.runtime.interpreter as ti

    original = ti.InterpreterBuilder.cast_impl

    def cast_impl(self, src, dst_type):
        if src.dtype.scalar == tl.float32 and dst_type.scalar == tl.bfloat16:
            x = torch.from_numpy(np.ascontiguousarray(src.data).astype(np.float32)).to(torch.bfloat16)
            return ti.TensorHandle(x.view(torch.int16).numpy().view(np.uint16), dst_type.scalar)
        return original(self, src, dst_type)

    ti.InterpreterBuilder.cast_impl = cast_impl


def _rel(a, b) -> float:
    a, b = a.double(), b.double()
    return float((a - b).norm() / b.norm())


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rne", action="store_true", help="round float32 -> bf16 to nearest even, as on a GPU")
    p.add_argument("--seeds", type=int, default=6)
    p.add_argument("--out", default=os.environ.get("OUT"))
    args = p.parse_args(argv)
    import mixmla

    if not mixmla.interpreter.active():
        print("needs TRITON_INTERPRET=1 (the kernels run in the interpreter)", file=sys.stderr)
        return 2
    if args.rne:
        _round_to_nearest_even_in_the_interpreter()
    from mixmla.distributed import merge_partials, shard_kv
    from mixmla.inputs import generate_input

    rows = []
    for seed in range(args.seeds):
        for batch, tokens in ((3, 70), (1, 300), (4, 130)):
            q, kv, _, kv_indptr, _ = generate_input(batch, 1, tokens, seed=seed, device="cpu")
            for fmt in ("bf16", "mxfp4"):
                single32 = mixmla.mla_decode(q, kv[fmt], kv_indptr, out=torch.empty(batch, 16, 512))
                single = single32.to(torch.bfloat16)
                bf16_out = mixmla.mla_decode(q, kv[fmt], kv_indptr)
                ref, _ = mixmla.mla_decode_reference(q, kv[fmt], kv_indptr)
                for world, interleave in ((2, 1), (4, 1), (2, 64)):
                    parts, lses = [], []
                    for rank in range(world):
                        local, local_ptr = shard_kv(kv[fmt], kv_indptr, world, rank, interleave)
                        o, lse = mixmla.mla_decode(q, local, local_ptr, out=torch.empty(batch, 16, 512),
                                                   return_lse=True)
                        parts.append(o)
                        lses.append(lse.clone())
                    merged = merge_partials(torch.stack(parts), torch.stack(lses))[0].to(torch.bfloat16)
                    rows.append(dict(rne=args.rne, seed=seed, batch=batch, tokens=tokens, fmt=fmt, world=world,
                                     interleave=interleave, dcp_vs_one=_rel(merged, single),
                                     dcp_vs_ref=_rel(merged, ref), one_vs_ref=_rel(single, ref),
                                     bf16_out_vs_rounded_f32=_rel(bf16_out, single)))
    groups = {}
    for r in rows:
        groups.setdefault((r["fmt"], r["batch"], r["tokens"], r["world"], r["interleave"]), []).append(r)
    print(f"float32 -> bf16 in the kernels: {'round to nearest even (as on a GPU)' if args.rne else 'interpreter (truncation)'}"
          f"; {args.seeds} seeds; max over seeds")
    print(f"{'fmt':<6} {'shape':>8} {'N':>2} {'I':>3}  {'dcp vs 1':>9} {'dcp vs ref':>10} {'1 vs ref':>9}")
    for (fmt, batch, tokens, world, interleave), rs in sorted(groups.items()):
        print(f"{fmt:<6} {batch:>3}x{tokens:<4} {world:>2} {interleave:>3}  {max(r['dcp_vs_one'] for r in rs):9.2e} "
              f"{max(r['dcp_vs_ref'] for r in rs):10.2e} {max(r['one_vs_ref'] for r in rs):9.2e}")
    print(f"max: dcp vs one {max(r['dcp_vs_one'] for r in rows):.2e}, dcp vs ref {max(r['dcp_vs_ref'] for r in rows):.2e}, "
          f"one vs ref {max(r['one_vs_ref'] for r in rows):.2e}; the kernels' bf16 out vs their float32 out rounded "
          f"by torch: {max(r['bf16_out_vs_rounded_f32'] for r in rows):.2e}")
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, f"dcp_split_rounding{'_rne' if args.rne else ''}.jsonl"), "w") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
