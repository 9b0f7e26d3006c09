"""KV-cache formats: containers, quantizers and exact dequantization (plain PyTorch, CPU or GPU)."""

from __future__ import annotations

import torch

from .cache import (
    FORMATS,
    HEAD_DIM,
    MX_BLOCK,
    MX_PACKED_DIM,
    MX_SCALES_PER_ROW,
    ROPE_DIM,
    VALUE_DIM,
    Bf16Cache,
    Fp8Cache,
    KVCache,
    Mxfp4Cache,
    as_cache,
)
from .fp8 import dequantize_fp8, quantize_fp8
from .paged import PagedCache, as_paged_cache, empty_paged_cache
from .mxfp4 import dequantize_mxfp4, e2m1_decode, e2m1_encode, quantize_mxfp4


def dequantize(cache, dtype: torch.dtype = torch.float32, rows: slice = slice(None)) -> torch.Tensor:
    """Exact values of any cache (container or benchmark form) as a (rows, 576) tensor of ``dtype``."""
    cache = as_cache(cache)
    if isinstance(cache, Bf16Cache):
        return cache.data[rows].to(dtype)
    if isinstance(cache, Fp8Cache):
        return dequantize_fp8(cache, dtype, rows)
    return dequantize_mxfp4(cache, dtype, rows)


def quantize(x: torch.Tensor, fmt: str) -> KVCache:
    """Quantize a (N, 576) cache to ``fmt`` ('bf16', 'fp8' or 'mxfp4')."""
    if fmt == "bf16":
        return Bf16Cache(x.to(torch.bfloat16))
    if fmt == "fp8":
        return quantize_fp8(x)
    if fmt == "mxfp4":
        return quantize_mxfp4(x)
    raise ValueError(f"unknown format {fmt!r}; expected one of {FORMATS}")


__all__ = [
    "FORMATS", "HEAD_DIM", "VALUE_DIM", "ROPE_DIM", "MX_BLOCK", "MX_PACKED_DIM", "MX_SCALES_PER_ROW",
    "Bf16Cache", "Fp8Cache", "Mxfp4Cache", "KVCache", "as_cache", "PagedCache", "as_paged_cache", "empty_paged_cache",
    "quantize", "quantize_fp8", "quantize_mxfp4", "dequantize", "dequantize_fp8", "dequantize_mxfp4",
    "e2m1_encode", "e2m1_decode",
]
