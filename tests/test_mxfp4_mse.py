"""The squared-error MXFP4 quantizer (``quantize_mxfp4(x, scale_rule="mse")``, issue 15).

It writes the benchmark's MXFP4 bytes with, per 32-value block, possibly another E8M0 exponent.
Checked here: the bytes decode with the existing dequantizer and kernels; no block is worse than
with the producer's exponent and the total error is lower; and the choice is the optimum of an
independent brute-force search (pure Python, sharing no code with ``mixmla.formats``).
"""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import mixmla
from mixmla.check import check_strict
from mixmla.formats import dequantize_mxfp4, quantize_mxfp4
from mixmla.formats.mxfp4 import quantize_mxfp4_blocks
from mixmla.inputs import realistic_cache
from mixmla.reference import mla_decode_reference

GRID = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]  # E2M1 magnitudes (OCP MX spec)


def _random_cache(rows: int, seed: int) -> torch.Tensor:
    """(rows, 576) float32 mixing the shapes blocks take in practice: Gaussian, heavy-tailed
    (Student t, 2 degrees of freedom), sparse with one large value per block, and magnitudes
    spread over 2**-40 .. 2**40 so exponents near both ends occur."""
    gen = torch.Generator().manual_seed(seed)
    kinds = torch.randint(0, 3, (rows, 18, 1), generator=gen)
    gauss = torch.randn(rows, 18, 32, generator=gen)
    chi2 = torch.randn(rows, 18, 32, 2, generator=gen).square().sum(-1)
    student = torch.randn(rows, 18, 32, generator=gen) / (chi2 / 2).sqrt()
    spiky = torch.randn(rows, 18, 32, generator=gen) * 0.1
    spiky[..., 0] *= 300
    blocks = torch.where(kinds == 0, gauss, torch.where(kinds == 1, student, spiky))
    magnitude = torch.exp2(torch.randint(-40, 41, (rows, 18, 1), generator=gen).float())
    return (blocks * magnitude).reshape(rows, 576)


def _block_errors(x: torch.Tensor, cache) -> torch.Tensor:
    """(N, 18) float64 squared error per block of the decoded cache against x."""
    return (dequantize_mxfp4(cache, torch.float64) - x.double()).square().reshape(x.shape[0], 18, 32).sum(-1)


def _brute_force_best_error(block: list[float], exponent: int) -> float:
    """The smallest squared error of ``block`` over every exponent within 3 of ``exponent``, each
    value rounded to the nearest signed E2M1 value (saturating), in plain Python floats."""
    best = math.inf
    for e in range(max(-127, exponent - 3), min(127, exponent + 3) + 1):
        scale = 2.0 ** e
        err = sum(min((v - s * g * scale) ** 2 for g in GRID for s in (1, -1)) for v in block)
        best = min(best, err)
    return best


def test_benchmark_rule_is_the_default():
    x = _random_cache(64, seed=0)
    a, b = quantize_mxfp4(x), quantize_mxfp4(x, scale_rule="benchmark")
    assert torch.equal(a.data, b.data) and torch.equal(a.scales, b.scales)


def test_no_block_is_worse_and_the_total_is_better():
    x = _random_cache(400, seed=int(torch.randint(0, 2**31, ()).item()))
    default = quantize_mxfp4(x, pad_scales=False)
    mse = quantize_mxfp4(x, pad_scales=False, scale_rule="mse")
    err_default, err_mse = _block_errors(x, default), _block_errors(x, mse)
    assert (err_mse <= err_default).all()
    changed = mse.scales != default.scales
    assert changed.any()
    assert (err_mse[changed] < err_default[changed]).all()  # a block changes only for a real gain
    assert err_mse.sum() < err_default.sum()
    # Only the neighbours of the producer's exponent are candidates.
    assert ((mse.scales.int() - default.scales.int()).abs() <= 1).all()


