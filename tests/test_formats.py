"""Cache formats: quantizers against hand-computed vectors and an independent scalar producer.

Expected bytes here are derived by hand (the derivation is in the comments) or by
``_producer_reference``, a scalar pure-Python rewrite of docs/SPEC.md's producer that shares no code
with ``mixmla.formats``.
"""

from __future__ import annotations

import math
import struct

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mixmla.formats import (
    Bf16Cache,
    Fp8Cache,
    Mxfp4Cache,
    as_cache,
    dequantize,
    dequantize_mxfp4,
    e2m1_decode,
    e2m1_encode,
    quantize,
    quantize_fp8,
    quantize_mxfp4,
)

GRID = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]  # E2M1 magnitudes of codes 0..7 (OCP MX spec)


# ------------------------------------------------------------------------------------------
# An independent scalar producer (docs/SPEC.md), for bit-exact comparisons on arbitrary data.
# ------------------------------------------------------------------------------------------

def _f32_bits(x: float) -> int:
    return struct.unpack("<I", struct.pack("<f", x))[0]


def _to_f32(x: float) -> float:
    return struct.unpack("<f", struct.pack("<f", x))[0]


def _producer_exponent(amax: float) -> int:
    """Unbiased block exponent: round amax up by 0x200000 in its float32 bits, keep the exponent
    field only, floor(log2) - 2, clamped to [-127, 127]."""
    biased = ((_f32_bits(amax) + 0x200000) & 0x7F800000) >> 23
    if biased == 0:  # zero (or a subnormal that stayed below 2**-126): log2(0) = -inf, clamped
        return -127
    return max(-127, min(127, biased - 127 - 2))


def _nearest_even_code(scaled: float) -> int:
    """E2M1 code of ``scaled`` by brute force: the nearest grid value, ties to the even code,
    saturating at 6; the sign bit follows the sign of ``scaled`` (so -0.1 -> code 8)."""
    magnitude = min(abs(scaled), 6.0)
    best = min(range(8), key=lambda c: (abs(GRID[c] - magnitude), c % 2))
    return best | (8 if math.copysign(1.0, scaled) < 0 else 0)


def _producer_reference(rows: list[list[float]]) -> tuple[list[list[int]], list[list[int]]]:
    """(packed bytes per row: 288 ints, scale bytes per row: 18 ints) for float32-representable rows."""
    packed_rows, scale_rows = [], []
    for row in rows:
        codes, scales = [], []
        for k in range(18):
            block = row[32 * k: 32 * k + 32]
            e = _producer_exponent(max(abs(v) for v in block))
            scales.append(e + 127)
            codes.extend(_nearest_even_code(v * 2.0 ** (-e)) for v in block)
        packed_rows.append([codes[2 * j] | (codes[2 * j + 1] << 4) for j in range(288)])
        scale_rows.append(scales)
    return packed_rows, scale_rows


def _row_with_block(block: list[float], block_index: int = 0, fill: float = 1.0) -> torch.Tensor:
    """A (1, 576) float32 row: ``block`` (<= 32 values, rest zero) at block ``block_index``, other
    blocks constant ``fill``."""
    row = torch.full((1, 576), fill, dtype=torch.float32)
    row[0, 32 * block_index: 32 * block_index + 32] = 0.0
    row[0, 32 * block_index: 32 * block_index + len(block)] = torch.tensor(block, dtype=torch.float32)
    return row


def _codes(cache: Mxfp4Cache, row: int = 0) -> list[int]:
    packed = cache.data[row].tolist()
    return [c for b in packed for c in (b & 0xF, b >> 4)]


# ------------------------------------------------------------------------------------------
# E2M1 codes
# ------------------------------------------------------------------------------------------

def test_all_16_e2m1_codes_decode_to_the_ocp_values():
    decoded = e2m1_decode(torch.arange(16, dtype=torch.uint8)).tolist()
    assert decoded == [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0]
    assert math.copysign(1.0, decoded[8]) == -1.0  # code 8 is negative zero


def test_decode_ignores_the_high_nibble():
    assert e2m1_decode(torch.tensor([0x97, 0xF3], dtype=torch.uint8)).tolist() == [6.0, 1.5]


def test_every_grid_point_encodes_to_its_code():
    values = torch.tensor(GRID + [-g for g in GRID], dtype=torch.float32)
    assert e2m1_encode(values).tolist() == list(range(16))


