"""An e4m3 key operand for MXFP4 with one exponent per token: the accuracy side, emulated on any machine.

Design step 93 (``mxfp4_fp8_operands.py``) kept each 32-column block's E8M0 scale out of the e4m3
key operand by scaling every block's product after it, and P per value block, which doubles the
value product's N and wastes half of it. This study emulates another placement. Per token ``t``
let ``r(t)`` be the largest of its 18 block exponents; the key operand is

    K'[t, d] = e4m3(c[t, d] * 2**(s[t, b(d)] - r(t)))

(exact while the token's blocks lie within about six binades of its largest; smaller ones lose
bits or flush to zero, which the e4m3 cast here rounds as a kernel's exact conversion would), so
that the scores need one K=576 product and a per-row factor ``2**r(t)`` on the accumulator, and
the values keep the same operand, converted exactly to f16 for the value tile, with ``2**r(t)``
folded into P relative to the tile's largest ``r`` (``P'' = f16(P * 2**(r(t) - R))``, the
accumulator scaled by ``2**R`` per tile). The query is two e4m3 terms (step 93: one term misses
the bar). Everything accumulates in float32, the softmax too; the reference is float64 on the
same cache.

A kernel cannot cheaply find a tile's largest ``r``: it is a reduction across the warpgroup, on
top of the scores' maxima. Design step 103's placement (``two f16``, ``two e4m3``) needs none: it
keeps two maxima per query row, ``m`` of the base-2 scores ``x`` and ``m'`` of ``x + r(t)``, which
the kernel's existing exchange of the tile's maxima carries together, weights the values by
``P'' = 2**(x + r(t) - m')`` (at most 1 whatever the exponents) and scales the output by
``2**(m' - m) / L``. ``two f16``: the query in f16 (as the fp8 kernels stage it) against K'
converted exactly to f16, P'' in f16; ``two e4m3``: the query and P'' as two e4m3 terms each
against K' itself; ``two f16 flush5`` the first with blocks more than ``FLUSH_BELOW`` binades below
their token's largest decoded to zeros, as the variants' arithmetic tables do.

Besides the benchmark's inputs (standard normal, where a token's block exponents span little),
``--spreads B`` multiplies each 32-column block of the bf16 cache by ``2**-u``, u uniform in
``[0, B]`` per block, before quantizing, to show where the flush starts to cost accuracy, and
``--token-spreads B`` whole rows likewise (tokens of very different sizes in one tile).

``PYTHONPATH=src python bench/studies/mxfp4_token_exponent.py [--shapes 4x1024,32x1024]
[--spreads 0,4,8,12] [--token-spreads 0,24] [--out DIR]``: per shape and spread, the relative L2
error of each design in ``HOWS``: the shipped kernels' rounding (bf16 query and P, ``bf16``),
this placement (``tok``), the same with P in bf16 (``tok bf16P``), and step 103's two; and the
share of blocks whose exponent lies more than 5 (all its values stay normal e4m3 up to 5) and
more than 8 binades below its token's largest; writes DIR/mxfp4_token_exponent.json with
``--out``.
"""

from __future__ import annotations

import argparse
import json
import math
import os

import torch

from mixmla.formats import MX_BLOCK, MX_SCALES_PER_ROW, VALUE_DIM, quantize_mxfp4
from mixmla.formats.mxfp4 import e2m1_decode, unpack_e2m1
from mixmla.inputs import generate_input
from mixmla.reference import default_sm_scale, mla_decode_reference

from mxfp4_fp8_operands import TILE, _round

E4M3 = torch.float8_e4m3fn
#: The designs compared (``decode_request``'s ``how``), besides the exact reference.
HOWS = ("bf16", "tok", "tok bf16P", "two f16", "two e4m3", "two f16 flush5")
#: Binades below its token's largest beyond which ``two f16 flush5`` zeroes a block (the arithmetic
#: decode tables of ``hopper_mxe4_variant.py`` are exact up to this, ``mxfp4_e4m3_decoder``).
FLUSH_BELOW = 5


