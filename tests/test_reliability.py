"""Edge cases, memory hygiene, determinism, graph and stream safety (issue 5, parts 2, 4, 5).

Every result is compared with ``mixmla.reference.mla_decode_reference`` (float64, same dequantized
cache) under the strict rule (relative L2 <= 1e-2, no NaN; ``mixmla.check.check_strict``), with
the output buffer poisoned with NaN first so unwritten elements fail, and the log-sum-exp checked
too (``-inf`` exactly where a query sees no cached token, whose output must be exact zeros).

Tests without a mark run on the GPU when there is one and otherwise on CPU tensors under the
Triton interpreter, with tiny shapes (the interpreter is slow). Tests marked ``gpu`` need CUDA:
the big shapes (Lk = 131072, batch 1024, > 2**31 cache elements), CUDA-graph replay, allocator
and sync checks, and two streams.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch

from mixmla import api
from mixmla.check import check_strict
from mixmla.formats import Bf16Cache, Fp8Cache, Mxfp4Cache, quantize, quantize_fp8, quantize_mxfp4
from mixmla.reference import mla_decode_reference

from conftest import DEVICE, FORMATS, indptr
from conftest import poisoned_out as poisoned_buffer

gpu = pytest.mark.gpu


# ----------------------------------------------------------------------------------------------
# problem builders and the check


@dataclass
class Problem:
    q: torch.Tensor  # (total_q, H, 576) bf16
    cache: object  # container
    kv_indptr: torch.Tensor  # (batch+1,)
    qo_indptr: torch.Tensor  # (batch+1,)

    @property
    def num_heads(self) -> int:
        return self.q.shape[1]

    @property
    def fmt(self) -> str:
        return self.cache.format


def build(kv_lens, q_lens=None, num_heads=16, fmt="bf16", seed=0, q_scale=1.0, kv=None,
          dtype=torch.int32, device=DEVICE) -> Problem:
    """Random problem: q ~ N(0, q_scale^2) bf16; cache = ``kv`` (N, 576) or N(0, 1), quantized to
    ``fmt``; one query per request unless ``q_lens`` is given."""
    q_lens = [1] * len(kv_lens) if q_lens is None else list(q_lens)
    gen = torch.Generator(device=device).manual_seed(seed)
    total_q, total_kv = sum(q_lens), sum(kv_lens)
    q = (torch.randn(total_q, num_heads, 576, generator=gen, device=device) * q_scale).to(torch.bfloat16)
    if kv is None:
        kv = torch.randn(total_kv, 576, generator=gen, device=device)
    cache = quantize(kv, fmt)
    return Problem(q, cache, indptr(kv_lens, dtype, device), indptr(q_lens, dtype, device))


def poisoned_out(p: Problem) -> torch.Tensor:
    return poisoned_buffer(p.q.shape[0], p.num_heads, p.q.device)


def check_lse(lse: torch.Tensor, ref_lse: torch.Tensor) -> None:
    """lse (total_q, H) float32 natural log: ``-inf`` exactly where the reference has it, else
    within 1e-2 + 1e-3 |ref|."""
    ref_lse = ref_lse.to(lse.device)
    empty = torch.isneginf(ref_lse)
    assert torch.equal(torch.isneginf(lse), empty), "lse is -inf exactly for queries that see no row"
    got, want = lse[~empty].double(), ref_lse[~empty].double()
    assert torch.isfinite(got).all(), "lse has NaN/Inf where the reference is finite"
    err = (got - want).abs()
    assert (err <= 1e-2 + 1e-3 * want.abs()).all(), f"lse off by up to {err.max().item():.3g}"


def check_against_reference(p: Problem, out: torch.Tensor, lse: torch.Tensor | None, sm_scale=None) -> None:
    ref, ref_lse = mla_decode_reference(p.q, p.cache, p.kv_indptr, p.qo_indptr, sm_scale=sm_scale)
    result = check_strict(out, ref)
    assert result, result.message
    empty = torch.isneginf(ref_lse).to(out.device)
    if empty.any():
        assert (out[empty] == 0).all(), "queries that see no cached token must output exact zeros"
    if lse is not None:
        check_lse(lse, ref_lse)


def decode_and_check(p: Problem, sm_scale=None) -> torch.Tensor:
    """mla_decode into a NaN-poisoned buffer, with lse; strict check against the reference."""
    out = poisoned_out(p)
    got, lse = api.mla_decode(p.q, p.cache, p.kv_indptr, p.qo_indptr, sm_scale=sm_scale, out=out, return_lse=True)
    assert got is out
    assert lse.shape == (p.q.shape[0], p.num_heads) and lse.dtype == torch.float32
    check_against_reference(p, out, lse, sm_scale)
    return out


def bits(t: torch.Tensor) -> torch.Tensor:
    """Bit pattern of a bf16/float32 tensor, for bitwise comparison (NaN-safe)."""
    return t.view(torch.int16) if t.dtype == torch.bfloat16 else t.view(torch.int32)


# ----------------------------------------------------------------------------------------------
# edge cases (CPU interpreter or GPU)


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("lk", [0, 1, 15, 17, 32, 33])
def test_kv_length(fmt, lk):
    decode_and_check(build([lk], fmt=fmt, seed=lk))


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("rows", [0, 5])
def test_all_requests_empty(fmt, rows):
    """Every request has Lk = 0 (CUDA-graph padding): zeros and lse = -inf, no NaN; with an empty
    cache (rows = 0) or a cache whose rows nobody reads."""
    p = build([0, 0, 0, 0], q_lens=[1, 2, 1, 4], fmt=fmt, kv=torch.randn(rows, 576, device=DEVICE))
    out = decode_and_check(p)
    assert (out == 0).all()


@pytest.mark.parametrize("fmt", FORMATS)
def test_one_long_request_among_tiny_ones(fmt):
    """One request holds almost every token (so it is split into chunks and merged) next to
    requests of 0..3 tokens."""
    decode_and_check(build([1, 0, 2, 1, 300, 3, 0, 1], fmt=fmt, seed=3))


@pytest.mark.parametrize("fmt", FORMATS)
def test_h128_lq4(fmt):
    """H = 128 with 4 query tokens per request (MTP), including a request with Lk = 2 < Lq."""
    decode_and_check(build([6, 2, 40], q_lens=[4, 4, 4], num_heads=128, fmt=fmt, seed=4))


@pytest.mark.parametrize("num_heads", [32, 64])
def test_other_head_counts(num_heads):
    decode_and_check(build([9, 70], q_lens=[2, 3], num_heads=num_heads, fmt="mxfp4", seed=num_heads))


@pytest.mark.parametrize("fmt", FORMATS)
def test_more_queries_than_cached_tokens(fmt):
    """Lq > Lk is allowed: query i sees rows 0 .. Lk-Lq+i; the first Lq-Lk see nothing (zeros)."""
    decode_and_check(build([0, 1, 3, 2], q_lens=[2, 4, 4, 1], fmt=fmt, seed=5))


def test_fp8_values_at_the_format_maximum():
    """fp8 codes at and next to +-448 (saturated), scale 1/100 and 1."""
    gen = torch.Generator(device=DEVICE).manual_seed(6)
    raw = (torch.randn(50, 576, generator=gen, device=DEVICE) * 400).clamp(-448, 448)
    data = raw.to(torch.float8_e4m3fn)
    assert (data.float().abs() == 448).float().mean() > 0.2
    for scale in (0.01, 1.0):
        p = build([20, 30], fmt="bf16", seed=6)
        p.cache = Fp8Cache(data, torch.tensor([scale], device=DEVICE))
        decode_and_check(p)


def test_fp8_subnormal_values():
    """A huge value in a row nobody reads sets the per-tensor scale, so every value that is read
    is an fp8 subnormal or tiny normal: the decoder must handle them exactly."""
    gen = torch.Generator(device=DEVICE).manual_seed(7)
    kv = torch.randn(41, 576, generator=gen, device=DEVICE)
    kv[40, 3] = 1e5  # row 40 is outside kv_indptr
    p = build([25, 15], fmt="fp8", kv=kv, seed=7)
    codes = p.cache.data[:40].view(torch.uint8) & 0x7F
    assert ((codes >> 3) == 0).float().mean() > 0.5, "most values should be fp8 subnormals"
    decode_and_check(p)


def test_fp8_e4m3fnuz_cache():
    """The AMD encoding (exponent bias 8, max 240) is accepted by the containers, so it must decode
    right. Its code 0x7F (= 240, the value the block amax maps to) is NaN in e4m3fn: a decoder that
    reads fnuz bits as e4m3fn turns the largest value into NaN. (The Triton interpreter does not
    model fp8 NaN codes, so only the GPU run can catch that.)"""
    p = build([30, 9], q_lens=[1, 2], fmt="bf16", seed=19)
    gen = torch.Generator(device=DEVICE).manual_seed(19)
    p.cache = quantize_fp8(torch.randn(39, 576, generator=gen, device=DEVICE), dtype=torch.float8_e4m3fnuz)
    assert ((p.cache.data.view(torch.uint8) & 0x7F) == 0x7F).any(), "the amax must map to code 0x7F"
    decode_and_check(p)


def _mxfp4_cache(n, code_fn, scale_fn, seed):
    gen = torch.Generator(device=DEVICE).manual_seed(seed)
    codes = code_fn(gen, n)  # (n, 576) uint8 codes 0..15
    packed = (codes[:, 0::2] | (codes[:, 1::2] << 4)).to(torch.uint8)
    scales = torch.full((max(256, n), 24), 127, dtype=torch.uint8, device=DEVICE)
    scales[:n, :18] = scale_fn(gen, n).to(torch.uint8)
    return Mxfp4Cache(packed.reshape(n, 1, 288), scales)


def _random_codes(gen, n):
    return torch.randint(0, 16, (n, 576), generator=gen, device=DEVICE, dtype=torch.int32)


def _saturated_codes(gen, n):
    sign = torch.randint(0, 2, (n, 576), generator=gen, device=DEVICE, dtype=torch.int32) << 3
    return 7 | sign  # +-6, the E2M1 maximum


@pytest.mark.parametrize(
    "codes, scale_bytes",
    [
        ("saturated", 127),
        ("saturated", 130),
        ("random", 80),  # values down to 2**-48: tiny but normal inside the kernel
        ("random", 191),  # values up to 6 * 2**64, the kernel's documented top scale byte
        ("random", "mixed"),  # per-block exponents from 2**-63 to 2**64
    ],
)
def test_mxfp4_values_at_the_format_limits(codes, scale_bytes):
    code_fn = _saturated_codes if codes == "saturated" else _random_codes
    if scale_bytes == "mixed":
        scale_fn = lambda g, n: torch.randint(64, 192, (n, 18), generator=g, device=DEVICE)  # noqa: E731
    else:
        scale_fn = lambda g, n: torch.full((n, 18), scale_bytes, device=DEVICE)  # noqa: E731
    p = build([20, 31], fmt="bf16", seed=8)
    p.cache = _mxfp4_cache(51, code_fn, scale_fn, seed=8)
    decode_and_check(p)


def test_mxfp4_zero_blocks_decode_to_zero():
    """All-zero blocks are common (zeroed or padded caches) and the quantizer gives them the scale
    byte 0 (exponent clamped at -127): they must decode to zeros, not NaN, beside normal blocks."""
    kv = torch.randn(51, 576, device=DEVICE)
    kv[::3, :] = 0.0  # whole zero rows
    kv[1::3, 64:128] = 0.0  # two zero blocks inside otherwise normal rows
    cache = quantize_mxfp4(kv)
    assert (cache.scales[:51, :18] == 0).any(), "the test needs blocks with scale byte 0"
    p = build([20, 31], fmt="bf16", seed=12)
    p.cache = cache
    decode_and_check(p)


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("how", ["q_times_1e4", "sm_scale_100"])
def test_huge_logits(fmt, how):
    """Scores around 1e4 (q scaled by 1e4) or 2e3 (sm_scale = 100): no overflow, no NaN, the
    softmax is nearly one-hot and still matches."""
    q_scale, sm_scale = (1e4, None) if how == "q_times_1e4" else (1.0, 100.0)
    decode_and_check(build([19, 40, 1], q_lens=[1, 2, 1], fmt=fmt, seed=9, q_scale=q_scale), sm_scale=sm_scale)


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("q_scale, sm_scale", [(1e8, 1e-9), (1e-9, 1e8)], ids=["q_beyond_f16_max", "q_below_f16_min"])
def test_query_outside_the_f16_range(fmt, q_scale, sm_scale):
    """fp8 caches take the query in f16 (range 6e-8 .. 65504), scaled per row by a power of two:
    queries far outside that range (bf16 holds them; sm_scale brings the logits back to about 1)
    must still match, neither overflowing to inf nor flushing to zero."""
    decode_and_check(build([19, 40], q_lens=[1, 2], fmt=fmt, seed=13, q_scale=q_scale), sm_scale=sm_scale)


@pytest.mark.parametrize("fmt", FORMATS)
def test_strided_rows_and_int64_indptr(fmt):
    """q with strided rows and heads, cache rows with a larger row stride, MXFP4 scales with
    the producer's 24-column padding, int64 indptrs."""
    p = build([7, 33], q_lens=[1, 3], fmt=fmt, seed=10, dtype=torch.int64)
    q_big = torch.zeros(p.q.shape[0], 2 * p.num_heads, 640, dtype=torch.bfloat16, device=DEVICE)
    q_big[:, ::2, :576] = p.q
    p.q = q_big[:, ::2, :576]
    assert p.q.stride() != p.q.contiguous().stride()
    c = p.cache
    if isinstance(c, Mxfp4Cache):
        big = torch.zeros(c.num_tokens, 320, dtype=torch.uint8, device=DEVICE)
        big[:, :288] = c.data
        p.cache = Mxfp4Cache(big[:, :288], c.scales)
        assert p.cache.scales.shape[1] == 24
    else:
        big = torch.zeros(c.num_tokens, 640, dtype=c.data.dtype, device=DEVICE)
        big[:, :576] = c.data
        p.cache = Bf16Cache(big[:, :576]) if isinstance(c, Bf16Cache) else Fp8Cache(big[:, :576], c.scale)
    decode_and_check(p)