@pytest.mark.parametrize(
    "midpoint, code",
    # Ties go to the even code: 0.25 between 0 (code 0) and 0.5 (code 1) -> 0; 0.75 between 0.5 (1)
    # and 1 (2) -> 2; 1.25 between 1 (2) and 1.5 (3) -> 2; 1.75 -> 2.0 (4); 2.5 -> 2.0 (4);
    # 3.5 -> 4.0 (6); 5.0 between 4 (6) and 6 (7) -> 6.
    [(0.25, 0), (0.75, 2), (1.25, 2), (1.75, 4), (2.5, 4), (3.5, 6), (5.0, 6)],
)
def test_midpoint_ties_round_to_the_even_code(midpoint, code):
    # The float32 neighbours of the midpoint are no ties and round to the nearer side.
    below32 = struct.unpack("<f", struct.pack("<I", _f32_bits(midpoint) - 1))[0]
    above32 = struct.unpack("<f", struct.pack("<I", _f32_bits(midpoint) + 1))[0]
    assert below32 < midpoint < above32
    got = e2m1_encode(torch.tensor([midpoint, -midpoint, below32, above32], dtype=torch.float32)).tolist()
    lower_code = max(c for c in range(8) if GRID[c] < midpoint)
    assert got == [code, code | 8, lower_code, lower_code + 1]


def test_encode_saturates_at_six():
    values = torch.tensor([6.0, 6.5, 7.0, 100.0, 3e38, math.inf, -7.0, -math.inf], dtype=torch.float32)
    assert e2m1_encode(values).tolist() == [7, 7, 7, 7, 7, 7, 15, 15]


def test_negative_values_that_round_to_zero_keep_the_sign():
    values = torch.tensor([-0.0, -0.1, -0.25, 0.0, 0.1], dtype=torch.float32)
    assert e2m1_encode(values).tolist() == [8, 8, 8, 0, 0]


@settings(max_examples=200, deadline=None)
@given(st.floats(min_value=-8.0, max_value=8.0, width=32))
def test_encode_matches_brute_force_nearest_even(v):
    assert int(e2m1_encode(torch.tensor([v], dtype=torch.float32))[0]) == _nearest_even_code(v)


# ------------------------------------------------------------------------------------------
# MXFP4 quantizer: hand-computed blocks
# ------------------------------------------------------------------------------------------

def test_zero_block_has_scale_byte_0_and_codes_0():
    # amax 0: log2(0) = -inf, the exponent clamps at -127, biased byte 0.
    cache = quantize_mxfp4(torch.zeros(2, 576))
    assert cache.scales[:2, :18].tolist() == [[0] * 18] * 2
    assert cache.data.tolist() == [[0] * 288] * 2
    assert dequantize(cache).abs().max().item() == 0.0


def test_block_amax_exactly_a_power_of_two():
    # amax 4.0 = 2**2: bits 0x40800000 + 0x200000 keeps the exponent, floor(log2 4) - 2 = 0,
    # byte 127, scale 1: the values are encoded as they are.
    block = [4.0, -1.0, 0.5, 3.0, -0.0, 1.75]
    cache = quantize_mxfp4(_row_with_block(block))
    assert int(cache.scales[0, 0]) == 127
    # 4 -> 6, -1 -> 8|2, 0.5 -> 1, 3 -> 5, -0 -> 8, 1.75 (tie) -> 4 (2.0); then zeros.
    assert _codes(cache)[:8] == [6, 10, 1, 5, 8, 4, 0, 0]
    # amax 2**-10: exponent -12, byte 115; the amax itself is 4 * 2**-12 -> code 6.
    cache = quantize_mxfp4(_row_with_block([2.0 ** -10, -(2.0 ** -12)]))
    assert int(cache.scales[0, 0]) == 115
    assert _codes(cache)[:2] == [6, 10]


