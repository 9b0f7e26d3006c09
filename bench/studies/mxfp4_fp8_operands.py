"""Would fp8 tensor-core operands keep MXFP4 decode within the strict bar? An emulation on any machine.

The Hopper kernel decodes MXFP4 to bf16 for both products (docs/PERF.md, "Where the Hopper
kernel's time goes"). E2M1 values are exact in e4m3, and e4m3 products run at twice bf16's rate
with half its operand bytes, but the block scales (per token and 32 columns) and the other operand
(the query for the scores, the softmax weights P for the values) would have to be e4m3 too. This
study computes, in float64 with e4m3 rounding by torch's ``float8_e4m3fn`` cast, the outputs a
kernel of that design would give, and their relative L2 error against the exact reference on the
same MXFP4 cache:

- scores ``S[t, h] = sum_b 2**s[t, b] * sum_{d in b} c[t, d] * q[h, d]``: each block's sum is one
  K=32 e4m3 product (accumulated in float32 here: Hopper's fp8 accumulation is narrower, so this is
  a lower bound of the error), scaled by the block's E8M0 after the product; ``q`` per head scaled
  by a power of two into e4m3's range, as one e4m3 term (``q1``) or a sum of two (``q2``:
  ``q_hi + q_lo``, two N columns per head);
- values ``O[h, d] = sum_t P[t, h] * 2**s[t, b(d)] * c[t, d] / l[h]``: per 64-token tile, head
  and block, ``P * 2**s`` scaled by a power of two into e4m3's range, one term (``p1``) or two
  (``p2``); the softmax itself (max, exp, sum) in float32.
- ``bf16``: the same dataflow with bf16 operands (the query, and P; the cache values exact), which
  is what the shipped kernels round.

``PYTHONPATH=src python bench/studies/mxfp4_fp8_operands.py [--shapes 4x1024,4x8192,32x1024]
[--out DIR]`` prints a table of relative L2 errors per shape and variant (the bar is 1e-2) and
writes DIR/mxfp4_fp8_operands.json when ``--out`` is given.
"""

from __future__ import annotations

import argparse
import json
import os

import torch

from mixmla.formats import MX_BLOCK, MX_SCALES_PER_ROW, VALUE_DIM
from mixmla.formats.mxfp4 import e2m1_decode, unpack_e2m1
from mixmla.inputs import generate_input
from mixmla.reference import default_sm_scale, mla_decode_reference

E4M3_MAX = 448.0
TILE = 64
E4M3 = torch.float8_e4m3fn


def _e4m3(x: torch.Tensor) -> torch.Tensor:
    """float64 values of x rounded to e4m3 (nearest even; |x| <= 448 by construction)."""
    return x.to(E4M3).to(torch.float64)


def _pow2_scale(amax: torch.Tensor) -> torch.Tensor:
    """The power of two that maps ``amax`` to at most e4m3's largest value (1 where amax is 0)."""
    safe = torch.where(amax > 0, amax, torch.ones_like(amax))
    return torch.exp2(torch.floor(torch.log2(E4M3_MAX / safe)))


def _terms(x: torch.Tensor, scale: torch.Tensor, n: int) -> torch.Tensor:
    """x (already scaled by ``scale``) as the sum of ``n`` e4m3 terms, divided back by ``scale``."""
    y = x * scale
    total = torch.zeros_like(y)
    for _ in range(n):
        term = _e4m3(y - total)
        total = total + term
    return total / scale


def _round(x: torch.Tensor, how: str, scale_dims) -> torch.Tensor:
    """``x`` rounded as an operand: 'exact', 'bf16', or 'e4m3xN' (N terms, a power-of-two scale per
    slice reduced over ``scale_dims``)."""
    if how == "exact":
        return x
    if how == "bf16":
        return x.to(torch.bfloat16).to(torch.float64)
    n = int(how[-1])
    scale = _pow2_scale(x.abs().amax(dim=scale_dims, keepdim=True))
    return _terms(x, scale, n)


