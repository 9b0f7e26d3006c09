"""FlashInfer's MLA wrapper, ``BatchMLAPagedAttentionWrapper``, on mixmla's kernels.

FlashInfer plans a batch once (``plan``: CSR page tables over pages, ``kv_len``, page size,
causal, scale, dtypes) and runs it per layer (``run``: the query and the cache split into their
512 latent and 64 rope columns: ``q_nope``/``q_pe``, ``ckv_cache``/``kpe_cache``). Its lse is base 2
unless ``return_lse_base_on_e``. Split tensors that are views of one 576-wide buffer (how SGLang
and the benchmark hold them) are read in place; separate buffers are joined per call (a copy of
the whole cache: slow, and not capturable). With ``use_cuda_graph=True`` the wrapper keeps the
buffers given to its constructor, copies each plan's tables into them and plans once, so a graph
captured around ``run`` stays valid across plans of the same batch size.
"""

from __future__ import annotations

import torch

from ..formats import HEAD_DIM, ROPE_DIM, VALUE_DIM
from ..formats.cache import FP8_DTYPES
from ..kernels.constants import LOG2E
from ..paged import validate as pvalidate
from ..paged.api import PagedDecodePlan


def join_columns(a: torch.Tensor, b: torch.Tensor, name: str) -> torch.Tensor:
    """The (..., 576) tensor whose first 512 columns are ``a`` (..., 512) and last 64 ``b`` (..., 64):
    a view when ``b`` follows ``a`` inside one buffer of 576-wide rows, else a new tensor."""
    if a.shape[:-1] != b.shape[:-1] or a.shape[-1] != VALUE_DIM or b.shape[-1] != ROPE_DIM or a.dtype != b.dtype:
        raise ValueError(f"{name}: expected (..., {VALUE_DIM}) and (..., {ROPE_DIM}) of one dtype, got "
                         f"{tuple(a.shape)} {a.dtype} and {tuple(b.shape)} {b.dtype}")
    if (a.stride() == b.stride() and a.stride(-1) == 1 and a.device == b.device
            and b.data_ptr() == a.data_ptr() + VALUE_DIM * a.element_size()
            and a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()):
        return a.as_strided((*a.shape[:-1], HEAD_DIM), a.stride())
    return torch.cat([a, b], dim=-1)


def _scale(ckv_scale, kpe_scale, device) -> torch.Tensor:
    if ckv_scale is None:
        raise ValueError("ckv_scale: an fp8 cache needs its per-tensor scale (x ~ fp8 value * scale)")
    if kpe_scale is not None and float(kpe_scale) != float(ckv_scale):
        raise ValueError(f"kpe_scale ({float(kpe_scale)}) must equal ckv_scale ({float(ckv_scale)}): mixmla's fp8 "
                         f"cache has one scale per tensor")
    if isinstance(ckv_scale, torch.Tensor):
        return ckv_scale.reshape(1).to(device=device, dtype=torch.float32)
    return torch.tensor([float(ckv_scale)], dtype=torch.float32, device=device)