@pytest.mark.parametrize("fmt", FORMATS)
def test_no_access_outside_the_given_tensors(fmt):
    """Guard rows of NaN just outside q, the cache (and the MXFP4 scales) would poison the output
    if read; guard rows just outside out must keep their values (nothing written outside)."""
    p = build([5, 40, 3], q_lens=[2, 1, 3], fmt=fmt, seed=11)
    total_q, total_kv = p.q.shape[0], p.cache.num_tokens
    q_big = torch.full((total_q + 2, p.num_heads, 576), float("nan"), dtype=torch.bfloat16, device=DEVICE)
    q_big[1:-1] = p.q
    p.q = q_big[1:-1]
    c = p.cache
    if isinstance(c, Mxfp4Cache):
        data = torch.full((total_kv + 2, 288), 0x77, dtype=torch.uint8, device=DEVICE)
        data[1:-1] = c.data
        scales = torch.full((total_kv + 2, 24), 255, dtype=torch.uint8, device=DEVICE)  # 255 = NaN
        scales[1:-1] = c.scales[:total_kv]
        p.cache = Mxfp4Cache(data[1:-1], scales[1:-1])
    else:
        nan = float("nan")
        big = torch.full((total_kv + 2, 576), nan, device=DEVICE).to(c.data.dtype)
        big[1:-1] = c.data
        p.cache = Bf16Cache(big[1:-1]) if isinstance(c, Bf16Cache) else Fp8Cache(big[1:-1], c.scale)
    out_big = torch.full((total_q + 2, p.num_heads, 512), 7.0, dtype=torch.bfloat16, device=DEVICE)
    out = out_big[1:-1]
    out.fill_(float("nan"))
    _, lse = api.mla_decode(p.q, p.cache, p.kv_indptr, p.qo_indptr, out=out, return_lse=True)
    assert (out_big[0] == 7).all() and (out_big[-1] == 7).all(), "written outside out"
    check_against_reference(p, out, lse)


