"""Decode context parallelism (``mixmla.distributed``) without GPUs: shard_kv and the merge in this
process, dcp_decode in groups of 2 and 4 gloo processes on CPU (``dcp_workers``), the kernels in
Triton's interpreter.

What dcp_decode is held to:

- **The merge adds only the final rounding.** Its output is within one bf16 step (and float32's
  rounding of the terms, ``merge_error_bound``) of the float64 merge (``merge_reference``) of
  the ranks' float32 partial results, which the test recomputes with ``mla_decode`` on each
  shard; so within one bf16 rounding, relative L2 <= 2e-3; and its lse within 1e-5 of that
  merge's.
- **Against the unsharded single-process decode**: the lse within 1e-5, the same empty requests,
  and the strict check against the float64 reference. The outputs themselves are not compared
  at 2e-3: the decode kernel rounds each probability to bf16 for the value product, relative to
  the running maximum of the tokens it has seen, so two different splits of the same tokens
  (shards vs. the unsharded split) round differently. Both are equally close to float64, but they
  differ from each other by more than one bf16 rounding, also with the GPU's rounding (emulated in
  the interpreter: docs/ARCHITECTURE.md has the measurement, bench/studies/dcp_split_rounding.py
  the method).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.distributed as dist

import mixmla
from mixmla.check import check_strict
from mixmla.distributed import (SCHEDULES, KVShard, dcp_decode, dcp_plan, global_lse, local_lengths,
                                merge_partials, rank_weights, shard_kv)
from mixmla.distributed.merge import merge_error_bound, merge_reference
from mixmla.formats import Bf16Cache, Fp8Cache, Mxfp4Cache, as_cache, dequantize
from mixmla.inputs import generate_ragged

from conftest import FORMATS
from dcp_workers import GlooPool, case_inputs

#: These run the kernels on CPU tensors: only in Triton's interpreter (on a GPU machine, run them
#: with TRITON_INTERPRET=1; ``mixmla bench --dcp`` is the GPU form of the same checks).
needs_interpreter = pytest.mark.skipif(not mixmla.interpreter.active(),
                                       reason="runs the kernels on CPU tensors: needs TRITON_INTERPRET=1")

#: Ragged lengths: an empty request, requests shorter than the world size (some ranks hold none of
#: their tokens), and requests long enough that the local decode splits them into chunks.
KV_LENS = [0, 1, 3, 150, 200]
#: Every rank of 4 but the first two, and every rank of 2 but the first, holds no token at all.
SHORT_LENS = [2, 1, 0] + [0]
REL_L2_TOL = 2e-3  #: about one bf16 rounding (2**-9), relative
#: lse is a logarithm: an error d in lse is a relative error d in exp(lse), the softmax's
#: normalizer. So "1e-5 relative" is |d| <= 1e-5, which is at least as strict as 1e-5 * |lse| for
#: |lse| >= 1; relative to lse itself it would be ill-posed where lse crosses 0 (a request of one
#: token has lse = its one score).
LSE_TOL = 1e-5


def _case(fmt, interleave, schedule, kv_lens=KV_LENS, heads=16, seed=11, form=None):
    # The caches travel in both forms: containers for fp8, the benchmark's tensors/tuples otherwise.
    return dict(kv_lens=list(kv_lens), fmt=fmt, interleave=interleave, schedule=schedule, heads=heads, seed=seed,
                form=form or ("container" if fmt == "fp8" else "benchmark"))


_SINGLE = {}


def _single(case):
    """Single-process mla_decode on the unsharded cache: (float32 out, lse) and the float64
    reference; computed once per inputs (the schedules and interleaves of a case share them)."""
    key = (case["fmt"], tuple(case["kv_lens"]), case["heads"], case["seed"], case["form"])
    if key not in _SINGLE:
        _SINGLE[key] = _compute_single(case)
    return _SINGLE[key]


def _compute_single(case):
    q, cache, kv_indptr = case_inputs(case)
    out32 = torch.empty(q.shape[0], q.shape[1], 512)
    out32, lse = mixmla.mla_decode(q, cache, kv_indptr, out=out32, return_lse=True)
    ref, _ = mixmla.mla_decode_reference(q, cache, kv_indptr)
    return out32, lse.clone(), ref


def _rel_l2(a, b):
    a, b = a.double(), b.double()
    return float((a - b).norm() / b.norm())


def _assert_exact_merge(case, out, lse, parts, part_lses):
    """out, lse: dcp's; parts (N, T, H, 512) float32 and part_lses (N, T, H): the ranks' partials."""
    ref_out, ref_lse = merge_reference(parts, part_lses)
    err = (out.double() - ref_out).abs()
    assert bool((err <= merge_error_bound(ref_out, parts, part_lses, ref_lse)).all()), case
    assert _rel_l2(out, ref_out) <= REL_L2_TOL, case
    seen = torch.isfinite(ref_lse)
    assert torch.equal(torch.isfinite(lse), seen) and float((lse - ref_lse)[seen].abs().max()) <= LSE_TOL, case


def _assert_matches_single(case, out, lse):
    out32, lse1, ref = _single(case)
    assert out.dtype == torch.bfloat16 and out.shape == out32.shape and lse.dtype == torch.float32
    empty = torch.isneginf(lse1)
    assert torch.equal(torch.isneginf(lse), empty), case  # the empty request, and nothing else
    assert float((lse - lse1)[~empty].abs().max()) <= LSE_TOL, case
    assert bool((out[empty] == 0).all()), case
    verdict = check_strict(out, ref)
    assert verdict.passed, verdict.message


def _same_bytes(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a.view(torch.uint8), b.view(torch.uint8)) \
        if a.dtype != torch.bfloat16 else torch.equal(a.view(torch.int16), b.view(torch.int16))


def _assert_same_bytes_on_every_rank(per_rank):
    for r, results in enumerate(per_rank[1:], 1):
        for k, ((out0, lse0, *_), (out, lse, *_)) in enumerate(zip(per_rank[0], results)):
            assert torch.equal(out.view(torch.int16), out0.view(torch.int16)), f"case {k}: rank {r} out differs"
            assert torch.equal(lse.view(torch.int32), lse0.view(torch.int32)), f"case {k}: rank {r} lse differs"


# ---------------------------------------------------------------------------------------------
# shard_kv (one process)


def _forms(fmt, kv):
    """The cache of ``fmt`` in every form shard_kv accepts."""
    raw = kv[fmt]
    c = as_cache(raw)
    forms = {"container": c, "benchmark": raw}
    if fmt == "bf16":
        forms["2-d tensor"] = raw.reshape(-1, 576)
    if fmt == "mxfp4" and hasattr(torch, "float4_e2m1fn_x2") and hasattr(torch, "float8_e8m0fnu"):
        forms["fp4/e8m0 views"] = (raw[0].view(torch.float4_e2m1fn_x2), raw[1].view(torch.float8_e8m0fnu))
        rows, cols = c.scales.shape
        padded = torch.zeros(rows + 3, cols + 8, dtype=torch.uint8)
        padded[:rows, :cols] = c.scales
        forms["padded scales"] = (raw[0], padded[:, :cols])  # a row stride of its own
    return forms


def _same_form(a, b) -> bool:
    if isinstance(b, (Bf16Cache, Fp8Cache, Mxfp4Cache)):
        return type(a) is type(b)
    if isinstance(b, torch.Tensor):
        return isinstance(a, torch.Tensor) and a.dtype == b.dtype and a.dim() == b.dim()
    return type(a) is type(b) and all(x.dtype == y.dtype and x.dim() == y.dim() for x, y in zip(a, b))


@pytest.mark.parametrize("fmt", FORMATS)
def test_shard_kv_deals_each_token_to_its_rank_in_order(fmt):
    """Every form of every format, world sizes 1, 2, 4 and interleaves 1, 3, 64: request b's tokens on
    rank r are exactly its tokens i with (i // I) % N == r, in order (compared by value after
    dequantization, so the scale rows of MXFP4 and fp8's tensor scale are checked too); the form
    given is the form returned; the indptr keeps its dtype."""
    kv_lens = [0, 1, 3, 70, 130, 5]
    _, kv, _, kv_indptr, _ = generate_ragged(len(kv_lens), 1, 0, seed=5, device="cpu", kvseqlens=kv_lens)
    full = dequantize(kv[fmt])
    starts = np.concatenate([[0], np.cumsum(kv_lens)])
    for name, cache in _forms(fmt, kv).items():
        for world, interleave in ((1, 1), (2, 3), (4, 1), (4, 64)):
            seen = np.zeros(sum(kv_lens), dtype=np.int64)
            for rank in range(world):
                shard = shard_kv(cache, kv_indptr.to(torch.int64), world, rank, interleave)
                assert isinstance(shard, KVShard) and _same_form(shard.cache, cache), name
                assert (shard.rank, shard.world_size, shard.interleave, shard.kv_lens) == \
                    (rank, world, interleave, tuple(kv_lens))
                local_cache, local_ptr = shard  # unpacks as (cache, kv_indptr)
                assert local_ptr.dtype == torch.int64
                lens = np.diff(local_ptr.numpy())
                assert lens.tolist() == local_lengths(kv_lens, world, rank, interleave).tolist()
                got = dequantize(local_cache)
                assert got.shape[0] == int(local_ptr[-1])
                for b, n in enumerate(kv_lens):
                    mine = [i for i in range(n) if (i // interleave) % world == rank]
                    rows = starts[b] + np.array(mine, dtype=np.int64)
                    assert torch.equal(got[int(local_ptr[b]):int(local_ptr[b + 1])], full[rows]), \
                        (name, world, interleave, rank, b)
                    seen[rows] += 1
            assert (seen == 1).all()  # each token on exactly one rank


def test_shard_kv_keeps_the_fp8_tensor_scale_and_drops_rows_past_the_indptr():
    _, kv, _, kv_indptr, _ = generate_ragged(2, 1, 0, seed=6, device="cpu", kvseqlens=[40, 9])
    data, scale = kv["fp8"]
    extra = torch.cat([data, data[:5]])  # rows that no request refers to
    shard = shard_kv((extra, scale), kv_indptr, 2, 1)
    assert shard.cache[1] is scale and shard.cache[0].shape[0] == 24 == int(shard.kv_indptr[-1])


def test_local_lengths_of_all_ranks_add_up():
    rng = np.random.default_rng(0)
    lens = rng.integers(0, 3000, size=50)
    for world in (1, 2, 3, 4, 8):
        for interleave in (1, 7, 64):
            parts = np.stack([local_lengths(lens, world, r, interleave) for r in range(world)])
            assert (parts.sum(0) == lens).all()
            assert (np.diff(parts, axis=0) <= 0).all() and (parts[0] - parts[-1] <= interleave).all()


@pytest.mark.parametrize("bad, exc, pattern", [
    (dict(world_size=0), ValueError, r"world_size must be >= 1"),
    (dict(world_size=2.0), TypeError, r"world_size must be an int"),
    (dict(rank=2), ValueError, r"rank must be in \[0, 2\)"),
    (dict(rank=-1), ValueError, r"rank must be in \[0, 2\)"),
    (dict(rank=True), TypeError, r"rank must be an int"),
    (dict(interleave=0), ValueError, r"interleave must be >= 1"),
    (dict(kv_indptr=torch.tensor([0, 4, 60], dtype=torch.int32)), ValueError, r"kv_indptr ends at 60"),
    (dict(kv_indptr=torch.tensor([0, 4.0])), TypeError, r"kv_indptr.*int32"),
    (dict(cache=torch.zeros(8, 576)), TypeError, r"cache.*bfloat16"),
])
def test_shard_kv_rejects(bad, exc, pattern):
    _, kv, _, kv_indptr, _ = generate_ragged(2, 1, 0, seed=6, device="cpu", kvseqlens=[4, 9])
    args = dict(cache=kv["bf16"], kv_indptr=kv_indptr, world_size=2, rank=0, interleave=1)
    args.update(bad)
    with pytest.raises(exc, match=pattern):
        shard_kv(**args)


# ---------------------------------------------------------------------------------------------
# The merge (one process)


def test_merge_weighs_empty_ranks_zero_and_keeps_rows_no_rank_saw_empty():
    """Rank 1 saw nothing of row 0 and everything of row 1 is on rank 1; row 2 no rank saw."""
    gen = torch.Generator().manual_seed(1)
    parts = torch.randn(3, 3, 4, 512, generator=gen)
    lse = torch.randn(3, 3, 4, generator=gen) * 3
    parts[:, 2], lse[:, 2] = 0.0, -math.inf
    parts[1, 0], lse[1, 0] = 0.0, -math.inf
    parts[[0, 2], 1], lse[[0, 2], 1] = 0.0, -math.inf
    out, g = merge_partials(parts, lse)
    assert not torch.isnan(out).any() and not torch.isnan(g).any()
    w = rank_weights(lse, g)
    assert bool((w[1, 0] == 0).all()) and bool((w[:, 2] == 0).all())
    assert torch.allclose(w[:, :2].sum(0), torch.ones(2, 4), rtol=0, atol=1e-6)
    assert torch.equal(out[1], parts[1, 1]) and torch.equal(g[1], lse[1, 1])  # weight exactly 1
    assert bool((out[2] == 0).all()) and bool(torch.isneginf(g[2]).all())
    # Row 0 against float64.
    lse64 = torch.logsumexp(lse[[0, 2], 0].double(), 0)
    expect = (torch.exp(lse[[0, 2], 0].double() - lse64)[..., None] * parts[[0, 2], 0].double()).sum(0)
    assert torch.allclose(g[0].double(), lse64, rtol=1e-6) and torch.allclose(out[0].double(), expect, atol=1e-5)


def test_the_merge_bound_tells_float32_partials_from_bf16_ones():
    """merge_error_bound holds for the float32 merge of float32 partials, with room to spare, and
    fails when the partials were rounded to bf16 first (what a merge of bf16 outputs would do)."""
    gen = torch.Generator().manual_seed(3)
    parts = torch.randn(4, 8, 16, 512, generator=gen) * 0.1
    lse = torch.randn(4, 8, 16, generator=gen) * 2 + 8
    ref, ref_lse = merge_reference(parts, lse)
    bound = merge_error_bound(ref, parts, lse, ref_lse)
    good, _ = merge_partials(parts, lse)
    bad, _ = merge_partials(parts.to(torch.bfloat16).float(), lse)
    assert float(((good.to(torch.bfloat16).double() - ref).abs() / bound).max()) <= 0.5 + 1e-3
    assert float(((bad.to(torch.bfloat16).double() - ref).abs() / bound).max()) > 10


def test_global_lse_is_the_log_sum_exp():
    lse = torch.randn(4, 100, generator=torch.Generator().manual_seed(2)) * 10
    assert torch.allclose(global_lse(lse).double(), torch.logsumexp(lse.double(), 0), rtol=1e-6)


@needs_interpreter
@pytest.mark.parametrize("fmt", [pytest.param(f, marks=() if f == "mxfp4" else pytest.mark.slow) for f in FORMATS])
def test_merged_shards_match_the_unsharded_decode(fmt):
    """The merge alone, in one process: mla_decode's float32 partials of 4 shards (interleave 1:
    every request spread thin), merged: the exact merge but for the final rounding, and the
    unsharded decode's lse and accuracy."""
    case = _case(fmt, 1, "allgather")
    q, cache, kv_indptr = case_inputs(case)
    parts, lses = [], []
    for rank in range(4):
        local, local_ptr = shard_kv(cache, kv_indptr, 4, rank)
        o, lse = mixmla.mla_decode(q, local, local_ptr, out=torch.empty(q.shape[0], 16, 512), return_lse=True)
        parts.append(o)
        lses.append(lse.clone())
    out, lse = merge_partials(torch.stack(parts), torch.stack(lses))
    _assert_exact_merge(case, out.to(torch.bfloat16), lse, torch.stack(parts), torch.stack(lses))
    _assert_matches_single(case, out.to(torch.bfloat16), lse)


