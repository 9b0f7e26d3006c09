"""The three KV-cache containers: what each format holds and how it is validated.

Every cache holds ``total_kv`` rows, one latent vector of ``HEAD_DIM = 576`` values per cached
token (512 latent + 64 rope dims; the first 512 are also the values). The containers do not copy:
they keep the caller's tensors (viewed as plain bytes where the format's dtype has no arithmetic)
and check that the layout is one the kernels can read.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Union

import torch

HEAD_DIM = 576  #: key width Dk = kv_lora_rank + qk_rope_head_dim
VALUE_DIM = 512  #: value width Dv = kv_lora_rank (first 512 key dims)
ROPE_DIM = HEAD_DIM - VALUE_DIM
MX_BLOCK = 32  #: values per E8M0 scale in MXFP4
MX_PACKED_DIM = HEAD_DIM // 2  #: bytes per token of packed E2M1 codes (288)
MX_SCALES_PER_ROW = HEAD_DIM // MX_BLOCK  #: E8M0 scales per token (18)

FP8_DTYPES = (torch.float8_e4m3fn, torch.float8_e4m3fnuz)
_FP4_DTYPES = tuple(d for d in (getattr(torch, "float4_e2m1fn_x2", None),) if d is not None)
_E8M0_DTYPES = tuple(d for d in (getattr(torch, "float8_e8m0fnu", None),) if d is not None)


def _rows(name: str, t: torch.Tensor, width: int) -> torch.Tensor:
    """View ``t`` of shape (N, width) or (N, 1, width) as (N, width) without copying."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dim() == 3:
        if t.shape[1] != 1:
            raise ValueError(f"{name} must have one KV head: expected shape (N, 1, {width}), got {tuple(t.shape)}")
        t = t.squeeze(1)
    if t.dim() != 2 or t.shape[1] != width:
        raise ValueError(f"{name} must have shape (N, {width}) or (N, 1, {width}), got {tuple(t.shape)}")
    if t.stride(1) != 1:
        raise ValueError(f"{name} must be contiguous along its last dim (stride 1 between the {width} values of "
                         f"a row; rows may be strided), got shape {tuple(t.shape)} with strides {t.stride()}: "
                         f"a transposed or permuted tensor; pass it through .contiguous()")
    return t


class _TokenRows:
    """What every cache container shares: ``data`` holds one row per cached token."""

    @property
    def num_tokens(self) -> int:
        """Cached tokens (rows of ``data``)."""
        return self.data.shape[0]

    @property
    def device(self) -> torch.device:
        return self.data.device


@dataclass(frozen=True)
class Bf16Cache(_TokenRows):
    """Uncompressed cache: ``data`` (N, 576) or (N, 1, 576) bfloat16, 1152 bytes per token."""

    data: torch.Tensor

    format = "bf16"
    bytes_per_token = 2 * HEAD_DIM

    def __post_init__(self):
        rows = _rows("bf16 cache", self.data, HEAD_DIM)
        if rows.dtype != torch.bfloat16:
            raise TypeError(f"bf16 cache must have dtype torch.bfloat16, got {rows.dtype}")
        object.__setattr__(self, "data", rows)


@dataclass(frozen=True)
class Fp8Cache(_TokenRows):
    """Per-tensor fp8 cache: ``data`` (N, 576) or (N, 1, 576) float8 e4m3 (``e4m3fn`` or ``e4m3fnuz``),
    ``scale`` a one-element float32 tensor with ``x ~ data * scale``, or a Python number (kept as
    such a tensor on the data's device, and known on the host: a call's checks of it then read
    nothing from the device). 576 bytes per token."""

    data: torch.Tensor
    scale: torch.Tensor

    format = "fp8"
    bytes_per_token = HEAD_DIM

    def __post_init__(self):
        rows = _rows("fp8 cache", self.data, HEAD_DIM)
        if rows.dtype not in FP8_DTYPES:
            raise TypeError(f"fp8 cache must have dtype float8_e4m3fn or float8_e4m3fnuz, got {rows.dtype}")
        scale = self.scale
        if not isinstance(scale, torch.Tensor):
            value = float(scale)
            scale = torch.tensor([value], dtype=torch.float32, device=rows.device)
            # The value rides on the container's own tensor (``host_scale``), not on the container,
            # whose attributes are its tensors.
            scale.mixmla_host_value = value
        if scale.numel() != 1:
            raise ValueError(f"fp8 scale must hold exactly one value, got shape {tuple(scale.shape)}")
        if not scale.dtype.is_floating_point:
            raise TypeError(f"fp8 scale must be a float tensor, got {scale.dtype}")
        if scale.device != rows.device:
            raise ValueError(f"fp8 scale is on {scale.device} but the cache is on {rows.device}")
        object.__setattr__(self, "data", rows)
        if scale.dim() != 1:
            scale = scale.reshape(1)
        object.__setattr__(self, "scale", scale if scale.dtype == torch.float32 else scale.to(torch.float32))

    @property
    def host_scale(self) -> float | None:
        """The scale's value when it was given as a number (then ``scale`` is this container's own
        tensor of it), else None."""
        return getattr(self.scale, "mixmla_host_value", None)

    @property
    def is_fnuz(self) -> bool:
        """True for the AMD ``e4m3fnuz`` encoding (exponent bias 8 instead of 7)."""
        return self.data.dtype == torch.float8_e4m3fnuz