def test_the_choice_is_the_brute_force_optimum():
    x = _random_cache(3, seed=11)
    x[0] = realistic_cache(1, seed=12)[0].reshape(576)
    default = quantize_mxfp4(x, pad_scales=False)
    mse = quantize_mxfp4(x, pad_scales=False, scale_rule="mse")
    err = _block_errors(x, mse)
    for row in range(3):
        for k in range(18):
            block = x[row, 32 * k: 32 * k + 32].double().tolist()
            best = _brute_force_best_error(block, int(default.scales[row, k]) - 127)
            assert err[row, k].item() == pytest.approx(best, rel=1e-12, abs=0.0)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.floats(min_value=-1e4, max_value=1e4, width=32), min_size=32, max_size=32),
       st.integers(min_value=-100, max_value=100))
def test_property_never_worse_than_the_producer(block, shift):
    x = torch.tensor(block, dtype=torch.float32).reshape(1, 1, 32) * 2.0 ** shift
    codes_d, exp_d = quantize_mxfp4_blocks(x)
    codes_m, exp_m = quantize_mxfp4_blocks(x, "mse")
    assert abs(int(exp_m) - int(exp_d)) <= 1 and -127 <= int(exp_m) <= 127
    scale_d = 2.0 ** int(exp_d)
    scale_m = 2.0 ** int(exp_m)
    signed = GRID + [-g for g in GRID]
    dec_d = [signed[int(c)] * scale_d for c in codes_d.reshape(-1)]
    dec_m = [signed[int(c)] * scale_m for c in codes_m.reshape(-1)]
    xs = x.double().reshape(-1).tolist()
    assert sum((a - b) ** 2 for a, b in zip(xs, dec_m)) <= sum((a - b) ** 2 for a, b in zip(xs, dec_d))


def test_zero_and_constant_blocks_keep_the_producer_bytes():
    x = torch.zeros(2, 576)
    x[1] = 3.0  # exactly representable at the producer's exponent: error 0, nothing to gain
    a, b = quantize_mxfp4(x), quantize_mxfp4(x, scale_rule="mse")
    assert torch.equal(a.data, b.data) and torch.equal(a.scales, b.scales)


def test_layouts_and_input_forms_match_the_default_quantizer():
    x = realistic_cache(300, seed=5)[0].to(torch.bfloat16)  # (300, 1, 576) bf16
    padded = quantize_mxfp4(x, scale_rule="mse")
    plain = quantize_mxfp4(x.float().reshape(300, 576), pad_scales=False, scale_rule="mse")
    assert tuple(padded.scales.shape) == (512, 24) and tuple(plain.scales.shape) == (300, 18)
    assert torch.equal(padded.scales[:300, :18], plain.scales) and torch.equal(padded.data, plain.data)
    assert (padded.scales[300:] == 127).all() and (padded.scales[:, 18:] == 127).all()


def test_unknown_rule_is_rejected():
    with pytest.raises(ValueError, match="scale_rule"):
        quantize_mxfp4(torch.randn(1, 576), scale_rule="best")
    with pytest.raises(ValueError, match="32"):
        quantize_mxfp4_blocks(torch.randn(4, 31))


@pytest.mark.parametrize("num_heads", [16, 32])
def test_the_kernels_decode_the_mse_bytes(num_heads):
    seed = int(torch.randint(0, 2**31, ()).item())
    device = "cuda" if torch.cuda.is_available() else "cpu"
    kv, _ = realistic_cache(2 * 70, seed=seed, device=device)
    gen = torch.Generator(device=device).manual_seed(seed)
    q = torch.randn(2, num_heads, 576, generator=gen, device=device).to(torch.bfloat16)
    kv_indptr = torch.tensor([0, 70, 140], dtype=torch.int32, device=device)
    cache = quantize_mxfp4(kv.to(torch.bfloat16), scale_rule="mse")
    assert not torch.equal(cache.scales, quantize_mxfp4(kv.to(torch.bfloat16)).scales)
    out = mixmla.mla_decode(q, cache, kv_indptr)
    ref, _ = mla_decode_reference(q, cache, kv_indptr)
    result = check_strict(out, ref)
    assert result.passed, result.message


@pytest.mark.gpu
def test_gpu_and_cpu_choose_the_same_bytes():
    x = _random_cache(1000, seed=21)
    cpu = quantize_mxfp4(x, scale_rule="mse")
    gpu = quantize_mxfp4(x.cuda(), scale_rule="mse")
    assert torch.equal(cpu.data, gpu.data.cpu()) and torch.equal(cpu.scales, gpu.scales.cpu())