def test_out_none_and_return_lse_false():
    p = build([3, 17], fmt="bf16", seed=12)
    out = api.mla_decode(p.q, p.cache, p.kv_indptr, p.qo_indptr)
    assert isinstance(out, torch.Tensor) and out.shape == (2, 16, 512) and out.dtype == torch.bfloat16
    check_against_reference(p, out, None)


@pytest.mark.parametrize("fmt", FORMATS)
def test_plan_run_matches_reference(fmt):
    p = build([0, 12, 70, 1], q_lens=[1, 3, 2, 1], fmt=fmt, seed=13)
    plan = api.plan(p.kv_indptr, p.qo_indptr, num_heads=p.num_heads, fmt=fmt, device=DEVICE)
    out = poisoned_out(p)
    got, lse = plan.run(p.q, p.cache, out=out, return_lse=True)
    assert got is out
    check_against_reference(p, out, lse)
    # without out: the plan's own buffer
    got2 = plan.run(p.q, p.cache)
    assert torch.equal(bits(got2), bits(out))


def test_run_after_indptr_contents_change():
    """The plan keeps int32 device indptrs by reference: new lengths (same total, no request with
    more query tokens) are picked up by the next run."""
    p = build([40, 10, 0], q_lens=[1, 2, 1], fmt="fp8", seed=14)
    plan = api.plan(p.kv_indptr, p.qo_indptr, num_heads=16, fmt="fp8", device=DEVICE)
    plan.run(p.q, p.cache)
    p.kv_indptr.copy_(indptr([5, 30, 15]))
    out = poisoned_out(p)
    _, lse = plan.run(p.q, p.cache, out=out, return_lse=True)
    check_against_reference(p, out, lse)


