"""``torch.ops.mixmla.*``: the decode entry points and the cache writer as PyTorch custom operators.

Registered with ``torch.library.custom_op`` when ``mixmla`` is imported, each with a fake
(meta) implementation that gives the output shapes without running anything, so that
``torch.compile`` (``fullgraph=True`` included) traces a model that calls them without entering
the kernels, the argument checks' host reads or Triton's interpreter. The real implementation runs
the checked one-call entry point (``mla_decode``, ``mla_decode_paged``, ``mla_decode_paged_csr``,
``append_kv``), so every call is checked as those are.

A cache crosses the operator boundary as tensors: ``kv`` (the rows, or the page-major pool) and
``kv_scale``: None for bf16, the one-element float32 scale for fp8, the E8M0 scale bytes for
MXFP4 (the format follows from kv's dtype: bf16, float8, or uint8 / ``float4_e2m1fn_x2``).

- ``mla_decode(q, kv, kv_scale, kv_indptr, qo_indptr, sm_scale) -> (out, lse)``
- ``mla_decode_paged(q, kv, kv_scale, block_table, seq_lens, qo_indptr, sm_scale) -> (out, lse)``
- ``mla_decode_paged_csr(q, kv, kv_scale, kv_indptr, kv_indices, kv_len, qo_indptr, sm_scale) -> (out, lse)``
- ``append_kv(kv!, kv_scale!, new_kv, slot_mapping) -> ()``: writes kv (and MXFP4's scales) in place.

out (total_q, H, 512) bf16 and lse (total_q, H) float32 natural log are new tensors. The decode
operators plan per call (a host read of the lengths), so they are not for CUDA-graph capture:
serving loops under graphs call ``plan_paged(...).run`` directly. ``append_kv`` checks the slots
on the host except during a capture, where it reads none (slots outside the cache are skipped).
"""

from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

from .formats.cache import FP8_DTYPES

LIBRARY = "mixmla"


def _cache(kv: Tensor, kv_scale: Optional[Tensor]):
    """The cache argument of the Python entry points for the operator's tensors."""
    if kv.dtype == torch.bfloat16:
        if kv_scale is not None:
            raise ValueError("kv_scale must be None for a bf16 cache")
        return kv
    if kv_scale is None:
        kind = "fp8 scale" if kv.dtype in FP8_DTYPES else "MXFP4 E8M0 scale bytes"
        raise ValueError(f"kv_scale: a {kv.dtype} cache needs its {kind}")
    return (kv, kv_scale)


def _outputs_like(q: Tensor) -> tuple[Tensor, Tensor]:
    total_q, heads = q.shape[0], q.shape[1]
    return (q.new_empty((total_q, heads, 512), dtype=torch.bfloat16),
            q.new_empty((total_q, heads), dtype=torch.float32))


@torch.library.custom_op(f"{LIBRARY}::mla_decode", mutates_args=())
def mla_decode(q: Tensor, kv: Tensor, kv_scale: Optional[Tensor], kv_indptr: Tensor, qo_indptr: Optional[Tensor],
               sm_scale: Optional[float]) -> tuple[Tensor, Tensor]:
    from .api import mla_decode as decode

    return decode(q, _cache(kv, kv_scale), kv_indptr, qo_indptr, sm_scale, return_lse=True)


@torch.library.custom_op(f"{LIBRARY}::mla_decode_paged", mutates_args=())
def mla_decode_paged(q: Tensor, kv: Tensor, kv_scale: Optional[Tensor], block_table: Tensor, seq_lens: Tensor,
                     qo_indptr: Optional[Tensor], sm_scale: Optional[float]) -> tuple[Tensor, Tensor]:
    from .paged import mla_decode_paged as decode

    return decode(q, _cache(kv, kv_scale), block_table, seq_lens, qo_indptr=qo_indptr, sm_scale=sm_scale,
                  return_lse=True)


@torch.library.custom_op(f"{LIBRARY}::mla_decode_paged_csr", mutates_args=())
def mla_decode_paged_csr(q: Tensor, kv: Tensor, kv_scale: Optional[Tensor], kv_indptr: Tensor, kv_indices: Tensor,
                         kv_len: Tensor, qo_indptr: Optional[Tensor], sm_scale: Optional[float]) -> tuple[Tensor, Tensor]:
    from .paged import mla_decode_paged_csr as decode

    return decode(q, _cache(kv, kv_scale), kv_indptr, kv_indices, kv_len, qo_indptr=qo_indptr, sm_scale=sm_scale,
                  return_lse=True)


@torch.library.custom_op(f"{LIBRARY}::append_kv", mutates_args=("kv", "kv_scale"))
def append_kv(kv: Tensor, kv_scale: Optional[Tensor], new_kv: Tensor, slot_mapping: Tensor) -> None:
    from .writer import append_kv as write

    capturing = kv.device.type == "cuda" and torch.cuda.is_current_stream_capturing()
    write(_cache(kv, kv_scale), new_kv, slot_mapping, check=not capturing)


@mla_decode.register_fake
def _(q, kv, kv_scale, kv_indptr, qo_indptr, sm_scale):
    return _outputs_like(q)


@mla_decode_paged.register_fake
def _(q, kv, kv_scale, block_table, seq_lens, qo_indptr, sm_scale):
    return _outputs_like(q)


@mla_decode_paged_csr.register_fake
def _(q, kv, kv_scale, kv_indptr, kv_indices, kv_len, qo_indptr, sm_scale):
    return _outputs_like(q)


@append_kv.register_fake
def _(kv, kv_scale, new_kv, slot_mapping):
    return None


__all__ = ["mla_decode", "mla_decode_paged", "mla_decode_paged_csr", "append_kv"]