# ---------------------------------------------------------------------------------------------
# A group of one, in this process


@pytest.fixture
def world_of_one():
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


@needs_interpreter
@pytest.mark.parametrize("fmt", [pytest.param(f, marks=() if f == "fp8" else pytest.mark.slow) for f in FORMATS])
def test_a_group_of_one_gives_the_bits_of_mla_decode(world_of_one, fmt):
    """With one rank the merge weighs the one partial by exp(0) = 1, so the result is mla_decode's
    float32 output rounded to bf16 once, bit for bit, with both schedules; the plan form agrees."""
    case = _case(fmt, 1, "allgather", kv_lens=[0, 3, 100])
    q, cache, kv_indptr = case_inputs(case)
    out32, lse1, _ = _single(case)
    for schedule in SCHEDULES:
        out, lse = dcp_decode(q, shard_kv(cache, kv_indptr, 1, 0), schedule=schedule, return_lse=True)
        assert torch.equal(out.view(torch.int16), out32.to(torch.bfloat16).view(torch.int16)), schedule
        assert torch.equal(lse.view(torch.int32), lse1.view(torch.int32)), schedule
        p = dcp_plan(kv_indptr, None, 16, fmt, schedule=schedule)
        again = p.run(q, cache)
        assert again is p.out and torch.equal(again.view(torch.int16), out.view(torch.int16))