@pytest.mark.parametrize("fmt", FORMATS)
def test_custom_kernel_matches_reference(fmt):
    from mixmla.inputs import generate_input

    q, kv_data, qo, kv, config = generate_input(2, 2, 20, seed=15, device=DEVICE)
    out = api.custom_kernel((q, kv_data, qo, kv, config), fmt=fmt)
    ref, _ = mla_decode_reference(q, kv_data[fmt], kv, qo, sm_scale=config["sm_scale"])
    result = check_strict(out, ref)
    assert result, result.message


def test_custom_kernel_with_new_lengths_under_the_same_config():
    """custom_kernel caches plans by shape; a later call with the same config but other
    per-request lengths (and other tensors) must still be right."""
    from mixmla.inputs import generate_input

    q, kv_data, qo, kv, config = generate_input(3, 1, 24, seed=16, device=DEVICE)
    api.custom_kernel((q, kv_data, qo, kv, config), fmt="bf16")
    q2, kv_data2, qo2, _, _ = generate_input(3, 1, 24, seed=17, device=DEVICE)
    kv2 = indptr([1, 60, 11])
    out = api.custom_kernel((q2, kv_data2, qo2, kv2, config), fmt="bf16")
    ref, _ = mla_decode_reference(q2, kv_data2["bf16"], kv2, qo2, sm_scale=config["sm_scale"])
    result = check_strict(out, ref)
    assert result, result.message