def decode_request(q: torch.Tensor, codes: torch.Tensor, exps: torch.Tensor, sm_scale: float, q_how: str,
                   p_how: str) -> torch.Tensor:
    """One request's output (H, 512) float64 under the emulated operands. q (H, 576) float64;
    codes (T, 18, 32) E2M1 values as float64 (exact); exps (T, 18) block exponents (int)."""
    H, T = q.shape[0], codes.shape[0]
    # The products accumulate in float32 (the tensor cores'), the exact reference in float64.
    acc = torch.float64 if q_how == "exact" else torch.float32
    qb = _round(q, q_how, (1, )).reshape(H, MX_SCALES_PER_ROW, MX_BLOCK)
    # Per block: sum over its 32 columns, then times 2**s.
    partial = torch.einsum("tbk,hbk->thb", codes.to(acc), qb.to(acc)).double()
    scores = (partial * torch.exp2(exps.double()).unsqueeze(1)).sum(-1) * sm_scale  # (T, H)
    m = scores.max(dim=0).values
    p = torch.exp((scores - m).to(acc)).double()  # softmax weights, each <= 1
    l = p.sum(dim=0)
    vblocks = VALUE_DIM // MX_BLOCK
    out = torch.zeros(H, VALUE_DIM, dtype=torch.float64)
    for t0 in range(0, T, TILE):
        tp = p[t0:t0 + TILE]  # (t, H)
        ts = torch.exp2(exps[t0:t0 + TILE, :vblocks].double())  # (t, 16)
        weighted = tp.unsqueeze(-1) * ts.unsqueeze(1)  # (t, H, 16): P * 2**s per value block
        if p_how.startswith("e4m3"):
            w = _round(weighted, p_how, (0, ))  # a scale per (tile, head, block)
        elif p_how == "bf16":
            w = _round(tp, "bf16", (0, )).unsqueeze(-1) * ts.unsqueeze(1)  # P in bf16, the values exact
        else:
            w = weighted
        c = codes[t0:t0 + TILE, :vblocks]  # (t, 16, 32)
        out += torch.einsum("thb,tbk->hbk", w.to(acc), c.to(acc)).double().reshape(H, VALUE_DIM)
    return out / l.unsqueeze(-1)


VARIANTS = {
    "exact": ("exact", "exact"),
    "bf16": ("bf16", "bf16"),
    "q1 p1": ("e4m3x1", "e4m3x1"),
    "q2 p1": ("e4m3x2", "e4m3x1"),
    "q1 p2": ("e4m3x1", "e4m3x2"),
    "q2 p2": ("e4m3x2", "e4m3x2"),
}


def study(batch: int, kv_len: int, seed: int = 0, num_heads: int = 16) -> dict:
    q, kv, _, kv_indptr, _ = generate_input(batch, 1, kv_len, seed=seed, num_heads=num_heads, device="cpu")
    cache = kv["mxfp4"]
    data, scales = cache if isinstance(cache, tuple) else (cache.data, cache.scales)
    n = data.shape[0]
    codes = e2m1_decode(unpack_e2m1(data.reshape(n, -1))).double().reshape(n, MX_SCALES_PER_ROW, MX_BLOCK)
    exps = scales[:n, :MX_SCALES_PER_ROW].long() - 127
    sm = default_sm_scale()
    ptr = kv_indptr.tolist()
    errors = {}
    exact = [decode_request(q[b].double(), codes[ptr[b]:ptr[b + 1]], exps[ptr[b]:ptr[b + 1]], sm, "exact", "exact")
             for b in range(batch)]
    ref = torch.stack(exact)
    # The emulation's exact form is the library's reference on the same cache.
    want, _ = mla_decode_reference(q, cache, kv_indptr)
    check = float((ref - want.reshape(ref.shape).double()).norm() / want.double().norm())
    assert check < 1e-12, f"the exact emulation differs from mla_decode_reference: {check:.1e}"
    for name, (q_how, p_how) in VARIANTS.items():
        if name == "exact":
            continue
        got = torch.stack([decode_request(q[b].double(), codes[ptr[b]:ptr[b + 1]], exps[ptr[b]:ptr[b + 1]], sm,
                                          q_how, p_how) for b in range(batch)])
        errors[name] = float((got - ref).norm() / ref.norm())
    return {"shape": f"{batch}x{kv_len}", "heads": num_heads, "rel_l2": errors}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", default="4x1024,4x8192,32x1024")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out")
    a = ap.parse_args(argv)
    rows = []
    for s in a.shapes.split(","):
        b, k = (int(x) for x in s.split("x"))
        rows.append(study(b, k, a.seed))
        r = rows[-1]
        print(f"{r['shape']:>8}  " + "  ".join(f"{k} {v:.2e}" for k, v in r["rel_l2"].items()), flush=True)
    if a.out:
        os.makedirs(a.out, exist_ok=True)
        with open(os.path.join(a.out, "mxfp4_fp8_operands.json"), "w") as f:
            json.dump({"rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
