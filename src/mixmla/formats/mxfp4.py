"""OCP MXFP4 (E2M1 values, one E8M0 exponent per 32) quantization and exact dequantization.

The quantizer reproduces, bit for bit, the producer the benchmark used (docs/SPEC.md): per block of 32
consecutive values, round the float32 amax up by adding ``0x200000`` to its bits and keeping only
the exponent, take ``floor(log2(.)) - 2`` clamped to [-127, 127] as the block exponent, divide by
``2**exponent``, round to nearest-even on the E2M1 grid, saturate at 6. Two codes per byte, value
``2j`` in the low nibble of byte ``j``.
"""

from __future__ import annotations

import torch

from .cache import HEAD_DIM, MX_BLOCK, MX_SCALES_PER_ROW, Mxfp4Cache

#: E2M1 magnitudes of codes 0..7 (bit 3 is the sign).
E2M1_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
# Midpoints between neighbouring grid values, and whether a tie there rounds up (to the even code).
_MIDPOINTS = (0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0)
_TIE_ROUNDS_UP = (False, True, False, True, False, True, False)

SCALE_PAD_COLS = 24  #: the producer pads the scale tensor to 24 columns ...
SCALE_PAD_ROWS = 256  #: ... and to a multiple of 256 rows


def e2m1_encode(v: torch.Tensor) -> torch.Tensor:
    """E2M1 code (uint8, 0..15) of each float32 value already divided by its block scale.

    Round to nearest, ties to the even code; |v| >= 6 saturates to 6; the sign bit is copied, so a
    negative value that rounds to zero becomes code 8 (negative zero). NaN encodes as 0.
    """
    a = v.abs()
    code = torch.zeros_like(a, dtype=torch.uint8)
    for mid, up in zip(_MIDPOINTS, _TIE_ROUNDS_UP):
        code += (a >= mid) if up else (a > mid)
    return code | (torch.signbit(v).to(torch.uint8) << 3)


def e2m1_decode(code: torch.Tensor) -> torch.Tensor:
    """float32 value of each E2M1 code (uint8, low 4 bits used)."""
    table = torch.tensor(E2M1_VALUES + tuple(-x for x in E2M1_VALUES), dtype=torch.float32, device=code.device)
    return table[(code & 0xF).long()]


def block_exponent(amax: torch.Tensor) -> torch.Tensor:
    """The producer's unbiased block exponent (int32) from the float32 block amax."""
    bits = amax.float().contiguous().view(torch.int32)
    rounded = ((bits + 0x200000) & 0x7F800000).view(torch.float32)
    return (torch.floor(torch.log2(rounded)) - 2).clamp(-127, 127).to(torch.int32)


def quantize_mxfp4(x: torch.Tensor, pad_scales: bool = True) -> Mxfp4Cache:
    """Quantize a cache to MXFP4 exactly as the benchmark's producer does.

    x: (N, 576) or (N, 1, 576), any float dtype, any device.
    pad_scales: lay the scales out as the producer does, (ceil(N/256)*256, 24) with only columns
    0..17 of the first N rows meaningful (the padding holds 127, i.e. 2**0); False gives (N, 18).
    Returns ``Mxfp4Cache`` with data (N, 1, 288) uint8 and the E8M0 scale bytes as uint8.
    """
    if not isinstance(x, torch.Tensor) or not x.dtype.is_floating_point:
        raise TypeError(f"x must be a floating-point tensor, got {getattr(x, 'dtype', type(x).__name__)}")
    if x.shape[-1] != HEAD_DIM or x.dim() not in (2, 3) or (x.dim() == 3 and x.shape[1] != 1):
        raise ValueError(f"x must have shape (N, {HEAD_DIM}) or (N, 1, {HEAD_DIM}), got {tuple(x.shape)}")
    n = x.shape[0]
    blocks = x.reshape(n, MX_SCALES_PER_ROW, MX_BLOCK).float()
    exponent = block_exponent(blocks.abs().amax(dim=-1))  # (N, 18)
    scaled = torch.ldexp(blocks, (-exponent).unsqueeze(-1).float())
    codes = e2m1_encode(scaled).reshape(n, HEAD_DIM)
    packed = (codes[:, 0::2] | (codes[:, 1::2] << 4)).reshape(n, 1, HEAD_DIM // 2)
    scale_bytes = (exponent + 127).to(torch.uint8)
    if pad_scales:
        rows = max(SCALE_PAD_ROWS, -(-n // SCALE_PAD_ROWS) * SCALE_PAD_ROWS)
        padded = torch.full((rows, SCALE_PAD_COLS), 127, dtype=torch.uint8, device=x.device)
        padded[:n, :MX_SCALES_PER_ROW] = scale_bytes
        scale_bytes = padded
    return Mxfp4Cache(packed, scale_bytes)


def dequantize_mxfp4(cache: Mxfp4Cache, dtype: torch.dtype = torch.float32, rows: slice = slice(None)) -> torch.Tensor:
    """Exact values of ``rows`` as a (rows, 576) tensor of ``dtype``; scale byte 255 gives NaN."""
    packed = cache.data[rows]
    n = packed.shape[0]
    codes = torch.stack((packed & 0xF, packed >> 4), dim=-1).reshape(n, MX_SCALES_PER_ROW, MX_BLOCK)
    scale_bytes = cache.scales[: cache.num_tokens][rows][:, :MX_SCALES_PER_ROW]
    exponent = scale_bytes.to(torch.float32) - 127
    exponent = torch.where(scale_bytes == 255, torch.full_like(exponent, float("nan")), exponent)
    values = torch.ldexp(e2m1_decode(codes), exponent.unsqueeze(-1))
    return values.reshape(n, HEAD_DIM).to(dtype)
