"""Cache layouts compared by the accuracy study: the kernels' three formats, the squared-error
MXFP4 quantizer, and layouts that keep the rope dims in bf16 beside a compressed latent.

The rope-in-bf16 layouts are what serving engines use to protect accuracy (DeepSeek's FlashMLA
fp8 cache: 512 fp8 latent values with one float32 scale per 128, then the 64 rope dims in bf16,
656 bytes per token). They are plain-torch quantize / dequantize helpers for the float64
reference only: the kernels do not read them (whether they should is what the study informs).

Every layout is quantized from the bf16 cache, as the benchmark and serving engines quantize the
bf16 values a model writes, and decoded exactly to float64.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from ..formats import (
    HEAD_DIM,
    MX_BLOCK,
    VALUE_DIM,
    Bf16Cache,
    dequantize,
    quantize_fp8,
    quantize_mxfp4,
)
from ..formats.mxfp4 import dequantize_mxfp4_blocks, pack_e2m1, quantize_mxfp4_blocks, unpack_e2m1

#: Latent values per float32 scale in the fp8 + bf16-rope layout (FlashMLA's choice).
FP8_LATENT_BLOCK = 128
_FP8 = torch.float8_e4m3fn


@dataclass(frozen=True)
class RopeBf16Cache:
    """A compressed latent (dims 0..511) beside the rope dims (512..575) kept in bf16.

    kind: ``"fp8"``: ``latent`` (N, 512) float8_e4m3fn, ``latent_scales`` (N, 4) float32, one per
    128 values (``x ~ latent * scale``); ``"mxfp4"``: ``latent`` (N, 256) uint8 packed E2M1 codes
    (value 2j in the low nibble of byte j), ``latent_scales`` (N, 16) uint8 E8M0 bytes, one per 32.
    rope: (N, 64) bfloat16.
    """

    kind: str
    latent: torch.Tensor
    latent_scales: torch.Tensor
    rope: torch.Tensor

    @property
    def num_tokens(self) -> int:
        return self.rope.shape[0]

    @property
    def bytes_per_token(self) -> int:
        """Bytes stored per token, counted from the tensors themselves."""
        return sum(t.element_size() * t[0].numel() for t in (self.latent, self.latent_scales, self.rope))


def _rows(x: torch.Tensor) -> torch.Tensor:
    """(N, 576) view of a (N, 576) or (N, 1, 576) float cache."""
    if (not isinstance(x, torch.Tensor) or not x.dtype.is_floating_point or x.shape[-1] != HEAD_DIM
            or x.dim() not in (2, 3)):
        raise ValueError(f"x must be a float tensor of shape (N, {HEAD_DIM}) or (N, 1, {HEAD_DIM}), "
                         f"got {getattr(x, 'dtype', type(x).__name__)} {tuple(getattr(x, 'shape', ()))}")
    return x.reshape(x.shape[0], HEAD_DIM)


def quantize_fp8_rope_bf16(x: torch.Tensor) -> RopeBf16Cache:
    """fp8 e4m3fn latent with one float32 scale per 128 values, rope dims in bf16 (656 bytes/token).

    x: (N, 576) or (N, 1, 576), any float dtype, any device. Each scale is the block's amax / 448
    rounded up to a power of two (so dividing by it is exact and the block's amax stays within the
    fp8 range); values are rounded to nearest-even in fp8. The rope dims are rounded to bf16.
    """
    x = _rows(x).float()
    n = x.shape[0]
    blocks = x[:, :VALUE_DIM].reshape(n, VALUE_DIM // FP8_LATENT_BLOCK, FP8_LATENT_BLOCK)
    fmax = torch.finfo(_FP8).max
    # The floor keeps an all-zero block's scale finite and positive; its values stay 0.
    amax = blocks.abs().amax(dim=-1).clamp(min=2.0 ** -100)
    scales = torch.exp2(torch.ceil(torch.log2(amax / fmax)))
    latent = (blocks / scales.unsqueeze(-1)).clamp(-fmax, fmax).to(_FP8).reshape(n, VALUE_DIM)
    return RopeBf16Cache("fp8", latent, scales, x[:, VALUE_DIM:].to(torch.bfloat16))


def quantize_mxfp4_rope_bf16(x: torch.Tensor, scale_rule: str = "benchmark") -> RopeBf16Cache:
    """MXFP4 latent (16 blocks of 32, E8M0 scales), rope dims in bf16 (400 bytes/token).

    x: (N, 576) or (N, 1, 576), any float dtype, any device. scale_rule: as in
    ``mixmla.formats.quantize_mxfp4`` ("benchmark" or "mse"); the latent blocks get exactly the
    bytes the full-row quantizer gives them.
    """
    x = _rows(x).float()
    n = x.shape[0]
    codes, exponent = quantize_mxfp4_blocks(x[:, :VALUE_DIM].reshape(n, VALUE_DIM // MX_BLOCK, MX_BLOCK), scale_rule)
    latent = pack_e2m1(codes.reshape(n, VALUE_DIM))
    return RopeBf16Cache("mxfp4", latent, (exponent + 127).to(torch.uint8), x[:, VALUE_DIM:].to(torch.bfloat16))


def dequantize_rope_bf16(cache: RopeBf16Cache, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """Exact values of a :class:`RopeBf16Cache` as a (N, 576) tensor of ``dtype``."""
    n = cache.num_tokens
    if cache.kind == "fp8":
        blocks = cache.latent.reshape(n, -1, FP8_LATENT_BLOCK).double() * cache.latent_scales.double().unsqueeze(-1)
        latent = blocks.reshape(n, VALUE_DIM)
    elif cache.kind == "mxfp4":
        codes = unpack_e2m1(cache.latent).reshape(n, -1, MX_BLOCK)
        latent = dequantize_mxfp4_blocks(codes, cache.latent_scales).reshape(n, VALUE_DIM).double()
    else:
        raise ValueError(f"unknown RopeBf16Cache kind {cache.kind!r}")
    return torch.cat((latent, cache.rope.double()), dim=1).to(dtype)


@dataclass(frozen=True)
class Layout:
    """One cache layout of the study.

    name: short key (``"mxfp4-mse"``). description: one line for the tables. kernels: whether
    mixmla's kernels read it. encode: bf16 cache (N, 576) -> the stored object (a kernel cache
    container or a :class:`RopeBf16Cache`).
    """

    name: str
    description: str
    kernels: bool
    encode: Callable[[torch.Tensor], object]


LAYOUTS: dict[str, Layout] = {layout.name: layout for layout in (
    Layout("bf16", "bf16 (the baseline)", True, Bf16Cache),
    Layout("fp8", "fp8 e4m3, one scale per tensor", True, quantize_fp8),
    Layout("mxfp4", "MXFP4, benchmark producer", True, quantize_mxfp4),
    Layout("mxfp4-mse", "MXFP4, least-squares scales", True, lambda x: quantize_mxfp4(x, scale_rule="mse")),
    Layout("fp8/128+rope16", "fp8 latent, scale per 128; bf16 rope", False, quantize_fp8_rope_bf16),
    Layout("mxfp4+rope16", "MXFP4 latent (producer); bf16 rope", False, quantize_mxfp4_rope_bf16),
    Layout("mxfp4-mse+rope16", "MXFP4 latent (least squares); bf16 rope", False,
           lambda x: quantize_mxfp4_rope_bf16(x, scale_rule="mse")),
)}


def decode(stored) -> torch.Tensor:
    """Exact float64 values (N, 576) of a stored layout (kernel cache container or RopeBf16Cache)."""
    if isinstance(stored, RopeBf16Cache):
        return dequantize_rope_bf16(stored)
    return dequantize(stored, torch.float64)


def bytes_per_token(stored) -> int:
    """Bytes per cached token of a stored layout; per-tensor constants (fp8's one scale) and the
    MXFP4 producer's scale padding are not counted."""
    return int(stored.bytes_per_token)