def test_without_torch_distributed_it_says_so():
    assert not dist.is_initialized()
    q, cache, kv_indptr = case_inputs(_case("bf16", 1, "allgather"))
    with pytest.raises(RuntimeError, match="torch.distributed initialized"):
        dcp_decode(q, cache, kv_indptr)


def test_reduce_scatter_needs_whole_heads_per_rank():
    from mixmla.distributed.dcp import _check_schedule

    _check_schedule("reduce_scatter", 16, 4)
    with pytest.raises(ValueError, match="H divisible by the group size"):
        _check_schedule("reduce_scatter", 16, 3)
    _check_schedule("allgather", 16, 3)


# ---------------------------------------------------------------------------------------------
# Groups of 2 and 4 processes


@pytest.fixture(scope="module")
def pools():
    made = {}

    def get(world_size):
        if world_size not in made:
            made[world_size] = GlooPool(world_size)
        return made[world_size]

    yield get
    for pool in made.values():
        pool.close()


def _run_and_check(pool, cases):
    per_rank = pool.run("dcp_cases", cases)
    _assert_same_bytes_on_every_rank(per_rank)
    for k, case in enumerate(cases):
        out, lse = per_rank[0][k][:2]
        parts = torch.stack([results[k][2] for results in per_rank])
        part_lses = torch.stack([results[k][3] for results in per_rank])
        _assert_exact_merge(case, out, lse, parts, part_lses)
        _assert_matches_single(case, out, lse)
    _both_schedules_agree(cases, [r[:2] for r in per_rank[0]])


