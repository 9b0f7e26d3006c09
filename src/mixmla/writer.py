"""The cache writer: ``append_kv`` quantizes new tokens on the device and writes each into its slot.

A serving engine computes each new token's 576-value latent row in bf16 and writes it into the
cache before attention reads it. ``append_kv`` does that for every format in one launch
(``kernels/triton/append.py``): bf16 as is, fp8 with the cache's own scale, MXFP4 bit for bit as
``quantize_mxfp4`` would. Slots address the cache's rows (for a paged pool ``page * page_size +
row``, vLLM's ``slot_mapping``); slot -1 skips a token.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from . import interpreter, validate
from .formats import HEAD_DIM, Bf16Cache, Fp8Cache, Mxfp4Cache
from .formats.paged import PagedCache, as_paged_cache
from .kernels.constants import FMT_BF16, FMT_FP8, FMT_FP8_FNUZ, FMT_MXFP4

SLOT_DTYPES = (torch.int64, torch.int32)


def cache_rows(cache):
    """``(rows container, slots)``: the rows ``append_kv`` writes and how many slots there are, for
    a paged pool (any form of ``as_paged_cache``) or a contiguous cache container."""
    if isinstance(cache, (Bf16Cache, Fp8Cache, Mxfp4Cache)):
        return cache, cache.num_tokens
    paged = cache if isinstance(cache, PagedCache) else as_paged_cache(cache)
    return paged.rows, paged.num_slots


def _check(cache, kv, slot_mapping):
    try:
        rows, num_slots = cache_rows(cache)
    except (TypeError, ValueError) as err:
        raise type(err)(f"cache: {err}") from err
    if not isinstance(kv, torch.Tensor):
        raise TypeError(f"kv must be a (n, {HEAD_DIM}) bf16 torch.Tensor, got {type(kv).__name__}")
    if kv.dtype != torch.bfloat16:
        raise TypeError(f"kv must have dtype torch.bfloat16, got {kv.dtype}")
    if kv.dim() == 3 and kv.shape[1] == 1:
        kv = kv[:, 0]
    if kv.dim() != 2 or kv.shape[1] != HEAD_DIM:
        raise ValueError(f"kv must have shape (n, {HEAD_DIM}) or (n, 1, {HEAD_DIM}), got {tuple(kv.shape)}")
    if kv.shape[0] > 0 and kv.stride(1) != 1:
        raise ValueError(f"kv must be contiguous along its last dim, got strides {kv.stride()}")
    if not isinstance(slot_mapping, torch.Tensor):
        raise TypeError(f"slot_mapping must be a (n,) int64 torch.Tensor, got {type(slot_mapping).__name__}")
    if slot_mapping.dtype not in SLOT_DTYPES:
        raise TypeError(f"slot_mapping must have dtype torch.int64 (or torch.int32), got {slot_mapping.dtype}")
    if slot_mapping.dim() != 1 or slot_mapping.shape[0] != kv.shape[0]:
        raise ValueError(f"slot_mapping must be 1-D with one slot per row of kv ({kv.shape[0]}), got shape "
                         f"{tuple(slot_mapping.shape)}")
    if slot_mapping.shape[0] > 1 and slot_mapping.stride(0) != 1:
        raise ValueError(f"slot_mapping must be contiguous (stride 1), got stride {slot_mapping.stride(0)}")
    for name, t in (("kv", kv), ("slot_mapping", slot_mapping)):
        if not validate._same_device(t.device, rows.device):
            raise ValueError(f"{name} is on {t.device} but the cache is on {rows.device}; all tensors must share "
                             f"one device")
    if validate._overlaps(kv, rows.data):
        raise ValueError("kv shares memory with the cache; pass the new rows in a separate tensor")
    return rows, num_slots, kv


def _check_values(rows, num_slots: int, kv: torch.Tensor, slot_mapping: torch.Tensor) -> None:
    """Slots in [-1, num_slots), kv finite for the quantized formats, the fp8 scale finite and > 0:
    one host transfer (a sync on a GPU)."""
    if kv.device.type == "cuda" and torch.cuda.is_current_stream_capturing():
        raise RuntimeError("append_kv(check=True) reads the slots on the host, which a CUDA graph capture does not "
                           "allow; capture append_kv(..., check=False) (slots outside the cache are then skipped)")
    quantized = not isinstance(rows, Bf16Cache)
    tensors = [slot_mapping]
    if quantized:
        tensors.append(torch.isfinite(kv).all().reshape(1).to(torch.int32))
    if isinstance(rows, Fp8Cache):
        tensors.append(rows.scale)
    host = validate._host_values(tensors)
    slots = host[0]
    bad = (slots < -1) | (slots >= num_slots)
    if bad.any():
        i = int(np.argmax(bad))
        raise ValueError(f"slot_mapping[{i}] = {slots[i]} is not a slot of the cache: expected 0 <= slot < "
                         f"{num_slots} (page * page_size + row), or -1 to skip the token")
    if quantized and not host[1][0]:
        raise ValueError(f"kv holds NaN or Inf; {rows.format} quantization needs finite values")
    if isinstance(rows, Fp8Cache):
        value = float(host[-1][0])
        if not math.isfinite(value) or value <= 0.0:
            raise ValueError(f"cache: fp8 scale must be finite and > 0, got {value!r}")


def append_kv(cache, kv: torch.Tensor, slot_mapping: torch.Tensor, *, check: bool = True) -> None:
    """Write new tokens into the cache, quantized on the device, in one launch.

    cache: a paged pool (``PagedCache`` or the page-major tensors of ``as_paged_cache``) or a
    contiguous cache container; written in place (MXFP4: codes and scale bytes). kv: (n, 576) or
    (n, 1, 576) bf16, one latent row per new token. slot_mapping: (n,) int64 (or int32), the slot
    of each row (row ``slot`` of the cache's rows: ``page * page_size + row_in_page``); -1 skips
    the row. fp8 rows are ``clamp(kv / scale)`` with the cache's scale, rounded to nearest-even;
    MXFP4 rows are what ``quantize_mxfp4`` gives, bit for bit.

    check=True (default): also check the values (every slot in [-1, slots), kv finite when
    quantized, the fp8 scale finite and > 0) with one host read (a sync; a RuntimeError inside a
    CUDA graph capture); a bad one is a ValueError naming the argument, and nothing is written.
    check=False reads no value (graph-safe, no allocation): a slot outside the cache is then
    skipped on the device, never written outside it.
    """
    rows, num_slots, kv = _check(cache, kv, slot_mapping)
    if check:
        _check_values(rows, num_slots, kv, slot_mapping)
    launch_append(rows, num_slots, kv, slot_mapping)


def launch_append(rows, num_slots: int, kv: torch.Tensor, slot_mapping: torch.Tensor,
                  num_warps: int | None = None) -> None:
    """Launch the writer on checked arguments (``append_launch``)."""
    if kv.shape[0] == 0:
        return
    if rows.device.type == "cpu" and not interpreter.active():
        raise ValueError("cache: on CPU tensors the Triton kernels run only in Triton's interpreter "
                         "(TRITON_INTERPRET=1 before triton is first imported)")
    one = append_launch(rows, num_slots, kv, slot_mapping, num_warps)
    one.kernel[one.grid](*one.args, **one.options)


def append_launch(rows, num_slots: int, kv: torch.Tensor, slot_mapping: torch.Tensor,
                  num_warps: int | None = None):
    """The writer's ``kernels.triton.launch.Launch`` for ``rows`` the cache's rows (``cache_rows``)
    with ``num_slots`` of them, ``kv`` (n >= 1, 576) bf16, ``slot_mapping`` (n,) int32/int64 on its
    device; ``num_warps`` per program (one program per token; None: 8 for fp8, 4 otherwise,
    docs/PERF.md steps 45 and 79)."""
    from .kernels.triton.append import append_kv_kernel
    from .kernels.triton.launch import Launch

    if isinstance(rows, Bf16Cache):
        fmt, out, scale, scale_stride = FMT_BF16.value, rows.data.view(torch.int16), None, 0
    elif isinstance(rows, Fp8Cache):
        fmt = FMT_FP8_FNUZ.value if rows.is_fnuz else FMT_FP8.value
        out, scale, scale_stride = rows.data.view(torch.uint8), rows.scale, 0
    else:
        fmt, out, scale, scale_stride = FMT_MXFP4.value, rows.data, rows.scales, rows.scales.stride(0)
    if num_warps is None:
        num_warps = 8 if isinstance(rows, Fp8Cache) else 4
    # bf16 travels as its bits: the kernel widens them to float32 exactly.
    return Launch(append_kv_kernel, (kv.shape[0], ),
                  (kv.view(torch.int16), kv.stride(0), slot_mapping, num_slots, out, out.stride(0), scale,
                   scale_stride, fmt, interpreter.active()), {"num_warps": num_warps})


__all__ = ["append_kv", "cache_rows"]
