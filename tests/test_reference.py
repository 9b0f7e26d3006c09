"""mixmla.reference against an independent slow float64 loop, and docs/SPEC.md's semantics.

``_slow_attention`` shares no code with the package: it dequantizes the cache bytes itself
(E2M1 table and 2**(byte-127) in Python), and loops over requests, query tokens and heads with
an explicit max-subtracted softmax in numpy float64.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from mixmla.formats import Bf16Cache, quantize_fp8, quantize_mxfp4
from mixmla.inputs import generate_input, generate_ragged
from mixmla.reference import default_sm_scale, mla_decode_reference

E2M1 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0]


def _slow_dequantize(kv) -> np.ndarray:
    """(N, 576) float64 values of a benchmark-form cache, decoded by hand."""
    if isinstance(kv, torch.Tensor):
        return kv.reshape(kv.shape[0], 576).double().numpy()
    data, extra = kv
    if data.dtype in (torch.float8_e4m3fn, torch.float8_e4m3fnuz):
        return data.reshape(data.shape[0], 576).double().numpy() * float(extra.reshape(-1)[0])
    packed = data.reshape(data.shape[0], 288).view(torch.uint8).numpy()
    scales = extra.view(torch.uint8).numpy()
    out = np.empty((packed.shape[0], 576))
    table = np.array(E2M1)
    for t in range(packed.shape[0]):
        codes = np.empty(576, dtype=np.int64)
        codes[0::2] = packed[t] & 0xF
        codes[1::2] = packed[t] >> 4
        block_scale = np.array([2.0 ** (int(b) - 127) for b in scales[t, :18]])
        out[t] = table[codes] * np.repeat(block_scale, 32)
    return out


def _slow_attention(q, kv, kv_indptr, qo_indptr, sm_scale):
    """(out (total_q, H, 512), lse (total_q, H)) in float64, one (request, token, head) at a time."""
    c = _slow_dequantize(kv)
    qn = q.double().numpy()
    total_q, num_heads, _ = qn.shape
    out = np.zeros((total_q, num_heads, 512))
    lse = np.full((total_q, num_heads), -np.inf)
    kv_ptr, qo_ptr = kv_indptr.tolist(), qo_indptr.tolist()
    for b in range(len(kv_ptr) - 1):
        keys = c[kv_ptr[b]:kv_ptr[b + 1]]
        lk, lq = keys.shape[0], qo_ptr[b + 1] - qo_ptr[b]
        for i in range(lq):
            visible = lk - lq + i + 1  # rows 0 .. lk-lq+i
            if visible <= 0:
                continue
            rows = keys[:visible]
            for h in range(num_heads):
                s = rows @ qn[qo_ptr[b] + i, h] * sm_scale
                m = s.max()
                w = np.exp(s - m)
                out[qo_ptr[b] + i, h] = (w / w.sum()) @ rows[:, :512]
                lse[qo_ptr[b] + i, h] = m + math.log(w.sum())
    return out, lse


def _assert_matches_slow(q, kv, kv_indptr, qo_indptr, sm_scale=None):
    scale = default_sm_scale() if sm_scale is None else sm_scale
    out, lse = mla_decode_reference(q, kv, kv_indptr, qo_indptr, sm_scale)
    slow_out, slow_lse = _slow_attention(q, kv, kv_indptr, qo_indptr, scale)
    assert out.dtype == torch.float64 and tuple(out.shape) == slow_out.shape
    rel = np.linalg.norm(out.numpy() - slow_out) / max(np.linalg.norm(slow_out), 1e-300)
    assert rel < 1e-6
    np.testing.assert_allclose(out.numpy(), slow_out, rtol=1e-6, atol=1e-9)
    finite = np.isfinite(slow_lse)
    assert np.array_equal(np.isfinite(lse.numpy()), finite)
    np.testing.assert_allclose(lse.numpy()[finite], slow_lse[finite], rtol=1e-9)
    assert (lse.numpy()[~finite] == -np.inf).all()
    return out, lse


@pytest.mark.parametrize("fmt", ["bf16", "fp8", "mxfp4"])
def test_matches_slow_loop_on_a_uniform_batch(fmt):
    q, kv_data, qo_indptr, kv_indptr, _ = generate_input(3, 1, 40, seed=11, device="cpu")
    _assert_matches_slow(q, kv_data[fmt], kv_indptr, qo_indptr)


@pytest.mark.parametrize("fmt", ["bf16", "fp8", "mxfp4"])
def test_matches_slow_loop_on_a_ragged_mtp_batch(fmt):
    q, kv_data, qo_indptr, kv_indptr, config = generate_ragged(
        5, [1, 4, 2, 3, 4], 50, seed=12, device="cpu", kvseqlens=[0, 1, 50, 37, 2])
    out, lse = _assert_matches_slow(q, kv_data[fmt], kv_indptr, qo_indptr)
    # Request 0 (Lk = 0) and the first queries of request 4 (Lk 2 < Lq 4) see no row.
    assert out[0].abs().max().item() == 0.0 and torch.isneginf(lse[0]).all()
    assert torch.isneginf(lse[10:12]).all() and torch.isfinite(lse[12:14]).all()


@pytest.mark.parametrize("num_heads", [16, 32, 128])
def test_any_number_of_heads(num_heads):
    q, kv_data, qo_indptr, kv_indptr, _ = generate_input(2, 2, 24, seed=13, num_heads=num_heads, device="cpu")
    _assert_matches_slow(q, kv_data["bf16"], kv_indptr, qo_indptr)


def test_custom_softmax_scale():
    q, kv_data, qo_indptr, kv_indptr, _ = generate_input(2, 1, 30, seed=14, device="cpu")
    _assert_matches_slow(q, kv_data["bf16"], kv_indptr, qo_indptr, sm_scale=0.125)
    default, _ = mla_decode_reference(q, kv_data["bf16"], kv_indptr, qo_indptr)
    other, _ = mla_decode_reference(q, kv_data["bf16"], kv_indptr, qo_indptr, sm_scale=0.125)
    assert not torch.allclose(default, other)
    assert default_sm_scale() == 1 / 24  # 1/sqrt(576)


def test_single_row_gives_that_rows_values_and_its_score_as_lse():
    gen = torch.Generator().manual_seed(15)
    q = torch.randn(1, 16, 576, generator=gen, dtype=torch.float64)
    row = torch.randn(1, 576, generator=gen).to(torch.bfloat16)
    out, lse = mla_decode_reference(q, row, torch.tensor([0, 1]))
    assert torch.equal(out[0], row[0, :512].double().expand(16, 512))
    expected_lse = (q[0] @ row[0].double()) / 24
    assert torch.allclose(lse[0], expected_lse, rtol=1e-12)


def test_two_equal_scores_average_the_values():
    # q orthogonal to both rows' keys: equal scores, so the output is the mean and lse = log 2.
    rows = torch.zeros(2, 576, dtype=torch.bfloat16)
    rows[0, :512], rows[1, :512] = 1.0, 3.0
    q = torch.zeros(1, 16, 576, dtype=torch.bfloat16)
    q[..., 512:] = 1.0  # rope dims of the rows are zero
    out, lse = mla_decode_reference(q, rows, torch.tensor([0, 2]))
    assert torch.equal(out, torch.full((1, 16, 512), 2.0, dtype=torch.float64))
    assert torch.allclose(lse, torch.full((1, 16), math.log(2.0), dtype=torch.float64))


def test_causal_window_hides_later_rows_from_earlier_queries():
    # One request, Lq = 4, Lk = 10: query i sees rows 0 .. 6+i. Row 8 is seen by queries 2 and 3.
    gen = torch.Generator().manual_seed(16)
    q = torch.randn(4, 16, 576, generator=gen).to(torch.bfloat16)
    kv = torch.randn(10, 576, generator=gen).to(torch.bfloat16)
    kv_indptr, qo_indptr = torch.tensor([0, 10]), torch.tensor([0, 4])
    before, lse_before = mla_decode_reference(q, kv, kv_indptr, qo_indptr)
    perturbed = kv.clone()
    perturbed[8] = 10.0 * torch.randn(576, generator=gen).to(torch.bfloat16)
    after, lse_after = mla_decode_reference(q, perturbed, kv_indptr, qo_indptr)
    assert torch.equal(before[:2], after[:2]) and torch.equal(lse_before[:2], lse_after[:2])
    assert not torch.allclose(before[2], after[2]) and not torch.allclose(before[3], after[3])
    # Query 0 equals plain attention over the first 7 rows alone.
    alone, _ = mla_decode_reference(q[:1], kv[:7], torch.tensor([0, 7]))
    assert torch.allclose(before[:1], alone, rtol=1e-12, atol=1e-15)


def test_requests_do_not_see_each_other():
    q, kv_data, qo_indptr, kv_indptr, _ = generate_input(3, 1, 20, seed=17, device="cpu")
    kv = kv_data["bf16"].clone()
    before, _ = mla_decode_reference(q, kv, kv_indptr, qo_indptr)
    kv[20:40] = 5.0  # request 1's rows
    after, _ = mla_decode_reference(q, kv, kv_indptr, qo_indptr)
    assert torch.equal(before[0], after[0]) and torch.equal(before[2], after[2])
    assert not torch.allclose(before[1], after[1])


def test_empty_cache_gives_zeros_and_minus_inf():
    q, kv_data, qo_indptr, kv_indptr, _ = generate_input(3, 2, 0, seed=18, device="cpu")
    for fmt in ("bf16", "fp8", "mxfp4"):
        out, lse = mla_decode_reference(q, kv_data[fmt], kv_indptr, qo_indptr)
        assert tuple(out.shape) == (6, 16, 512) and out.abs().max().item() == 0.0
        assert torch.isneginf(lse).all()


def test_default_qo_indptr_is_one_token_per_request():
    q, kv_data, qo_indptr, kv_indptr, _ = generate_input(4, 1, 16, seed=19, device="cpu")
    a = mla_decode_reference(q, kv_data["bf16"], kv_indptr, qo_indptr)
    b = mla_decode_reference(q, kv_data["bf16"], kv_indptr)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])


def test_float32_compute_is_close_to_float64():
    q, kv_data, qo_indptr, kv_indptr, _ = generate_input(2, 1, 64, seed=20, device="cpu")
    out64, _ = mla_decode_reference(q, kv_data["mxfp4"], kv_indptr, qo_indptr)
    out32, _ = mla_decode_reference(q, kv_data["mxfp4"], kv_indptr, qo_indptr, compute_dtype=torch.float32)
    assert out32.dtype == torch.float32
    assert (torch.linalg.vector_norm(out32.double() - out64) / torch.linalg.vector_norm(out64)).item() < 1e-5


def test_quantized_formats_stay_close_to_bf16_ground_truth():
    # Format error, not kernel error: the same attention on each format's exact values.
    q, kv_data, qo_indptr, kv_indptr, _ = generate_input(4, 1, 256, seed=21, device="cpu")
    truth, _ = mla_decode_reference(q, kv_data["bf16"], kv_indptr, qo_indptr)
    errors = {}
    for fmt in ("fp8", "mxfp4"):
        out, _ = mla_decode_reference(q, kv_data[fmt], kv_indptr, qo_indptr)
        errors[fmt] = (torch.linalg.vector_norm(out - truth) / torch.linalg.vector_norm(truth)).item()
    assert 0 < errors["fp8"] < 0.1 and 0 < errors["mxfp4"] < 0.3
    assert errors["fp8"] < errors["mxfp4"]


def test_containers_and_fnuz_are_accepted():
    gen = torch.Generator().manual_seed(22)
    q = torch.randn(2, 16, 576, generator=gen).to(torch.bfloat16)
    kv = torch.randn(30, 576, generator=gen).to(torch.bfloat16)
    kv_indptr = torch.tensor([0, 12, 30], dtype=torch.int32)
    for cache in (Bf16Cache(kv), quantize_fp8(kv, torch.float8_e4m3fnuz), quantize_mxfp4(kv)):
        as_tuple = cache.data if isinstance(cache, Bf16Cache) else (
            (cache.data, cache.scale) if hasattr(cache, "scale") else (cache.data, cache.scales))
        _assert_matches_slow(q, as_tuple, kv_indptr, torch.tensor([0, 1, 2]))
        a, _ = mla_decode_reference(q, cache, kv_indptr)
        b, _ = mla_decode_reference(q, as_tuple, kv_indptr)
        assert torch.equal(a, b)


@pytest.mark.parametrize(
    "q_shape, qo_indptr, error, match",
    [
        ((2, 16, 512), None, ValueError, "576"),
        ((2, 16, 576), torch.tensor([0, 1, 2, 3]), ValueError, "kv_indptr"),
        ((2, 16, 576), torch.tensor([0, 1, 3]), ValueError, "q has 2 rows"),
    ],
)
def test_bad_inputs_raise_clear_errors(q_shape, qo_indptr, error, match):
    kv = torch.zeros(8, 576, dtype=torch.bfloat16)
    with pytest.raises(error, match=match):
        mla_decode_reference(torch.zeros(q_shape), kv, torch.tensor([0, 4, 8]), qo_indptr)


def test_bad_caches_raise_clear_errors():
    q = torch.zeros(1, 16, 576)
    with pytest.raises(TypeError, match="needs its scale"):
        mla_decode_reference(q, torch.zeros(4, 576, dtype=torch.float8_e4m3fn), torch.tensor([0, 4]))
    with pytest.raises(TypeError, match="bfloat16"):
        mla_decode_reference(q, torch.zeros(4, 576), torch.tensor([0, 4]))
    with pytest.raises(ValueError, match="too small"):
        mla_decode_reference(q, (torch.zeros(4, 288, dtype=torch.uint8), torch.zeros(2, 24, dtype=torch.uint8)),
                             torch.tensor([0, 4]))
