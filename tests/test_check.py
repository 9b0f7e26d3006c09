"""mixmla.check: the loose and strict rules on hand-made vectors."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from mixmla.check import CheckResult, check_loose, check_strict


def test_identical_outputs_pass_both_rules():
    ref = torch.randn(3, 16, 512, dtype=torch.float64)
    for result in (check_loose(ref.clone(), ref), check_strict(ref.clone(), ref)):
        assert result.passed and bool(result)
        assert result.max_abs_err == 0.0 and result.rel_l2 == 0.0
        assert result.mismatches == 0 and result.nonfinite == 0 and result.worst_index is None
        assert result.num_elements == 3 * 16 * 512


def test_loose_allows_exactly_five_percent_of_misses():
    # Tolerance per element: 0.1 + 0.1 * 0.5 = 0.15. An error of 0.2 misses, 0.14 does not.
    ref = torch.full((100,), 0.5)
    out = ref.clone()
    out[:50] += 0.14  # within tolerance
    out[50:55] += 0.2  # 5 misses of 100 = 5%: still a pass
    result = check_loose(out, ref)
    assert result.passed and result.mismatches == 5
    out[55] += 0.2
    result = check_loose(out, ref)
    assert not result.passed and result.mismatches == 6
    assert "6 of 100" in result.message and "FAIL" in result.message


def test_loose_tolerance_scales_with_ref():
    ref = torch.tensor([10.0, -10.0, 0.0])
    # Limits: 0.1 + 1.0 = 1.1, 1.1, 0.1.
    out = torch.tensor([11.05, -11.05, 0.099])
    assert check_loose(out, ref, max_mismatch_frac=0.0).passed
    out = torch.tensor([11.2, -10.0, 0.0])
    result = check_loose(out, ref, max_mismatch_frac=0.0)
    assert not result.passed and result.mismatches == 1 and result.worst_index == (0,)


def test_loose_rule_is_blind_to_a_kernel_that_outputs_zeros():
    # Outputs have std about 0.05 (docs/SPEC.md): zeros are within atol 0.1 almost everywhere.
    ref = 0.05 * torch.randn(4, 16, 512, generator=torch.Generator().manual_seed(0))
    zeros = torch.zeros_like(ref)
    assert check_loose(zeros, ref).passed
    strict = check_strict(zeros, ref)
    assert not strict.passed and strict.rel_l2 == pytest.approx(1.0)


def test_strict_relative_l2_hand_values():
    ref = torch.tensor([3.0, 4.0])  # norm 5
    # error 0.0625 -> 0.0125 relative
    out = torch.tensor([3.0, 4.0625])
    result = check_strict(out, ref)
    assert not result.passed and result.rel_l2 == 0.0125
    assert check_strict(out, ref, tol=0.0125).passed
    out = torch.tensor([3.03125, 4.0])  # 0.03125 / 5 = 0.00625
    result = check_strict(out, ref)
    assert result.passed and result.rel_l2 == 0.00625
    assert result.max_abs_err == 0.03125 and result.worst_index == (0,)


def test_strict_computes_in_float64():
    # 2**-30 would vanish next to 1.0 in float32; the check still sees it.
    ref = torch.tensor([1.0 + 2.0 ** -30, 0.0], dtype=torch.float64)
    out = torch.tensor([1.0, 0.0], dtype=torch.float64)
    result = check_strict(out, ref)
    assert result.max_abs_err == 2.0 ** -30
    assert result.rel_l2 == pytest.approx(2.0 ** -30, rel=1e-12)
    # A bf16 output (7 stored mantissa bits) is widened exactly: 1 + 2**-7 is one ulp above 1.
    out_bf16 = torch.tensor([1.0078125], dtype=torch.bfloat16)
    assert check_strict(out_bf16, torch.tensor([1.0], dtype=torch.float64)).max_abs_err == 2.0 ** -7


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_a_single_non_finite_output_fails_strict(bad):
    ref = torch.randn(2, 16, 512, generator=torch.Generator().manual_seed(1))
    out = ref.clone()
    out[1, 7, 300] = bad
    result = check_strict(out, ref)
    assert not result.passed and result.nonfinite == 1
    assert result.worst_index == (1, 7, 300)
    assert math.isinf(result.max_abs_err)
    assert "NaN/Inf" in result.message and "(1, 7, 300)" in result.message
    loose = check_loose(out, ref)
    assert loose.passed and loose.mismatches == 1 and loose.nonfinite == 1  # 1 miss is within 5%
    assert not check_loose(out, ref, max_mismatch_frac=0.0).passed


def test_nan_everywhere_fails_both():
    ref = torch.randn(100)
    out = torch.full((100,), float("nan"))
    assert not check_loose(out, ref).passed
    assert not check_strict(out, ref).passed


def test_infinite_reference_does_not_excuse_a_nan():
    ref = torch.tensor([float("inf"), 1.0])
    out = torch.tensor([float("nan"), 1.0])
    assert check_loose(out, ref, max_mismatch_frac=0.0).mismatches == 1
    assert not check_strict(out, ref).passed


def test_identical_minus_inf_is_accepted_for_log_sum_exp():
    # The lse of a query that sees no row is -inf in both; elsewhere compare as usual.
    ref = torch.tensor([float("-inf"), 2.0, 3.0])
    assert check_strict(torch.tensor([float("-inf"), 2.0, 3.0]), ref).passed
    assert not check_strict(torch.tensor([0.0, 2.0, 3.0]), ref).passed
    assert not check_strict(torch.tensor([float("-inf"), 2.0, float("-inf")]), ref).passed


def test_all_zero_reference_uses_the_absolute_norm():
    ref = torch.zeros(2, 16, 512)
    assert check_strict(torch.zeros_like(ref), ref).passed
    out = torch.zeros_like(ref)
    out[0, 0, 0] = 0.005
    result = check_strict(out, ref)
    assert result.passed and result.rel_l2 == pytest.approx(0.005)
    out[0, 0, 1] = 0.05
    result = check_strict(out, ref)
    assert not result.passed and "all zero" in result.message


def test_shape_mismatch_fails_without_raising():
    result = check_strict(torch.zeros(2, 16, 512), torch.zeros(2, 16, 576))
    assert not result.passed and "shape" in result.message
    assert not check_loose(torch.zeros(3), torch.zeros(4)).passed


def test_output_on_another_dtype_is_compared_to_the_reference():
    ref = torch.randn(8, 16, 512, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    out = ref.to(torch.bfloat16)
    result = check_strict(out, ref)
    # bf16 keeps 8 significant bits: relative rounding error at most 2**-9 per element.
    assert result.passed and 0 < result.rel_l2 <= 2.0 ** -9


def test_result_is_frozen_and_inputs_must_be_tensors():
    result = check_strict(torch.ones(3), torch.ones(3))
    assert isinstance(result, CheckResult)
    with pytest.raises(dataclasses.FrozenInstanceError):
        result.passed = False
    with pytest.raises(TypeError, match="torch.Tensor"):
        check_strict([1.0], torch.ones(1))
    with pytest.raises(TypeError, match="torch.Tensor"):
        check_loose(torch.ones(1), 1.0)


def test_message_names_the_worst_element_and_counts():
    ref = torch.zeros(4, 4)
    ref[:, :] = 1.0
    out = ref.clone()
    out[2, 3] = 1.5
    out[1, 1] = 1.2
    result = check_strict(out, ref)
    assert result.worst_index == (2, 3) and result.max_abs_err == 0.5
    assert "(2, 3)" in result.message and "out 1.5" in result.message and "ref 1" in result.message
    assert result.mismatches == 2  # both errors exceed 1e-2 x RMS(ref) = 0.01
    assert "2 of 16" in result.message