@pytest.mark.parametrize("k", [-100, -20, -1, 0, 1, 3, 20, 100])
def test_amax_round_up_boundary_at_1_75(k):
    # 1.75 * 2**k has mantissa bits 0x600000; + 0x200000 carries into the exponent -> 2**(k+1),
    # so the block exponent is (k+1) - 2 = k-1 (byte k+126) and 1.75*2**k / 2**(k-1) = 3.5 -> tie
    # -> 4.0 (code 6). 1.74 * 2**k does not carry: exponent k-2 (byte k+125) and
    # 1.74*2**k / 2**(k-2) = 6.96 -> saturates to 6 (code 7).
    hi = _to_f32(1.75 * 2.0 ** k)
    lo = _to_f32(1.74 * 2.0 ** k)
    x = torch.cat([_row_with_block([hi]), _row_with_block([lo])])
    cache = quantize_mxfp4(x, pad_scales=False)
    assert cache.scales[:, 0].tolist() == [k + 126, k + 125]
    assert _codes(cache, 0)[0] == 6 and _codes(cache, 1)[0] == 7
    assert dequantize(cache)[:, 0].tolist() == [2.0 ** (k + 1), 1.5 * 2.0 ** k]


def test_block_just_below_the_round_up_boundary():
    # The largest float32 below 1.75 has mantissa 0x5FFFFF; + 0x200000 = 0x7FFFFF, no carry:
    # exponent 0 - 2 = -2 (byte 125), and 1.7499999 * 4 = 6.9999995 saturates to 6.
    below = struct.unpack("<f", struct.pack("<I", _f32_bits(1.75) - 1))[0]
    cache = quantize_mxfp4(_row_with_block([below]), pad_scales=False)
    assert int(cache.scales[0, 0]) == 125 and _codes(cache)[0] == 7


def test_saturation_above_six_within_a_block():
    # amax 7.0: bits 0x40E00000 (mantissa 0x600000) + 0x200000 carries -> 8.0, exponent 3-2 = 1,
    # byte 128, scale 2. 7/2 = 3.5 tie -> 4 (code 6); 6.9/2 = 3.45 -> 3 (code 5); -5/2 = -2.5 tie
    # -> -2 (code 12). amax 6.5: mantissa 0x500000, no carry, exponent 0, byte 127: 6.5 -> 6 (7).
    cache = quantize_mxfp4(torch.cat([_row_with_block([7.0, 6.9, -5.0]), _row_with_block([6.5, -6.2])]),
                           pad_scales=False)
    assert cache.scales[:, 0].tolist() == [128, 127]
    assert _codes(cache, 0)[:3] == [6, 5, 12]
    assert _codes(cache, 1)[:2] == [7, 15]


def test_subnormal_half_code():
    # amax 8 = 2**3: exponent 1, scale 2, 8/2 = 4 (code 6). 1.0/2 = 0.5 is E2M1's subnormal
    # (code 1); 0.5/2 = 0.25 is a tie -> 0; 0.6/2 = 0.3 -> 0.5 (code 1); -0.4/2 = -0.2 -> -0
    # (code 8); -1.2/2 = -0.6 -> -0.5 (code 9).
    cache = quantize_mxfp4(_row_with_block([8.0, 1.0, 0.5, 0.6, -0.4, -1.2]), pad_scales=False)
    assert int(cache.scales[0, 0]) == 128
    assert _codes(cache)[:6] == [6, 1, 0, 1, 8, 9]
    assert dequantize(cache)[0, :6].tolist() == [8.0, 1.0, 0.0, 1.0, -0.0, -1.0]


def test_byte_packing_order_low_nibble_holds_the_even_value():
    # Each block holds the 16 signed grid values twice (amax 6: mantissa 0x400000 + 0x200000 =
    # 0x600000, no carry, exponent 2-2 = 0, scale 1), so value i has code i % 16 and
    # byte j = code(2j) | code(2j+1) << 4 = (2j % 16) | ((2j+1) % 16) << 4.
    signed_grid = GRID + [-g for g in GRID]
    row = torch.tensor([[signed_grid[i % 16] for i in range(576)]], dtype=torch.float32)
    cache = quantize_mxfp4(row, pad_scales=False)
    expected = [((2 * j) % 16) | (((2 * j + 1) % 16) << 4) for j in range(288)]
    assert cache.data[0].tolist() == expected
    assert expected[:4] == [0x10, 0x32, 0x54, 0x76]
    assert cache.scales[0].tolist() == [127] * 18