class BatchMLAPagedAttentionWrapper:
    """FlashInfer's MLA decode wrapper: ``plan`` once per batch, ``run`` per layer.

    float_workspace_buffer: accepted for FlashInfer's signature, not used (mixmla allocates its
    own workspace per plan). use_cuda_graph with qo_indptr, kv_indptr, kv_indices, kv_len_arr:
    device buffers the plans copy their tables into (read by reference; see the module doc).
    backend: ignored (mixmla runs paged caches on its Triton kernels).
    """

    def __init__(self, float_workspace_buffer: torch.Tensor | None = None, use_cuda_graph: bool = False,
                 qo_indptr: torch.Tensor | None = None, kv_indptr: torch.Tensor | None = None,
                 kv_indices: torch.Tensor | None = None, kv_len_arr: torch.Tensor | None = None,
                 backend: str = "auto"):
        self._use_cuda_graph = bool(use_cuda_graph)
        self._buffers = (qo_indptr, kv_indptr, kv_indices, kv_len_arr)
        if self._use_cuda_graph and any(t is None for t in self._buffers):
            raise ValueError("use_cuda_graph=True needs the qo_indptr, kv_indptr, kv_indices and kv_len_arr buffers")
        self._plan: PagedDecodePlan | None = None

    def plan(self, qo_indptr: torch.Tensor, kv_indptr: torch.Tensor, kv_indices: torch.Tensor,
             kv_len_arr: torch.Tensor, num_heads: int, head_dim_ckv: int, head_dim_kpe: int, page_size: int,
             causal: bool, sm_scale: float, q_data_type: torch.dtype, kv_data_type: torch.dtype,
             use_profiler: bool = False) -> None:
        """Plan a batch (reads the tables on the host once). qo_indptr (batch+1,) query tokens;
        kv_indptr (batch+1,) over pages, kv_indices (pages used,), kv_len_arr (batch,) cached
        tokens; num_heads H; head_dim_ckv 512, head_dim_kpe 64; page_size; causal (with more than
        one query token per request mixmla is causal only: causal=False is then a ValueError);
        sm_scale (natural-log units); q_data_type bf16; kv_data_type bf16, float8_e4m3fn /
        e4m3fnuz, or uint8 (an MXFP4 pool passed to ``run`` as ``ckv_cache``)."""
        if (head_dim_ckv, head_dim_kpe) != (VALUE_DIM, ROPE_DIM):
            raise ValueError(f"head_dim_ckv, head_dim_kpe must be {VALUE_DIM}, {ROPE_DIM}, got {head_dim_ckv}, "
                             f"{head_dim_kpe}")
        if q_data_type != torch.bfloat16:
            raise ValueError(f"q_data_type must be torch.bfloat16, got {q_data_type}")
        fmt = ("bf16" if kv_data_type == torch.bfloat16 else "fp8" if kv_data_type in FP8_DTYPES
               else "mxfp4" if kv_data_type in (torch.uint8, getattr(torch, "float4_e2m1fn_x2", torch.uint8))
               else None)
        if fmt is None:
            raise ValueError(f"kv_data_type must be bf16, float8_e4m3fn(uz) or uint8 (MXFP4), got {kv_data_type}")
        q_lens = qo_indptr[1:] - qo_indptr[:-1]
        if not causal and q_lens.numel() and int(q_lens.max()) > 1:
            raise ValueError("causal=False with several query tokens per request: mixmla's decode is causal (query "
                             "i sees the first Lk - Lq + i + 1 cached tokens); pass causal=True")
        if self._use_cuda_graph:
            qo_buf, kv_buf, idx_buf, len_buf = self._buffers
            for buf, src, name in ((qo_buf, qo_indptr, "qo_indptr"), (kv_buf, kv_indptr, "kv_indptr"),
                                   (len_buf, kv_len_arr, "kv_len_arr")):
                if buf.shape != src.shape:
                    raise ValueError(f"{name}: the wrapper's buffer has shape {tuple(buf.shape)}, got "
                                     f"{tuple(src.shape)} (use_cuda_graph keeps the batch size)")
                buf.copy_(src)
            idx_buf[:kv_indices.shape[0]].copy_(kv_indices)
            qo_indptr, kv_indptr, kv_indices, kv_len_arr = qo_buf, kv_buf, idx_buf, len_buf
            if self._plan is not None and self._plan.num_heads == num_heads and self._plan.fmt == fmt:
                return  # the buffers changed in place; the plan reads them
        pages = pvalidate.csr_pages(kv_indptr, kv_indices, kv_len_arr, page_size)
        self._plan = PagedDecodePlan(pages, qo_indptr, num_heads, fmt, sm_scale)

    def run(self, q_nope: torch.Tensor, q_pe: torch.Tensor, ckv_cache, kpe_cache: torch.Tensor | None = None,
            out: torch.Tensor | None = None, lse: torch.Tensor | None = None, return_lse: bool = False,
            profiler_buffer=None, kv_len=None, page_table=None, return_lse_base_on_e: bool = False,
            ckv_scale=None, kpe_scale=None):
        """Run the planned batch. q_nope (total_q, H, 512), q_pe (total_q, H, 64) bf16; ckv_cache
        (pages, P, 512) and kpe_cache (pages, P, 64), bf16 or fp8 (with ``ckv_scale``, a float or
        a one-element tensor; ``kpe_scale`` must be the same), or ckv_cache a mixmla pool of any
        format (``PagedCache``, ``(data, scale)``) with kpe_cache None. out: optional (total_q, H,
        512) bf16; lse: optional (total_q, H) float32. Returns out, or (out, lse) with lse base 2
        (natural log with ``return_lse_base_on_e``)."""
        if self._plan is None:
            raise RuntimeError("run() before plan()")
        q = join_columns(q_nope, q_pe, "q_nope, q_pe")
        if kpe_cache is None:
            cache = ckv_cache
        else:
            kv = join_columns(ckv_cache, kpe_cache, "ckv_cache, kpe_cache")
            cache = (kv, _scale(ckv_scale, kpe_scale, kv.device)) if kv.dtype in FP8_DTYPES else kv
        p = self._plan
        # New buffers unless given, as FlashInfer's: the plan's own would be overwritten by the next layer.
        if out is None:
            out = torch.empty(p.total_q, p.num_heads, VALUE_DIM, dtype=torch.bfloat16, device=q.device)
        if not (return_lse or lse is not None):
            return p.run(q, cache, out=out)
        if lse is None:
            lse = torch.empty(p.total_q, p.num_heads, dtype=torch.float32, device=q.device)
        p.run(q, cache, out=out, lse=lse)
        if not return_lse_base_on_e:
            lse.mul_(LOG2E.value)
        return (out, lse) if return_lse else out


__all__ = ["BatchMLAPagedAttentionWrapper", "join_columns"]