def _both_schedules_agree(cases, results):
    by_key = {}
    for case, (out, lse) in zip(cases, results):
        key = (case["fmt"], case["interleave"], tuple(case["kv_lens"]), case["heads"])
        by_key.setdefault(key, []).append((out, lse))
    for key, pair in by_key.items():
        if len(pair) == 2:
            (a, la), (b, lb) = pair
            assert torch.equal(a.view(torch.int16), b.view(torch.int16)), key
            assert torch.equal(la.view(torch.int32), lb.view(torch.int32)), key


@needs_interpreter
@pytest.mark.parametrize("world_size", [2, 4])
def test_dcp_decode_matches_the_unsharded_decode(pools, world_size):
    """Every format with interleave 1 (all-gather) and 64 (reduce-scatter), on a ragged batch with
    an empty request and requests shorter than the world size; a batch where some ranks hold no
    token at all; one format with both schedules at interleave 1. Every rank returns the same
    bytes, both schedules the same bytes, and the result matches the single-process decode and
    passes the strict check against float64. (test_dcp_decode_every_combination: all of them.)"""
    cases = [_case(fmt, interleave, schedule) for fmt in FORMATS
             for interleave, schedule in ((1, "allgather"), (64, "reduce_scatter"))]
    cases += [_case("mxfp4", 1, "reduce_scatter"), _case("bf16", 1, "allgather", kv_lens=SHORT_LENS, seed=12)]
    _run_and_check(pools(world_size), cases)


