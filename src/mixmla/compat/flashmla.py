"""FlashMLA's decode call, ``flash_mla_with_kvcache``, on mixmla's kernels.

FlashMLA's shapes: q (b, s_q, h, 576), a paged cache (blocks, P, 1, 576), block_table (b,
max_blocks) int32, cache_seqlens (b,) int32; it returns out (b, s_q, h, 512) and softmax_lse
(b, h, s_q) float32, natural log. Its scheduling object (``get_mla_metadata()[0]``) may be reused
across calls of one batch shape; here it holds the plan, made on the first call that uses it (which
checks every value, one host read), and later calls run that plan without reading anything on the
host, so they can be captured in a CUDA graph. The plan is correct for any lengths, so reusing it
as the lengths grow is safe; only its balance is that of its first call's.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ..formats import HEAD_DIM, VALUE_DIM
from ..kernels.backend import PageTable
from ..paged import validate as pvalidate
from ..paged.api import PagedDecodePlan


@dataclass
class MlaMetadata:
    """What ``get_mla_metadata`` returns: the plan of the calls that pass it, made on first use,
    and the (b, s_q, h, page size) it was made for."""

    plan: PagedDecodePlan | None = None
    shape: tuple | None = field(default=None)


def get_mla_metadata(*args, **kwargs) -> tuple[MlaMetadata, None]:
    """``(metadata, None)``, as FlashMLA's current interface returns; its arguments (the old
    interface's cache_seqlens, heads per KV head, KV heads) are accepted and not needed."""
    return MlaMetadata(), None


def _unsupported(name: str, why: str) -> ValueError:
    return ValueError(f"{name}: {why} (mixmla.compat.flash_mla_with_kvcache serves FlashMLA's dense decode)")


def flash_mla_with_kvcache(q: torch.Tensor, k_cache, block_table: torch.Tensor, cache_seqlens: torch.Tensor,
                           head_dim_v: int, tile_scheduler_metadata: MlaMetadata | None = None, num_splits=None,
                           softmax_scale: float | None = None, causal: bool = False, is_fp8_kvcache: bool = False,
                           indices=None, **unsupported) -> tuple[torch.Tensor, torch.Tensor]:
    """Dense MLA decode with FlashMLA's arguments and results.

    q: (b, s_q, h, 576) bf16, h in {16, 32, 64, 128}. k_cache: a bf16 pool (blocks, P, 1, 576) or
    (blocks, P, 576); or a mixmla pool of any format (``(fp8 (blocks, P, 576), scale)``, ``(MXFP4
    bytes, scales)``, ``PagedCache``). block_table (b, max_blocks), cache_seqlens (b,): int32 (or
    int64) on q's device. head_dim_v: 512. tile_scheduler_metadata: from ``get_mla_metadata()``
    (reused: the plan of its first call) or None (plan and check every call). num_splits: ignored
    (FlashMLA's old interface). softmax_scale: default 1/sqrt(576). causal: with s_q > 1, query i
    of a request sees its first Lk - s_q + i + 1 tokens; mixmla decodes that way only, so
    ``causal=False`` with s_q > 1 is a ValueError (with s_q == 1 both are the same).

    Returns ``(out (b, s_q, h, 512) bf16, softmax_lse (b, h, s_q) float32)``, natural log, new
    tensors each call (lse a transposed view of a (b, s_q, h) buffer). FlashMLA's own fp8 cache
    layout (``is_fp8_kvcache``), sparse attention (``indices``) and attention sinks are not served
    (ValueError); pass an fp8 or MXFP4 mixmla pool instead.
    """
    if is_fp8_kvcache:
        raise _unsupported("is_fp8_kvcache", "FlashMLA's 656-byte fp8 layout is not read; pass a mixmla fp8 pool "
                                             "(data (blocks, P, 576) float8_e4m3fn, scale) instead")
    if indices is not None or any(v is not None for v in unsupported.values()):
        given = ["indices"] * (indices is not None) + [k for k, v in unsupported.items() if v is not None]
        raise _unsupported(", ".join(given), "sparse attention, attention sinks and extra caches are not served")
    if head_dim_v != VALUE_DIM:
        raise ValueError(f"head_dim_v must be {VALUE_DIM}, got {head_dim_v}")
    if not isinstance(q, torch.Tensor) or q.dim() != 4 or q.shape[-1] != HEAD_DIM:
        raise ValueError(f"q must be (batch, s_q, num_heads, {HEAD_DIM}), got {tuple(getattr(q, 'shape', ()))}")
    b, s_q, h, _ = q.shape
    if s_q > 1 and not causal:
        raise ValueError("causal=False with s_q > 1: mixmla's decode is causal (query i sees the first Lk - s_q + i + 1 "
                         "cached tokens); pass causal=True")
    q3 = q.reshape(b * s_q, h, HEAD_DIM)  # a view for the layouts engines pass
    paged = pvalidate.check_cache(k_cache, None, q.device)
    pages = pvalidate.block_table_pages(block_table, cache_seqlens, paged.page_size, q.device)
    qo_indptr = torch.arange(0, (b + 1) * s_q, s_q, dtype=torch.int32, device=q.device)
    meta = tile_scheduler_metadata
    shape = (b, s_q, h, paged.page_size, paged.format)
    if meta is None or meta.plan is None:
        checked = pvalidate.check_decode_inputs(q3, paged, pages, qo_indptr, softmax_scale)
        plan = PagedDecodePlan(pages, qo_indptr, h, paged.format, checked.sm_scale, _checked=checked)
        if meta is not None:
            meta.plan, meta.shape = plan, shape
    else:
        plan = meta.plan
        if meta.shape != shape:
            raise ValueError(f"tile_scheduler_metadata was made for (b, s_q, h, page size, format) = {meta.shape}, "
                             f"got {shape}: use one metadata object per batch shape")
        if softmax_scale is not None and float(softmax_scale) != plan.sm_scale:
            raise ValueError(f"softmax_scale {softmax_scale} differs from the {plan.sm_scale} this metadata was "
                             f"planned with")
        if pages.table is not plan.pages.table or pages.seq_lens is not plan.pages.seq_lens:
            plan.rebind(PageTable(cache_seqlens, block_table, None, paged.page_size))
    out = torch.empty(b, s_q, h, VALUE_DIM, dtype=torch.bfloat16, device=q.device)
    lse = torch.empty(b, s_q, h, dtype=torch.float32, device=q.device)
    plan.run(q3, paged, out=out.view(b * s_q, h, VALUE_DIM), lse=lse.view(b * s_q, h))
    return out, lse.transpose(1, 2)


__all__ = ["MlaMetadata", "get_mla_metadata", "flash_mla_with_kvcache"]