def test_custom_kernel_ragged_batches_of_one_config_with_fewer_tokens(monkeypatch):
    """A plan is cached per (batch, Lq, max Lk): later ragged batches of that config with fewer
    cached tokens in all (and caches of just those rows) are served, each against its own tensors,
    in every format; so is a larger one again."""
    import collections

    from mixmla.inputs import generate_ragged

    monkeypatch.setattr(api, "_PLAN_CACHE", collections.OrderedDict())
    batches = [[40, 7, 0, 30], [3, 40, 1, 9], [40, 40, 0, 2]]  # 77, 53, 82 tokens; max 40 each
    for i, kv_lens in enumerate(batches):
        data = generate_ragged(4, 1, 40, seed=40 + i, kvseqlens=kv_lens, device=DEVICE)
        q, kv_data, qo, kv, config = data
        assert (config["batch_size"], config["q_seq_len"], config["kv_seq_len"]) == (4, 1, 40)
        for fmt in FORMATS:
            out = api.custom_kernel(data, fmt=fmt)
            ref, _ = mla_decode_reference(q, kv_data[fmt], kv, qo, sm_scale=config["sm_scale"])
            result = check_strict(out, ref)
            assert result, f"batch {i} {fmt}: {result.message}"
    assert len(api._PLAN_CACHE) == len(FORMATS)