def decode_request(q: torch.Tensor, codes: torch.Tensor, exps: torch.Tensor, sm_scale: float, how: str) -> torch.Tensor:
    """One request's output (H, 512) float64. q (H, 576) float64; codes (T, 18, 32) E2M1 values as
    float64; exps (T, 18) block exponents. how: 'exact', 'bf16' (the shipped rounding: bf16 query
    and P, exact cache values), 'tok' or 'tok bf16P' (this design, P in f16 or bf16), 'two f16' or
    'two e4m3' (``_two_maxima``), 'two f16 flush5' (the first with blocks more than FLUSH_BELOW
    binades below their token's largest decoded to zeros, as the variants' tables do)."""
    H, T = q.shape[0], codes.shape[0]
    acc = torch.float64 if how == "exact" else torch.float32
    e = exps.double()
    if how.startswith(("tok", "two")):
        ref = e.max(dim=1).values  # r(t)
        k = (codes * torch.exp2(e - ref[:, None]).unsqueeze(-1)).to(E4M3).double()  # K'
        if how.endswith("flush5"):  # the variants' arithmetic tables: blocks over 5 binades down are zeros
            k = torch.where((ref[:, None] - e > FLUSH_BELOW).unsqueeze(-1), 0.0, k)
        qk = _f16_query(q) if how.startswith("two f16") else _round(q, "e4m3x2", (1, ))
        scores = torch.einsum("td,hd->th", k.reshape(T, -1).to(acc), qk.to(acc)).double() * torch.exp2(ref)[:, None]
        values = k[:, :VALUE_DIM // MX_BLOCK].reshape(T, VALUE_DIM)  # exact in f16 and bf16 alike
    else:
        kv = (codes * torch.exp2(e).unsqueeze(-1)).reshape(T, -1)
        qk = q if how == "exact" else q.to(torch.bfloat16).double()
        scores = torch.einsum("td,hd->th", kv.to(acc), qk.to(acc)).double()
        values = kv[:, :VALUE_DIM]
    scores = scores * sm_scale
    if how.startswith("two"):
        return _two_maxima(scores, ref, values, how, acc)
    m = scores.max(dim=0).values
    p = torch.exp((scores - m).to(acc)).double()
    l = p.sum(dim=0)
    out = torch.zeros(H, VALUE_DIM, dtype=torch.float64)
    for t0 in range(0, T, TILE):
        tp, tv = p[t0:t0 + TILE], values[t0:t0 + TILE]
        if how.startswith("tok"):
            r = ref[t0:t0 + TILE]
            top = r.max()
            w = tp * torch.exp2(r - top)[:, None]
            w = w.to(torch.bfloat16 if how.endswith("bf16P") else torch.float16).double()
            out += torch.einsum("th,td->hd", w.to(acc), tv.to(acc)).double() * torch.exp2(top)
        else:
            w = tp if how == "exact" else tp.to(torch.bfloat16).double()
            out += torch.einsum("th,td->hd", w.to(acc), tv.to(acc)).double()
    return out / l[:, None]


def _f16_query(q: torch.Tensor) -> torch.Tensor:
    """q (H, 576) float64 as the fp8 kernels stage it: each row times the power of two that puts
    its largest magnitude in [2**14, 2**15), rounded to f16, divided back."""
    amax = q.abs().amax(dim=1, keepdim=True)
    scale = torch.exp2(14 - torch.floor(torch.log2(torch.where(amax > 0, amax, torch.ones_like(amax)))))
    return (q * scale).to(torch.float16).double() / scale


#: The fixed power of two P'' (at most 1) is scaled by before its two e4m3 terms: 1 lands on 256,
#: below e4m3's largest (448), and weights down to about 2**-17 keep a bit.
P_SCALE = 2.0**8


def _two_maxima(scores: torch.Tensor, ref: torch.Tensor, values: torch.Tensor, how: str, acc) -> torch.Tensor:
    """The softmax and value product of the kernel design with two maxima per query row: ``m`` of
    the base-2 scores ``x`` (the normalizer's ``L = sum 2**(x - m)``) and ``m'`` of ``x + r(t)``,
    so the value product's weight ``P'' = 2**(x + r(t) - m')`` is at most 1 whatever the tokens'
    exponents, and the output is ``2**(m' - m) * sum P'' K' / L`` (K' the e4m3 value operand). No
    per-tile reduction of ``r`` is needed: the existing maximum's exchange carries both. ``how``:
    'two f16' (P'' in f16, the f16 value operand) or 'two e4m3' (P'' as two e4m3 terms of
    ``P'' * P_SCALE``, the e4m3 value operand). Global maxima here: an online kernel's running
    ones are at most these, which only makes its weights larger (better resolved)."""
    x = scores / math.log(2.0)
    m = x.max(dim=0).values
    xr = x + ref[:, None]
    m2 = xr.max(dim=0).values
    l = torch.exp2((x - m).to(acc)).double().sum(dim=0)
    w = torch.exp2((xr - m2).to(acc)).double()
    if how.startswith("two f16"):
        w = w.to(torch.float16).double()
    else:
        y = w * P_SCALE
        hi = y.to(E4M3).double()
        w = (hi + (y - hi).to(E4M3).double()) / P_SCALE
    out = torch.zeros(scores.shape[1], VALUE_DIM, dtype=torch.float64)
    for t0 in range(0, scores.shape[0], TILE):
        out += torch.einsum("th,td->hd", w[t0:t0 + TILE].to(acc), values[t0:t0 + TILE].to(acc)).double()
    return out * torch.exp2(m2 - m)[:, None] / l[:, None]


def study(batch: int, kv_len: int, spread: float, seed: int = 0, token_spread: float = 0.0) -> dict:
    q, kv, _, kv_indptr, _ = generate_input(batch, 1, kv_len, seed=seed, device="cpu")
    x = kv["bf16"].reshape(-1, MX_SCALES_PER_ROW, MX_BLOCK).float()
    gen = torch.Generator().manual_seed(seed + 1)
    if spread:
        x = x * torch.exp2(-spread * torch.rand(x.shape[:2], generator=gen)).unsqueeze(-1)
    if token_spread:
        x = x * torch.exp2(-token_spread * torch.rand(x.shape[0], generator=gen))[:, None, None]
    cache = quantize_mxfp4(x.reshape(-1, MX_SCALES_PER_ROW * MX_BLOCK))
    n = cache.data.shape[0]
    codes = e2m1_decode(unpack_e2m1(cache.data.reshape(n, -1))).double().reshape(n, MX_SCALES_PER_ROW, MX_BLOCK)
    exps = cache.scales[:n, :MX_SCALES_PER_ROW].long() - 127
    below = exps.max(dim=1, keepdim=True).values - exps
    sm = default_sm_scale()
    ptr = kv_indptr.tolist()

    def run(how):
        return torch.stack([decode_request(q[b].double(), codes[ptr[b]:ptr[b + 1]], exps[ptr[b]:ptr[b + 1]], sm, how)
                            for b in range(batch)])

    exact = run("exact")
    want, _ = mla_decode_reference(q, cache, kv_indptr)
    check = float((exact - want.reshape(exact.shape).double()).norm() / want.double().norm())
    assert check < 1e-12, f"the exact emulation differs from mla_decode_reference: {check:.1e}"
    errors = {how: float((run(how) - exact).norm() / exact.norm()) for how in HOWS}
    return {"shape": f"{batch}x{kv_len}", "spread": spread, "token_spread": token_spread, "rel_l2": errors,
            "blocks_below_5": float((below > 5).double().mean()), "blocks_below_8": float((below > 8).double().mean())}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", default="4x1024,32x1024")
    ap.add_argument("--spreads", default="0,4,8,12")
    ap.add_argument("--token-spreads", default="0", help="whole rows times 2**-u, u uniform in [0, B]")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out")
    a = ap.parse_args(argv)
    rows = []
    print(f"{'shape':>8} {'spread/tok':>9}  " + " ".join(f"{h:>9}" for h in HOWS) + f"  {'>5 below':>8} {'>8 below':>8}")
    for s in a.shapes.split(","):
        b, k = (int(x) for x in s.split("x"))
        for spread, tspread in ((float(x), float(y)) for x in a.spreads.split(",") for y in a.token_spreads.split(",")):
            r = study(b, k, spread, a.seed, tspread)
            rows.append(r)
            e = r["rel_l2"]
            print(f"{r['shape']:>8} {spread:>4g}/{tspread:<4g}  " + " ".join(f"{e[h]:>9.2e}" for h in HOWS)
                  + f"  {r['blocks_below_5']:>8.4f} {r['blocks_below_8']:>8.4f}", flush=True)
    if a.out:
        os.makedirs(a.out, exist_ok=True)
        with open(os.path.join(a.out, "mxfp4_token_exponent.json"), "w") as f:
            json.dump({"rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
