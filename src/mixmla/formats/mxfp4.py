"""OCP MXFP4 (E2M1 values, one E8M0 exponent per 32) quantization and exact dequantization.

The quantizer reproduces, bit for bit, the producer the benchmark used (docs/SPEC.md): per block of 32
consecutive values, round the float32 amax up by adding ``0x200000`` to its bits and keeping only
the exponent, take ``floor(log2(.)) - 2`` clamped to [-127, 127] as the block exponent, divide by
``2**exponent``, round to nearest-even on the E2M1 grid, saturate at 6. Two codes per byte, value
``2j`` in the low nibble of byte ``j``.

Any E8M0 exponent gives valid MXFP4 bytes, so ``quantize_mxfp4(x, scale_rule="mse")`` may pick
another one: per block, the exponent among the producer's and its two neighbours that minimizes
the block's squared error. It decodes with the same dequantizer and kernels.
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


#: Per-block exponent rules of :func:`quantize_mxfp4_blocks`: the benchmark producer's, or the
#: squared-error minimizing choice among it and its neighbours.
SCALE_RULES = ("benchmark", "mse")

# Exponent offsets tried by the "mse" rule, the producer's own (0) first. +1 helps blocks whose
# amax saturates (scaled amax in (6, 7)); -1 helps blocks whose other values would gain more from
# the finer grid than the saturated amax loses.
_MSE_OFFSETS = (0, 1, -1)
# The "mse" rule leaves the producer's exponent only for a gain above float64 rounding noise of
# the 32-term sum (about 2**-48 relative), so "never worse than the producer" holds exactly.
_MSE_SWITCH_MARGIN = 2.0 ** -40


def _block_sq_error(blocks: torch.Tensor, codes: torch.Tensor, exponent: torch.Tensor) -> torch.Tensor:
    """Squared error, summed over the last dim in float64, of blocks (..., 32) against their codes
    (..., 32) at exponent (...,) int32. Each difference and square is exact in float64."""
    decoded = torch.ldexp(e2m1_decode(codes).double(), exponent.unsqueeze(-1).double())
    return (blocks.double() - decoded).square().sum(dim=-1)


def _encode_at(blocks: torch.Tensor, exponent: torch.Tensor) -> torch.Tensor:
    """E2M1 codes (..., 32) uint8 of float32 blocks (..., 32) at exponent (...,) int32."""
    return e2m1_encode(torch.ldexp(blocks, (-exponent).unsqueeze(-1).float()))


def quantize_mxfp4_blocks(blocks: torch.Tensor, scale_rule: str = "benchmark",
                          name: str = "blocks") -> tuple[torch.Tensor, torch.Tensor]:
    """MXFP4-quantize blocks of 32 values: E2M1 codes and one E8M0 exponent per block.

    blocks: (..., 32), any float dtype, any device (computed in float32; the "mse" errors in
    float64), finite: NaN or Inf is a ValueError naming ``name`` (checking it reads one flag on
    the host, a sync on a GPU, as ``quantize_fp8`` does).
    scale_rule: "benchmark" (the producer's exponent, bit-exact with the benchmark) or "mse" (per
    block, the exponent among the producer's e and e +- 1, clamped to [-127, 127], whose codes have
    the smallest squared error; e is kept unless another is strictly better, so no block is worse).
    Returns (codes (..., 32) uint8 in 0..15, exponent (...,) int32 in [-127, 127], unbiased: the
    block's scale is ``2**exponent`` and its E8M0 byte ``exponent + 127``).
    """
    if scale_rule not in SCALE_RULES:
        raise ValueError(f"scale_rule must be one of {SCALE_RULES}, got {scale_rule!r}")
    if not isinstance(blocks, torch.Tensor) or not blocks.dtype.is_floating_point or blocks.shape[-1:] != (MX_BLOCK,):
        raise ValueError(f"blocks must be a float tensor of shape (..., {MX_BLOCK}), got "
                         f"{getattr(blocks, 'dtype', type(blocks).__name__)} {tuple(getattr(blocks, 'shape', ()))}")
    blocks = blocks.float()
    amax = blocks.abs().amax(dim=-1)  # NaN where a block holds one
    if amax.numel() and not bool(torch.isfinite(amax).all()):
        raise ValueError(f"{name} holds NaN or Inf; MXFP4 quantization needs finite values (a block's scale "
                         f"comes from its largest magnitude)")
    exponent = block_exponent(amax)
    codes = _encode_at(blocks, exponent)
    if scale_rule == "benchmark":
        return codes, exponent
    # One candidate at a time keeps memory at a few copies of the input, not one per candidate.
    best_err = _block_sq_error(blocks, codes, exponent)
    best_exp = exponent
    for offset in _MSE_OFFSETS[1:]:
        cand_exp = (exponent + offset).clamp(-127, 127)
        cand_codes = _encode_at(blocks, cand_exp)
        cand_err = _block_sq_error(blocks, cand_codes, cand_exp)
        better = cand_err < best_err * (1.0 - _MSE_SWITCH_MARGIN)  # False for NaN: keep the producer's
        best_err = torch.where(better, cand_err, best_err)
        best_exp = torch.where(better, cand_exp, best_exp)
        codes = torch.where(better.unsqueeze(-1), cand_codes, codes)
    return codes, best_exp


def pack_e2m1(codes: torch.Tensor) -> torch.Tensor:
    """Pack E2M1 codes (..., 2k) uint8 two per byte (..., k): value 2j in the low nibble of byte j."""
    return codes[..., 0::2] | (codes[..., 1::2] << 4)


def unpack_e2m1(packed: torch.Tensor) -> torch.Tensor:
    """Inverse of :func:`pack_e2m1`: bytes (..., k) uint8 -> codes (..., 2k) uint8."""
    return torch.stack((packed & 0xF, packed >> 4), dim=-1).reshape(*packed.shape[:-1], 2 * packed.shape[-1])


def quantize_mxfp4(x: torch.Tensor, pad_scales: bool = True, scale_rule: str = "benchmark") -> Mxfp4Cache:
    """Quantize a cache to MXFP4, by default exactly as the benchmark's producer does.

    x: (N, 576) or (N, 1, 576), any float dtype, any device, any strides (the result is
    contiguous), finite (NaN or Inf is a ValueError).
    pad_scales: lay the scales out as the producer does, (ceil(N/256)*256, 24) with only columns
    0..17 of the first N rows meaningful (the padding holds 127, i.e. 2**0); False gives (N, 18).
    scale_rule: "benchmark" (default: bit-exact with the producer) or "mse" (per block, the E8M0
    exponent of smallest squared error among the producer's and its two neighbours; never worse
    on any block, see :func:`quantize_mxfp4_blocks`). Both write the same format.
    Returns ``Mxfp4Cache`` with data (N, 1, 288) uint8 and the E8M0 scale bytes as uint8.
    """
    if not isinstance(x, torch.Tensor) or not x.dtype.is_floating_point:
        raise TypeError(f"x must be a floating-point tensor, got {getattr(x, 'dtype', type(x).__name__)}")
    if x.shape[-1] != HEAD_DIM or x.dim() not in (2, 3) or (x.dim() == 3 and x.shape[1] != 1):
        raise ValueError(f"x must have shape (N, {HEAD_DIM}) or (N, 1, {HEAD_DIM}), got {tuple(x.shape)}")
    n = x.shape[0]
    # codes (N, 18, 32), exponent (N, 18)
    codes, exponent = quantize_mxfp4_blocks(x.reshape(n, MX_SCALES_PER_ROW, MX_BLOCK), scale_rule, name="x")
    # A permuted x keeps its strides through the elementwise steps; the cache needs unit-stride rows.
    packed = pack_e2m1(codes.reshape(n, HEAD_DIM)).reshape(n, 1, HEAD_DIM // 2).contiguous()
    scale_bytes = (exponent + 127).to(torch.uint8).contiguous()
    if pad_scales:
        rows = max(SCALE_PAD_ROWS, -(-n // SCALE_PAD_ROWS) * SCALE_PAD_ROWS)
        padded = torch.full((rows, SCALE_PAD_COLS), 127, dtype=torch.uint8, device=x.device)
        padded[:n, :MX_SCALES_PER_ROW] = scale_bytes
        scale_bytes = padded
    return Mxfp4Cache(packed, scale_bytes)


def dequantize_mxfp4_blocks(codes: torch.Tensor, scale_bytes: torch.Tensor) -> torch.Tensor:
    """Exact float32 values (..., 32) of E2M1 codes (..., 32) uint8 under E8M0 bytes (...,) uint8
    (``2**(byte - 127)``; byte 255 gives NaN)."""
    exponent = scale_bytes.to(torch.float32) - 127
    exponent = torch.where(scale_bytes == 255, torch.full_like(exponent, float("nan")), exponent)
    return torch.ldexp(e2m1_decode(codes), exponent.unsqueeze(-1))


def dequantize_mxfp4(cache: Mxfp4Cache, dtype: torch.dtype = torch.float32, rows: slice = slice(None)) -> torch.Tensor:
    """Exact values of ``rows`` as a (rows, 576) tensor of ``dtype``; scale byte 255 gives NaN."""
    packed = cache.data[rows]
    n = packed.shape[0]
    codes = unpack_e2m1(packed).reshape(n, MX_SCALES_PER_ROW, MX_BLOCK)
    scale_bytes = cache.scales[: cache.num_tokens][rows][:, :MX_SCALES_PER_ROW]
    return dequantize_mxfp4_blocks(codes, scale_bytes).reshape(n, HEAD_DIM).to(dtype)