# ----------------------------------------------------------------------------------------------
# determinism


@pytest.mark.parametrize("fmt", FORMATS)
def test_bitwise_deterministic(fmt):
    """Identical inputs give identical bits: across mla_decode calls, across runs of one plan,
    across two plans made from the same indptrs, and between mla_decode and plan.run."""
    p = build([3, 150, 0, 64], q_lens=[1, 2, 1, 1], fmt=fmt, seed=18)
    a, lse_a = api.mla_decode(p.q, p.cache, p.kv_indptr, p.qo_indptr, return_lse=True)
    b, lse_b = api.mla_decode(p.q, p.cache, p.kv_indptr, p.qo_indptr, return_lse=True)
    assert torch.equal(bits(a), bits(b)) and torch.equal(bits(lse_a), bits(lse_b))
    plan = api.plan(p.kv_indptr, p.qo_indptr, num_heads=16, fmt=fmt, device=DEVICE)
    runs = [plan.run(p.q, p.cache, out=poisoned_out(p)) for _ in range(3)]
    plan2 = api.plan(p.kv_indptr, p.qo_indptr, num_heads=16, fmt=fmt, device=DEVICE)
    runs.append(plan2.run(p.q, p.cache, out=poisoned_out(p)))
    for r in runs:
        assert torch.equal(bits(r), bits(a))


# ----------------------------------------------------------------------------------------------
# GPU only: big shapes