@needs_interpreter
@pytest.mark.slow
@pytest.mark.parametrize("world_size", [2, 4])
def test_dcp_decode_every_combination(pools, world_size):
    """Every format x interleave 1 and 64 x both schedules x the ragged and the short batch."""
    cases = [_case(fmt, interleave, schedule, kv_lens=lens, seed=seed) for fmt in FORMATS for interleave in (1, 64)
             for schedule in SCHEDULES for lens, seed in ((KV_LENS, 11), (SHORT_LENS, 12))]
    _run_and_check(pools(world_size), cases)


@needs_interpreter
@pytest.mark.slow
@pytest.mark.parametrize("world_size", [2, 4])
def test_dcp_decode_more_heads(pools, world_size):
    """32 heads (the reduce-scatter's slices of 8 and 16 heads), another seed, the other cache form."""
    cases = [_case(fmt, interleave, schedule, heads=32, seed=21, form="container" if fmt != "fp8" else "benchmark")
             for fmt in FORMATS for interleave, schedule in ((1, "allgather"), (64, "reduce_scatter"))]
    _run_and_check(pools(world_size), cases)


@needs_interpreter
def test_dcp_decode_misuse_raises_the_same_clear_error_on_every_rank(pools):
    """Each misuse raises on every rank (none is left waiting in a collective), with a message that
    says what is wrong; a correct call afterwards still works."""
    case = _case("bf16", 1, "allgather", kv_lens=[5, 40, 3])
    per_rank = pools(2).run("dcp_misuse", case)
    expected = {
        "wrong group size": r"wrong group size: rank 0 holds a shard made for world_size=4.*group has 2 ranks",
        "another rank's shard": r"rank 0 of the group holds the shard of rank 1",
        "different batch": r"mismatched shards: ranks 0 and 1 differ in the batch",
        "different q": r"ranks 0 and 1 differ in q \(every rank must pass the same queries\)",
        "different schedule": r"ranks 0 and 1 differ in schedule",
        "MTP on every rank": r"one query token per request, got 2 for request 0",
        "unknown schedule": r"schedule must be one of",
    }
    import re

    for rank, outcomes in enumerate(per_rank):
        for name, pattern in expected.items():
            kind, *rest = outcomes[name]
            assert kind == "raised" and rest[0] == "ValueError" and re.search(pattern, rest[1]), (rank, name, rest)
        kind, *rest = outcomes["MTP on rank 1 only"]
        want = r"one query token per request" if rank == 1 else r"rank\(s\) \[1\] of the group failed"
        assert kind == "raised" and re.search(want, rest[1]), (rank, rest)
    out0, out1 = per_rank[0]["correct call afterwards"][1], per_rank[1]["correct call afterwards"][1]
    assert torch.equal(out0.view(torch.int16), out1.view(torch.int16))
    _assert_matches_single(case, out0, _single(case)[1])
