"""The accuracy study: what each cache layout does to the attention output, measured exactly.

Method (per case): draw a float32 cache ``X`` (Gaussian, or :func:`mixmla.inputs.realistic_cache`
with outlier channels and larger rope dims) and a standard-normal bf16 query; round ``X`` to
bf16 and quantize that into every layout; decode each layout exactly to float64 and run the
float64 reference (:func:`mixmla.mla_decode_reference`) on it. The errors are those of the
*format*: no kernel runs. Each layout's output and log-sum-exp are compared with two references:
the same reference on the bf16 cache (what a user who would otherwise keep bf16 loses), and on
``X`` itself (the exact result; bf16 then has its own small error).

All inputs are drawn on the CPU from per-case seeds, so the inputs of a run do not depend on the
device it computes on.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass

import torch

from ..formats import HEAD_DIM, MX_SCALES_PER_ROW, VALUE_DIM
from ..inputs import realistic_cache
from ..reference import ExactCache, mla_decode_reference
from .layouts import LAYOUTS, bytes_per_token, decode

CACHE_KINDS = ("gaussian", "outliers")


@dataclass(frozen=True)
class Case:
    """One measured problem: ``batch`` requests of ``kv_len`` cached tokens and one query token
    each, ``num_heads`` query heads, a ``cache`` kind of :data:`CACHE_KINDS`, and its seed.
    Cases that differ only in their seed are repeats of the same problem (``label``)."""

    cache: str
    batch: int
    kv_len: int
    num_heads: int
    seed: int

    @property
    def label(self) -> str:
        return f"{self.cache} kv{self.kv_len} h{self.num_heads}"


def make_cases(contexts: list[tuple[int, int]], heads: list[int], base_seed: int, repeats: int = 1) -> list[Case]:
    """Every cache kind x context x head count x repeat. contexts: (kv_len, batch) pairs. Case
    ``i`` (in that order) gets seed ``base_seed + 10 * i``; its cache uses that seed and the next
    one, its query the one after (see :func:`case_inputs`), so no two cases share a stream."""
    cases = []
    for cache in CACHE_KINDS:
        for kv_len, batch in contexts:
            for num_heads in heads:
                for _ in range(repeats):
                    cases.append(Case(cache, batch, kv_len, num_heads, base_seed + 10 * len(cases)))
    return cases


#: The default study: short, medium and long contexts (the batch is chosen so that every case
#: holds at least 8192 cached tokens), 16 and 128 heads, both cache kinds, each drawn 3 times.
DEFAULT_CONTEXTS = [(256, 32), (4096, 4), (32768, 1)]
DEFAULT_HEADS = [16, 128]
DEFAULT_REPEATS = 3
DEFAULT_SEED = 1500
#: ``--quick``: one small context, for tests and a first look.
QUICK_CONTEXTS = [(64, 2)]
QUICK_HEADS = [16]
QUICK_REPEATS = 1


def case_inputs(case: Case) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """CPU inputs of a case: the float32 cache X (batch*kv_len, 576), q (batch, H, 576) bf16
    standard normal (from ``seed + 2``), kv_indptr (batch+1,) int32."""
    tokens = case.batch * case.kv_len
    if case.cache == "gaussian":
        x = torch.randn(tokens, HEAD_DIM, generator=torch.Generator().manual_seed(case.seed + 1))
    elif case.cache == "outliers":
        x = realistic_cache(tokens, case.seed, device="cpu")[0].reshape(tokens, HEAD_DIM)
    else:
        raise ValueError(f"unknown cache kind {case.cache!r}; expected one of {CACHE_KINDS}")
    gen = torch.Generator().manual_seed(case.seed + 2)
    q = torch.randn(case.batch, case.num_heads, HEAD_DIM, generator=gen).to(torch.bfloat16)
    kv_indptr = torch.arange(0, tokens + 1, case.kv_len, dtype=torch.int32)
    return x, q, kv_indptr


def _rel_l2(a: torch.Tensor, ref: torch.Tensor) -> float:
    return float(torch.linalg.vector_norm(a - ref) / torch.linalg.vector_norm(ref))


def output_errors(out: torch.Tensor, lse: torch.Tensor, ref_out: torch.Tensor, ref_lse: torch.Tensor) -> dict:
    """Errors of an attention result against a reference (all float64 tensors; out (T, H, 512),
    lse (T, H)). Keys: ``out_rel_l2`` (||out - ref|| / ||ref||), ``out_max`` (max |out - ref| over
    max |ref|), ``out_worst_row_rel_l2`` (the largest relative L2 error of one (token, head) row),
    ``lse_rms`` and ``lse_max`` (RMS and max of |lse - ref lse|, natural log: an error d is a factor
    e**d on the softmax normalizer)."""
    diff = out - ref_out
    rows = torch.linalg.vector_norm(diff, dim=-1) / torch.linalg.vector_norm(ref_out, dim=-1)
    dlse = (lse - ref_lse).abs()
    return {
        "out_rel_l2": _rel_l2(out, ref_out),
        "out_max": float(diff.abs().max() / ref_out.abs().max()),
        "out_worst_row_rel_l2": float(rows.max()),
        "lse_rms": float(dlse.square().mean().sqrt()),
        "lse_max": float(dlse.max()),
    }


def cache_errors(decoded: torch.Tensor, x: torch.Tensor) -> dict:
    """Errors of a decoded cache (N, 576) float64 against the float cache x (N, 576): relative L2
    over all dims (``cache_rel_l2``), the latent dims 0..511 (``latent_rel_l2``) and the rope dims
    (``rope_rel_l2``); ``cache_max`` (max |decoded - x| over max |x|); ``cache_gain``
    (<decoded, x> / <x, x>: 1 when the errors are unbiased, below 1 when values shrink)."""
    x = x.double()
    diff = decoded - x  # the caches are large: each pass over them counts, so sums are shared
    err_sq = diff.square().sum(dim=0)  # (576,)
    x_sq = x.square().sum(dim=0)
    lat, rope = slice(0, VALUE_DIM), slice(VALUE_DIM, HEAD_DIM)
    return {
        "cache_rel_l2": float((err_sq.sum() / x_sq.sum()).sqrt()),
        "latent_rel_l2": float((err_sq[lat].sum() / x_sq[lat].sum()).sqrt()),
        "rope_rel_l2": float((err_sq[rope].sum() / x_sq[rope].sum()).sqrt()),
        "cache_max": float(diff.abs().max() / x.abs().max()),
        "cache_gain": float(1 + (diff * x).sum() / x_sq.sum()),
    }


def mse_scale_stats(default, mse) -> dict:
    """How the squared-error MXFP4 rule's scales differ from the producer's, given both caches
    (``Mxfp4Cache`` of the same values): the fraction of 32-value blocks whose exponent changed,
    and the fractions that went up and down."""
    n = default.num_tokens
    delta = mse.scales[:n, :MX_SCALES_PER_ROW].int() - default.scales[:n, :MX_SCALES_PER_ROW].int()
    return {"blocks": delta.numel(), "changed_fraction": float((delta != 0).float().mean()),
            "raised_fraction": float((delta > 0).float().mean()),
            "lowered_fraction": float((delta < 0).float().mean())}


def run_case(case: Case, layouts: list[str], device: torch.device) -> dict:
    """Measure one case over ``layouts`` (names of :data:`LAYOUTS`; bf16 is always computed, it is
    a reference). Returns ``{"case": Case fields + label, "seconds", "mse_scales": mse_scale_stats
    or None, "layouts": {name: {"bytes_per_token", "vs_bf16": output_errors, "vs_exact":
    output_errors, **cache_errors}}}``."""
    start = time.perf_counter()
    x, q, kv_indptr = case_inputs(case)
    x_bf16 = x.to(torch.bfloat16)
    q, kv_indptr = q.to(device), kv_indptr.to(device)
    exact_out, exact_lse = mla_decode_reference(q, ExactCache(x.to(device)), kv_indptr)
    results, stored_by_name, bf16_ref = {}, {}, None
    for name in ["bf16"] + [n for n in layouts if n != "bf16"]:
        stored = LAYOUTS[name].encode(x_bf16.to(device))
        decoded = decode(stored)
        out, lse = mla_decode_reference(q, ExactCache(decoded), kv_indptr)
        if name == "bf16":
            bf16_ref = (out, lse)
        if name not in layouts:
            continue
        stored_by_name[name] = stored
        results[name] = {"bytes_per_token": bytes_per_token(stored),
                         "vs_bf16": output_errors(out, lse, *bf16_ref),
                         "vs_exact": output_errors(out, lse, exact_out, exact_lse),
                         **cache_errors(decoded.cpu(), x)}
    mse = None
    if "mxfp4" in stored_by_name and "mxfp4-mse" in stored_by_name:
        mse = mse_scale_stats(stored_by_name["mxfp4"], stored_by_name["mxfp4-mse"])
    return {"case": asdict(case) | {"label": case.label}, "seconds": time.perf_counter() - start,
            "mse_scales": mse, "layouts": results}


def run_study(cases: list[Case], layouts: list[str], device, progress=None) -> list[dict]:
    """:func:`run_case` for every case, in order. progress: called as ``progress(i, case)``
    before case ``i`` (for a progress line), or None."""
    unknown = [n for n in layouts if n not in LAYOUTS]
    if unknown:
        raise ValueError(f"unknown layouts {unknown}; choose from {', '.join(LAYOUTS)}")
    device = torch.device(device)
    out = []
    for i, case in enumerate(cases):
        if progress is not None:
            progress(i, case)
        out.append(run_case(case, layouts, device))
    return out