def _ragged(batch, lo, hi, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(lo, hi + 1, (batch,), generator=g).tolist()


@gpu
@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("lq", [1, 4])
def test_gpu_kv_131072(fmt, lq):
    decode_and_check(build([131072], q_lens=[lq], fmt=fmt, seed=20))


@gpu
@pytest.mark.parametrize("fmt", FORMATS)
def test_gpu_batch_1024_ragged(fmt):
    decode_and_check(build(_ragged(1024, 0, 1200, 21), fmt=fmt, seed=21))


@gpu
def test_gpu_batch_1024_beyond_int32_offsets():
    """1024 x 4096 bf16 tokens: 2.4e9 cache elements, so element offsets exceed 2**31."""
    p = build([4096] * 1024, fmt="bf16", seed=22)
    assert p.cache.num_tokens * 576 > 2**31
    decode_and_check(p)


@gpu
@pytest.mark.parametrize("fmt", FORMATS)
def test_gpu_one_giant_among_tiny(fmt):
    decode_and_check(build(_ragged(511, 0, 3, 23) + [131072], fmt=fmt, seed=23))


@gpu
@pytest.mark.parametrize("fmt", FORMATS)
def test_gpu_h128_lq4(fmt):
    decode_and_check(build(_ragged(16, 1, 8192, 24), q_lens=[4] * 16, num_heads=128, fmt=fmt, seed=24))


@gpu
def test_gpu_all_empty_batch_1024():
    p = build([0] * 1024, q_lens=[1] * 1024, fmt="mxfp4", kv=torch.randn(0, 576, device=DEVICE))
    assert (decode_and_check(p) == 0).all()


@gpu
@pytest.mark.parametrize("fmt", FORMATS)
def test_gpu_bitwise_deterministic(fmt):
    p = build([8192] * 64, fmt=fmt, seed=25)
    plan = api.plan(p.kv_indptr, p.qo_indptr, num_heads=16, fmt=fmt, device=DEVICE)
    first, lse0 = plan.run(p.q, p.cache, out=poisoned_out(p), return_lse=True)
    first, lse0 = first.clone(), lse0.clone()
    for _ in range(10):
        out, lse = plan.run(p.q, p.cache, out=poisoned_out(p), return_lse=True)
        assert torch.equal(bits(out), bits(first)) and torch.equal(bits(lse), bits(lse0))
    again = api.mla_decode(p.q, p.cache, p.kv_indptr, p.qo_indptr)
    assert torch.equal(bits(again), bits(first))


# ----------------------------------------------------------------------------------------------
# GPU only: graphs, allocation, sync, streams


def _refill(p: Problem, seed: int) -> None:
    """Overwrite q and the cache in place with new random contents (same shapes, same format)."""
    gen = torch.Generator(device=DEVICE).manual_seed(seed)
    p.q.copy_(torch.randn(p.q.shape, generator=gen, device=DEVICE).to(torch.bfloat16) * 2)
    fresh = quantize(torch.randn(p.cache.num_tokens, 576, generator=gen, device=DEVICE) * 3, p.fmt)
    if isinstance(p.cache, Bf16Cache):
        p.cache.data.copy_(fresh.data)
    elif isinstance(p.cache, Fp8Cache):
        p.cache.data.copy_(fresh.data)
        p.cache.scale.copy_(fresh.scale)
    else:
        p.cache.data.copy_(fresh.data)
        p.cache.scales.copy_(fresh.scales)


@gpu
@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("kv_lens", [[1000, 3, 0, 5000], [1024] * 255 + [1000]], ids=["split", "direct"])
def test_gpu_graph_replay_after_contents_change(fmt, kv_lens):
    p = build(kv_lens, q_lens=[1, 2, 1, 1] * (len(kv_lens) // 4), fmt=fmt, seed=30)
    plan = api.plan(p.kv_indptr, p.qo_indptr, num_heads=16, fmt=fmt, device=DEVICE)
    out = poisoned_out(p)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        plan.run(p.q, p.cache, out=out, return_lse=True)  # warm-up: compile outside the capture
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        _, lse = plan.run(p.q, p.cache, out=out, return_lse=True)
    for seed in (31, 32):
        _refill(p, seed)
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        check_against_reference(p, out, lse)
    # new lengths in the captured indptr (same total), replayed again
    perm = list(reversed(kv_lens))
    p.kv_indptr.copy_(indptr(perm))
    out.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    check_against_reference(p, out, lse)


@gpu
@pytest.mark.parametrize("fmt", FORMATS)
def test_gpu_run_allocates_nothing_and_never_syncs(fmt):
    p = build([3000, 1, 0, 700], fmt=fmt, seed=33)
    plan = api.plan(p.kv_indptr, p.qo_indptr, num_heads=16, fmt=fmt, device=DEVICE)
    out = poisoned_out(p)
    plan.run(p.q, p.cache, out=out, return_lse=True)  # compile
    torch.cuda.synchronize()
    before = torch.cuda.memory_stats(DEVICE)
    torch.cuda.set_sync_debug_mode("error")
    try:
        for _ in range(5):
            plan.run(p.q, p.cache, out=out, return_lse=True)
            plan.run(p.q, p.cache, out=out)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    torch.cuda.synchronize()
    after = torch.cuda.memory_stats(DEVICE)
    for key in ("allocation.all.allocated", "segment.all.allocated", "requested_bytes.all.allocated"):
        assert after.get(key, 0) == before.get(key, 0), f"run allocated: {key} {before.get(key)} -> {after.get(key)}"


@gpu
def test_gpu_two_plans_on_two_streams():
    """Two decoders with different layouts and formats, run concurrently on two streams many
    times, both correct."""
    p1 = build(_ragged(32, 500, 4000, 34), fmt="mxfp4", seed=34)
    p2 = build(_ragged(8, 100, 9000, 35), q_lens=[2] * 8, num_heads=32, fmt="fp8", seed=35)
    plans = [api.plan(p.kv_indptr, p.qo_indptr, num_heads=p.num_heads, fmt=p.fmt, device=DEVICE) for p in (p1, p2)]
    outs = [poisoned_out(p) for p in (p1, p2)]
    for plan, p, out in zip(plans, (p1, p2), outs):
        plan.run(p.q, p.cache, out=out)  # compile
    torch.cuda.synchronize()
    for out in outs:
        out.fill_(float("nan"))
    streams = [torch.cuda.Stream(), torch.cuda.Stream()]
    for s in streams:
        s.wait_stream(torch.cuda.current_stream())
    for _ in range(20):
        for plan, p, out, s in zip(plans, (p1, p2), outs, streams):
            with torch.cuda.stream(s):
                plan.run(p.q, p.cache, out=out)
    torch.cuda.synchronize()
    for p, out in zip((p1, p2), outs):
        check_against_reference(p, out, None)


@gpu
def test_gpu_validation_errors_on_mixed_devices():
    """Real CUDA/CPU mixes (the CPU suite uses the meta device for this)."""
    p = build([4, 4], fmt="bf16", seed=36)
    with pytest.raises(ValueError, match="kv_indptr"):
        api.mla_decode(p.q, p.cache, p.kv_indptr.cpu(), p.qo_indptr)
    with pytest.raises(ValueError, match="cache"):
        api.mla_decode(p.q, p.cache.data.cpu(), p.kv_indptr, p.qo_indptr)
    with pytest.raises(ValueError, match=r"\bq\b"):
        plan = api.plan(p.kv_indptr, p.qo_indptr, num_heads=16, fmt="bf16", device=DEVICE)
        plan.run(p.q.cpu(), p.cache)


def _hopper() -> bool:
    return torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)


@gpu
@pytest.mark.parametrize("backend, fmt", [("triton", f) for f in FORMATS] + [("gluon", f) for f in ("fp8", "mxfp4")])
def test_gpu_custom_kernel_ragged_batches_of_one_config_with_graphs(monkeypatch, backend, fmt):
    """custom_kernel on the GPU, each backend: ragged batches of one config with fewer tokens than
    the first are served, each call three times (eager, captured, replayed) and right every time;
    a later batch with kv_indptr past its own cache is a ValueError on its eager call."""
    import collections

    from mixmla.inputs import generate_ragged

    if backend == "gluon" and not _hopper():
        pytest.skip("the Gluon backend needs an sm_90 GPU")
    monkeypatch.setattr(api, "_PLAN_CACHE", collections.OrderedDict())
    api._GRAPHS.clear()
    for i, kv_lens in enumerate([[3000, 70, 0, 900], [5, 3000, 1, 64], [3000, 1200, 0, 2000]]):
        data = generate_ragged(4, 1, 3000, seed=60 + i, kvseqlens=kv_lens, device=DEVICE)
        q, kv_data, qo, kv, config = data
        ref, _ = mla_decode_reference(q, kv_data[fmt], kv, qo, sm_scale=config["sm_scale"])
        for call in range(3):
            out = api.custom_kernel(data, fmt=fmt, backend=backend)
            result = check_strict(out, ref)
            assert result, f"batch {i} call {call}: {result.message}"
    q, kv_data, qo, kv, config = generate_ragged(4, 1, 3000, seed=70, kvseqlens=[3000, 1, 1, 1], device=DEVICE)
    past = indptr([3000, 1, 1, 2])  # one row past this call's cache
    with pytest.raises(ValueError, match=r"kv_indptr ends at 3004, beyond the cache's 3003 rows"):
        api.custom_kernel((q, kv_data, qo, past, config), fmt=fmt, backend=backend)


@gpu
@pytest.mark.parametrize("backend", ["triton", "gluon"])
def test_gpu_run_check_reads_the_values_and_is_refused_in_a_capture(backend):
    """run(check=True) on the GPU: a valid call is right, a replacement kv_indptr past the cache's
    end is a ValueError before any launch, and inside a CUDA graph capture the check is refused
    with a RuntimeError (it would sync), after which the plan still captures and replays."""
    if backend == "gluon" and not _hopper():
        pytest.skip("the Gluon backend needs an sm_90 GPU")
    p = build([3000, 7, 0, 900], fmt="fp8", seed=71)
    plan = api.plan(p.kv_indptr, p.qo_indptr, num_heads=16, fmt="fp8", device=DEVICE, backend=backend)
    out = poisoned_out(p)
    plan.run(p.q, p.cache, out=out, check=True)
    torch.cuda.synchronize()
    check_against_reference(p, out, None)
    with pytest.raises(ValueError, match=r"kv_indptr ends at 3908, beyond the cache's 3907 rows"):
        plan.run(p.q, p.cache, out=out, kv_indptr=indptr([3000, 8, 0, 900]), check=True)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        with pytest.raises(RuntimeError, match="CUDA graph capture"):
            with torch.cuda.graph(torch.cuda.CUDAGraph()):
                plan.run(p.q, p.cache, out=out, check=True)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            plan.run(p.q, p.cache, out=out)
    torch.cuda.current_stream().wait_stream(side)
    out.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    check_against_reference(p, out, None)