def test_scale_byte_k_covers_values_32k_to_32k_plus_31():
    # Block k holds the constant 2**k (k = 0..17): exponent k-2, byte k+125.
    row = torch.tensor([[2.0 ** (i // 32) for i in range(576)]])
    cache = quantize_mxfp4(row, pad_scales=False)
    assert cache.scales[0].tolist() == [k + 125 for k in range(18)]
    assert dequantize(cache)[0].tolist() == row[0].tolist()


# ------------------------------------------------------------------------------------------
# MXFP4 dequantizer: hand-made bytes
# ------------------------------------------------------------------------------------------

def _mx(data_rows: list[list[int]], scale_rows: list[list[int]]) -> Mxfp4Cache:
    return Mxfp4Cache(torch.tensor(data_rows, dtype=torch.uint8), torch.tensor(scale_rows, dtype=torch.uint8))


def test_dequantize_hand_bytes():
    # byte 0x97: low nibble 7 -> 6, high nibble 9 -> -0.5; scale byte 130 -> 2**3.
    # byte 0x2A: low A -> -1, high 2 -> 1. Block 1 (bytes 16..31) has scale byte 0 -> 2**-127.
    data = [0x97, 0x2A] + [0] * 14 + [0x02] + [0] * 271
    scales = [130, 0] + [127] * 16
    values = dequantize(_mx([data], [scales]))[0]
    assert values[:4].tolist() == [48.0, -4.0, -8.0, 8.0]
    assert values[32].item() == 2.0 ** -127  # code 2 (1.0) times 2**-127, a float32 subnormal
    assert values[33].item() == 0.0


def test_nan_scale_byte_255_gives_nan_for_its_block_only():
    data = [0x11] * 288
    scales = [255] + [127] * 17
    values = dequantize(_mx([data], [scales]))[0]
    assert torch.isnan(values[:32]).all()
    assert values[32:].tolist() == [0.5] * 544


def test_padded_and_unpadded_scales():
    x = torch.randn(300, 576, generator=torch.Generator().manual_seed(0))
    padded = quantize_mxfp4(x)
    plain = quantize_mxfp4(x, pad_scales=False)
    assert tuple(padded.scales.shape) == (512, 24)  # rows to a multiple of 256, 24 columns
    assert tuple(plain.scales.shape) == (300, 18)
    assert torch.equal(padded.scales[:300, :18], plain.scales)
    assert torch.equal(padded.data, plain.data)
    assert torch.equal(dequantize(padded), dequantize(plain))
    assert tuple(quantize_mxfp4(torch.randn(1, 576)).scales.shape) == (256, 24)
    assert tuple(quantize_mxfp4(torch.randn(256, 576)).scales.shape) == (256, 24)


def test_scales_with_extra_rows_and_columns_are_ignored_and_row_stride_is_honoured():
    x = torch.randn(5, 576, generator=torch.Generator().manual_seed(1))
    plain = quantize_mxfp4(x, pad_scales=False)
    wide = torch.full((9, 40), 255, dtype=torch.uint8)  # garbage (NaN scale) in the padding
    wide[:5, :18] = plain.scales
    assert torch.equal(dequantize(Mxfp4Cache(plain.data, wide)), dequantize(plain))
    # A column slice: row stride 40, not 18 or 24.
    view = wide[:, :20]
    assert view.stride() == (40, 1)
    assert torch.equal(dequantize(Mxfp4Cache(plain.data, view)), dequantize(plain))
    # Dequantizing a row range reads that range's scales.
    assert torch.equal(dequantize_mxfp4(Mxfp4Cache(plain.data, wide), rows=slice(2, 4)), dequantize(plain)[2:4])


def test_torch_fp4_and_e8m0_views_dequantize_like_uint8():
    fp4 = getattr(torch, "float4_e2m1fn_x2", None)
    e8m0 = getattr(torch, "float8_e8m0fnu", None)
    if fp4 is None or e8m0 is None:
        pytest.skip("this torch has no float4_e2m1fn_x2 / float8_e8m0fnu")
    x = torch.randn(7, 576, generator=torch.Generator().manual_seed(2))
    cache = quantize_mxfp4(x)
    reference = dequantize(cache)
    for data in (cache.data, cache.data.view(fp4)):
        for scales in (cache.scales, cache.scales.view(e8m0)):
            assert torch.equal(dequantize((data, scales)), reference)
            assert torch.equal(dequantize((data.reshape(7, 1, 288), scales)), reference)
    # torch's own e8m0 -> float32 conversion agrees with 2**(byte - 127).
    scale_values = cache.scales[:7, :18].view(e8m0).float()
    assert torch.equal(scale_values, torch.pow(2.0, cache.scales[:7, :18].float() - 127))


def test_quantize_mxfp4_matches_an_independent_scalar_producer():
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(6, 576, generator=gen)
    x[1] *= 1e-3
    x[2] *= 1e4
    x[3, :32] = 0.0  # zero block
    x[4, 32:64] = torch.tensor(GRID * 4) * 0.25  # exact grid points and ties after scaling
    x[5] = torch.randint(-12, 13, (576,), generator=gen).float() * 0.25  # many ties
    packed, scales = _producer_reference(x.tolist())
    cache = quantize_mxfp4(x)
    assert cache.data.tolist() == packed
    assert cache.scales[:6, :18].tolist() == scales


@settings(max_examples=100, deadline=None)
@given(st.lists(st.floats(min_value=-1e6, max_value=1e6, width=32), min_size=32, max_size=32),
       st.integers(min_value=-60, max_value=60), st.integers(min_value=0, max_value=17))
def test_quantize_mxfp4_property_matches_independent_producer(block, shift, block_index):
    row = [0.0] * 576
    # float32-representable, as the input will be
    row[32 * block_index: 32 * block_index + 32] = [_to_f32(v * 2.0 ** shift) for v in block]
    packed, scales = _producer_reference([row])
    cache = quantize_mxfp4(torch.tensor([row], dtype=torch.float32), pad_scales=False)
    assert cache.data[0].tolist() == packed[0]
    assert cache.scales[0].tolist() == scales[0]


def test_mxfp4_round_trip_error_bound_on_gaussian_data():
    x = torch.randn(64, 576, generator=torch.Generator().manual_seed(4), dtype=torch.float32)
    y = dequantize(quantize_mxfp4(x))
    blocks, err = x.reshape(-1, 32), (y - x).reshape(-1, 32)
    # Per block with amax in [2**k, 2**(k+1)): below 1.75*2**k the exponent is e = k-2, so
    # amax/2**e lies in [4, 7); from 1.75*2**k up it is e = k-1 and amax/2**e lies in [3.5, 4).
    # Either way 2**e <= amax/3.5 and every scaled value is below 7, where the worst error is 1
    # (half the 4..6 gap, or saturating 7 -> 6): |err| <= 2**e <= amax/3.5.
    amax = blocks.abs().amax(dim=1, keepdim=True)
    assert (err.abs() <= amax / 3.5 * (1 + 1e-6)).all()
    # Values below amax/4 scale to below 7/4 < 2, where the grid step is 0.5: |err| <= 2**e/4.
    small = blocks.abs() < amax / 4
    assert (err.abs()[small] <= (amax / 14 * (1 + 1e-6)).expand_as(blocks)[small]).all()
    rel_l2 = (torch.linalg.vector_norm(y - x) / torch.linalg.vector_norm(x)).item()
    assert 0.05 < rel_l2 < 0.2  # 4-bit: about 0.1 on Gaussian data


def test_mxfp4_accepts_bf16_and_3d_input():
    x = torch.randn(3, 1, 576, generator=torch.Generator().manual_seed(5)).to(torch.bfloat16)
    a = quantize_mxfp4(x)
    b = quantize_mxfp4(x.float().reshape(3, 576))
    assert torch.equal(a.data, b.data) and torch.equal(a.scales, b.scales)


# ------------------------------------------------------------------------------------------
# fp8
# ------------------------------------------------------------------------------------------

FP8_CASES = [
    # dtype, largest finite, smallest subnormal (e4m3fn: bias 7 -> 2**-9; fnuz: bias 8 -> 2**-10)
    (torch.float8_e4m3fn, 448.0, 2.0 ** -9),
    (torch.float8_e4m3fnuz, 240.0, 2.0 ** -10),
]


@pytest.mark.parametrize("dtype, fmax, min_subnormal", FP8_CASES)
def test_fp8_scale_is_amax_over_fmax_and_round_trip_is_bounded(dtype, fmax, min_subnormal):
    x = torch.randn(200, 1, 576, generator=torch.Generator().manual_seed(6)).to(torch.bfloat16)
    cache = quantize_fp8(x, dtype)
    assert cache.data.dtype == dtype and tuple(cache.data.shape) == (200, 576)
    amax = x.float().abs().max()
    assert cache.scale.dtype == torch.float32 and tuple(cache.scale.shape) == (1,)
    assert cache.scale.item() == pytest.approx((amax / fmax).item(), rel=1e-7)
    # The amax element lands exactly on +-fmax.
    flat = x.float().reshape(-1)
    i = int(flat.abs().argmax())
    assert abs(cache.data.reshape(-1)[i].float().item()) == fmax
    # e4m3 has 3 mantissa bits: half an ulp is 2**-4 relative for normals; below the normals the
    # absolute step is the smallest subnormal, half of it at most off. Slack for float32 division.
    y = dequantize(cache, torch.float64).reshape(-1)
    scale = cache.scale.double().item()
    bound = torch.maximum(flat.double().abs() * 2.0 ** -4, torch.tensor(min_subnormal / 2 * scale)) * (1 + 1e-6)
    assert ((y - flat.double()).abs() <= bound).all()
    rel_l2 = (torch.linalg.vector_norm(y - flat.double()) / torch.linalg.vector_norm(flat.double())).item()
    assert rel_l2 < 0.04


@pytest.mark.parametrize("dtype", [torch.float8_e4m3fn, torch.float8_e4m3fnuz])
def test_fp8_hand_values(dtype):
    fmax = torch.finfo(dtype).max
    # amax 2*fmax -> scale 2: values are halved, then rounded to e4m3, whose grid near 1 is
    # 1 + k/8: 1.0625 is the tie between 1 and 1.125 -> 1.0 (even mantissa), 1.1875 the tie
    # between 1.125 and 1.25 -> 1.25.
    x = torch.tensor([[2 * fmax, -2.0, 2.125, 2.375] + [0.0] * 572])
    cache = quantize_fp8(x, dtype)
    assert cache.scale.item() == 2.0
    assert cache.data[0, :4].float().tolist() == [fmax, -1.0, 1.0, 1.25]
    assert dequantize(cache)[0, :4].tolist() == [2 * fmax, -2.0, 2.0, 2.5]


def test_fp8_of_zeros_and_of_an_empty_cache():
    cache = quantize_fp8(torch.zeros(4, 576))
    assert cache.scale.item() > 0 and dequantize(cache).abs().max().item() == 0.0
    empty = quantize_fp8(torch.zeros(0, 1, 576, dtype=torch.bfloat16))
    assert tuple(empty.data.shape) == (0, 576) and math.isfinite(empty.scale.item()) and empty.scale.item() > 0
    assert tuple(dequantize(empty).shape) == (0, 576)
    assert tuple(quantize_mxfp4(torch.zeros(0, 576)).data.shape) == (0, 288)


def test_quantize_dispatch():
    x = torch.randn(4, 576, generator=torch.Generator().manual_seed(7))
    assert isinstance(quantize(x, "bf16"), Bf16Cache)
    assert isinstance(quantize(x, "fp8"), Fp8Cache)
    assert isinstance(quantize(x, "mxfp4"), Mxfp4Cache)
    assert torch.equal(dequantize(quantize(x, "bf16")), x.to(torch.bfloat16).float())
    with pytest.raises(ValueError, match="unknown format"):
        quantize(x, "int4")


# ------------------------------------------------------------------------------------------
# Containers: benchmark forms and bad inputs
# ------------------------------------------------------------------------------------------

def test_as_cache_accepts_the_benchmark_forms():
    x = torch.randn(3, 1, 576).to(torch.bfloat16)
    fp8, mx = quantize_fp8(x), quantize_mxfp4(x)
    assert isinstance(as_cache(x), Bf16Cache)
    assert isinstance(as_cache((fp8.data, fp8.scale)), Fp8Cache)
    assert isinstance(as_cache((mx.data, mx.scales)), Mxfp4Cache)
    assert as_cache(fp8) is fp8
    # A python float scale is accepted and stored as a float32 tensor.
    assert as_cache((fp8.data, 0.5)).scale.dtype == torch.float32


@pytest.mark.parametrize(
    "make, error, match",
    [
        (lambda: Bf16Cache(torch.zeros(4, 576)), TypeError, "bfloat16"),
        (lambda: Bf16Cache(torch.zeros(4, 575, dtype=torch.bfloat16)), ValueError, "576"),
        (lambda: Bf16Cache(torch.zeros(4, 2, 576, dtype=torch.bfloat16)), ValueError, "one KV head"),
        (lambda: Bf16Cache(torch.zeros(576, 4, dtype=torch.bfloat16).t()), ValueError,
         r"contiguous along its last dim.*got shape \(4, 576\) with strides \(1, 4\).*\.contiguous\(\)"),
        (lambda: Mxfp4Cache(torch.zeros(4, 288, dtype=torch.uint8), torch.zeros(24, 4, dtype=torch.uint8).t()),
         ValueError, r"scales must be contiguous.*got shape \(4, 24\) with strides \(1, 4\).*\.contiguous\(\)"),
        (lambda: Bf16Cache([[0.0] * 576]), TypeError, "torch.Tensor"),
        (lambda: as_cache(torch.zeros(4, 576, dtype=torch.float8_e4m3fn)), TypeError, "needs its scale"),
        (lambda: Fp8Cache(torch.zeros(4, 576, dtype=torch.bfloat16), torch.ones(1)), TypeError, "float8"),
        (lambda: Fp8Cache(torch.zeros(4, 576, dtype=torch.float8_e4m3fn), torch.ones(2)), ValueError, "one value"),
        (lambda: Fp8Cache(torch.zeros(4, 576, dtype=torch.float8_e4m3fn), torch.ones(1, dtype=torch.int32)),
         TypeError, "float"),
        (lambda: Mxfp4Cache(torch.zeros(4, 288, dtype=torch.uint8), torch.zeros(3, 18, dtype=torch.uint8)),
         ValueError, "too small"),
        (lambda: Mxfp4Cache(torch.zeros(4, 288, dtype=torch.uint8), torch.zeros(4, 17, dtype=torch.uint8)),
         ValueError, "too small"),
        (lambda: Mxfp4Cache(torch.zeros(4, 288, dtype=torch.uint8), torch.zeros(4, 18, dtype=torch.int32)),
         TypeError, "uint8"),
        (lambda: Mxfp4Cache(torch.zeros(4, 288), torch.zeros(4, 18, dtype=torch.uint8)), TypeError, "uint8"),
        (lambda: Mxfp4Cache(torch.zeros(4, 576, dtype=torch.uint8), torch.zeros(4, 18, dtype=torch.uint8)),
         ValueError, "288"),
        (lambda: Mxfp4Cache(torch.zeros(4, 288, dtype=torch.uint8), torch.zeros(72, dtype=torch.uint8)),
         ValueError, "2-D"),
        (lambda: as_cache("bf16"), TypeError, "cache must be"),
        (lambda: quantize_mxfp4(torch.zeros(4, 512)), ValueError, "576"),
        (lambda: quantize_mxfp4(torch.zeros(4, 576, dtype=torch.int32)), TypeError, "floating-point"),
        (lambda: quantize_fp8(torch.zeros(4, 576), torch.float16), TypeError, "float8"),
        (lambda: quantize_fp8(torch.full((4, 576), float("nan"))), ValueError, "NaN"),
    ],
)
def test_bad_inputs_raise_clear_errors(make, error, match):
    with pytest.raises(error, match=match):
        make()


@pytest.mark.parametrize("fmt", ["fp8", "mxfp4"])
@pytest.mark.parametrize("layout", ["transposed", "permuted-3d", "strided-rows"])
def test_quantizers_take_any_strides_and_give_the_contiguous_result(fmt, layout):
    """A quantizer makes a new cache, so the input's layout is free: a transposed (N, 576) or
    permuted (N, 1, 576) tensor, or rows inside a wider buffer, give the bytes of the contiguous
    input, laid out as the cache containers need."""
    x = torch.randn(5, 1, 576, generator=torch.Generator().manual_seed(11))
    if layout == "transposed":
        given = x[:, 0].t().contiguous().t()
    elif layout == "permuted-3d":
        given = x.permute(2, 1, 0).contiguous().permute(2, 1, 0)
    else:
        wide = torch.randn(5, 1, 640)
        wide[..., :576] = x
        given = wide[..., :576]
    assert given.stride() != x.reshape(given.shape).contiguous().stride() and torch.equal(given, x.reshape(given.shape))
    want, got = quantize(x.reshape(given.shape).contiguous(), fmt), quantize(given, fmt)
    if fmt == "fp8":
        assert torch.equal(got.data.view(torch.uint8), want.data.view(torch.uint8)) and torch.equal(got.scale, want.scale)
    else:
        assert torch.equal(got.data, want.data) and torch.equal(got.scales, want.scales)
    assert got.data.is_contiguous()