@dataclass(frozen=True)
class Mxfp4Cache(_TokenRows):
    """OCP MXFP4 cache.

    ``data``: (N, 288) or (N, 1, 288), uint8 or ``torch.float4_e2m1fn_x2``; byte ``j`` holds value
    ``2j`` in its low nibble and ``2j+1`` in its high nibble (E2M1 codes).
    ``scales``: (M, C) with M >= N and C >= 18, uint8 or ``torch.float8_e8m0fnu``; byte ``k`` of row
    ``t`` is the exponent (``2**(byte-127)``) of values ``32k .. 32k+31`` of token ``t``. Padded rows
    and columns are allowed and ignored; the row stride is taken as given.
    306 bytes per token are read.
    """

    data: torch.Tensor
    scales: torch.Tensor

    format = "mxfp4"
    bytes_per_token = MX_PACKED_DIM + MX_SCALES_PER_ROW

    def __post_init__(self):
        data = self.data
        if isinstance(data, torch.Tensor) and data.dtype in _FP4_DTYPES:
            data = data.view(torch.uint8)
        rows = _rows("mxfp4 cache", data, MX_PACKED_DIM)
        if rows.dtype != torch.uint8:
            raise TypeError(f"mxfp4 cache must be uint8 or float4_e2m1fn_x2 bytes, got {rows.dtype}")
        scales = self.scales
        if not isinstance(scales, torch.Tensor):
            raise TypeError(f"mxfp4 scales must be a torch.Tensor, got {type(scales).__name__}")
        if scales.dtype in _E8M0_DTYPES:
            scales = scales.view(torch.uint8)
        if scales.dtype != torch.uint8:
            raise TypeError(f"mxfp4 scales must be uint8 or float8_e8m0fnu bytes, got {scales.dtype}")
        if scales.dim() == 3 and scales.shape[1] == 1:
            scales = scales[:, 0, :]
        if scales.dim() != 2:
            raise ValueError(f"mxfp4 scales must be 2-D (rows, >=18), got shape {tuple(scales.shape)}")
        if scales.shape[0] < rows.shape[0] or scales.shape[1] < MX_SCALES_PER_ROW:
            raise ValueError(
                f"mxfp4 scales too small: need at least ({rows.shape[0]}, {MX_SCALES_PER_ROW}) for "
                f"{rows.shape[0]} tokens, got {tuple(scales.shape)}"
            )
        if scales.stride(1) != 1:
            raise ValueError(f"mxfp4 scales must be contiguous along the last dim (stride 1 between a row's scale "
                             f"bytes; rows may be strided), got shape {tuple(scales.shape)} with strides "
                             f"{scales.stride()}; pass them through .contiguous()")
        if scales.device != rows.device:
            raise ValueError(f"mxfp4 scales are on {scales.device} but the cache is on {rows.device}")
        object.__setattr__(self, "data", rows)
        object.__setattr__(self, "scales", scales)


KVCache = Union[Bf16Cache, Fp8Cache, Mxfp4Cache]
FORMATS = ("bf16", "fp8", "mxfp4")


def as_cache(kv) -> KVCache:
    """Wrap a cache given the benchmark's way into its container.

    Accepts a container (returned as is), a bf16 tensor, ``(fp8_tensor, scale)`` or
    ``(fp4_bytes, e8m0_scales)``; the tuple's first dtype tells fp8 from MXFP4.
    """
    if isinstance(kv, (Bf16Cache, Fp8Cache, Mxfp4Cache)):
        return kv
    if isinstance(kv, torch.Tensor):
        if kv.dtype in FP8_DTYPES:
            raise TypeError("an fp8 cache needs its scale: pass (data, scale) or Fp8Cache(data, scale)")
        return Bf16Cache(kv)
    if isinstance(kv, (tuple, list)) and len(kv) == 2:
        data, extra = kv
        if isinstance(data, torch.Tensor) and data.dtype in FP8_DTYPES:
            return Fp8Cache(data, extra)
        return Mxfp4Cache(data, extra)
    raise TypeError(
        "cache must be Bf16Cache/Fp8Cache/Mxfp4Cache, a bf16 tensor, (fp8, scale) or (fp4 bytes, e8m0 scales); "
        f"got {type(kv).__name__}"
    )
