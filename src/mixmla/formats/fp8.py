"""Per-tensor fp8 (e4m3) quantization of a KV cache, and its exact dequantization."""

from __future__ import annotations

import torch

from .cache import FP8_DTYPES, Fp8Cache


def quantize_fp8(x: torch.Tensor, dtype: torch.dtype = torch.float8_e4m3fn) -> Fp8Cache:
    """Quantize a cache to fp8 with one float32 scale for the whole tensor.

    x: (N, 576) or (N, 1, 576), any float dtype, any device, any strides (the result is
    contiguous), finite (NaN or Inf is a ValueError).
    dtype: ``torch.float8_e4m3fn`` (NVIDIA) or ``torch.float8_e4m3fnuz`` (AMD MI300).
    Returns ``Fp8Cache`` with ``scale = amax / fp8_max`` (float32, shape (1,)) and
    ``data = clamp(x / scale)`` rounded to nearest-even in fp8, so ``x ~ data * scale``.
    The arithmetic is done in float32. An all-zero or empty tensor gets the scale ``1e-12 / fp8_max``.
    """
    if dtype not in FP8_DTYPES:
        raise TypeError(f"dtype must be float8_e4m3fn or float8_e4m3fnuz, got {dtype}")
    if not isinstance(x, torch.Tensor) or not x.dtype.is_floating_point:
        raise TypeError(f"x must be a floating-point tensor, got {getattr(x, 'dtype', type(x).__name__)}")
    fmax = torch.finfo(dtype).max
    xf = x.float()
    # An empty cache (every request of the batch has Lk = 0) is legal and gets the all-zero scale.
    amax = (xf.abs().amax() if xf.numel() else xf.new_zeros(())).clamp(min=1e-12)
    if not torch.isfinite(amax):
        raise ValueError("x holds NaN or Inf; fp8 per-tensor quantization needs finite values (the scale "
                         "comes from the largest magnitude)")
    scale = (amax / fmax).reshape(1)
    # A permuted x keeps its strides through the elementwise steps; the cache needs unit-stride rows.
    data = (xf / scale).clamp(-fmax, fmax).to(dtype).contiguous()
    return Fp8Cache(data, scale)


def dequantize_fp8(cache: Fp8Cache, dtype: torch.dtype = torch.float32, rows: slice = slice(None)) -> torch.Tensor:
    """Exact values ``data * scale`` of ``rows`` as a (rows, 576) tensor of ``dtype``.

    The product of a 4-bit-significand fp8 value and a float32 scale needs 28 bits: it is formed in
    float64 when float64 is asked for (the reference's ground truth), else in float32, which rounds
    it once, exactly as casting the float64 product would.
    """
    wide = torch.float64 if dtype == torch.float64 else torch.float32
    return (cache.data[rows].to(wide) * cache.scale.to(wide)).to(dtype)
