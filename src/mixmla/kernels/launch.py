"""Host side of the kernels: turns a cache container and a schedule into kernel arguments.

Only this module knows the kernels' argument lists; ``mixmla.api`` deals in caches and plans.
"""

from __future__ import annotations

import os

import torch

from ..formats import Bf16Cache, Fp8Cache, KVCache, Mxfp4Cache
from ..plan import KernelConfig, Schedule
from .combine import mla_combine_kernel
from .decode import mla_decode_kernel
from .loaders import FMT_BF16, FMT_FP8, FMT_FP8_FNUZ, FMT_MXFP4

COMBINE_BLOCK_R = 16  #: rows per combine program
COMBINE_BLOCK_D = 32  #: output columns per combine program: 16 programs per row block, many in flight
COMBINE_MAX_BLOCK_S = 16  #: partials one combine load reads (registers: 16 x 16 x 32 floats per program)


def interpreter_active() -> bool:
    """True when Triton runs kernels in its CPU interpreter (TRITON_INTERPRET=1)."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def cache_arguments(cache: KVCache):
    """``(FORMAT, kv, kv_stride, scales, scale_stride)`` for the decode kernel: the stored rows and
    their row stride, and the format's scales (fp8: the per-tensor float32 scale, read on the
    device so that no host sync is needed; MXFP4: the E8M0 rows and their stride; bf16: none)."""
    if isinstance(cache, Bf16Cache):
        return FMT_BF16, cache.data, cache.data.stride(0), None, None
    if isinstance(cache, Fp8Cache):
        if cache.is_fnuz:
            data = cache.data.view(torch.uint8)
            return FMT_FP8_FNUZ, data, data.stride(0), cache.scale, None
        data = cache.data.view(torch.float8_e4m3fn)
        return FMT_FP8, data, data.stride(0), cache.scale, None
    if isinstance(cache, Mxfp4Cache):
        return FMT_MXFP4, cache.data, cache.data.stride(0), cache.scales, cache.scales.stride(0)
    raise TypeError(f"unsupported cache type {type(cache).__name__}")


def launch_decode(
    q: torch.Tensor,
    cache: KVCache,
    kv_indptr: torch.Tensor,
    qo_indptr: torch.Tensor,
    schedule: Schedule,
    work: tuple,
    workspace: tuple,
    out: torch.Tensor,
    lse: torch.Tensor | None,
    sm_scale: float,
    num_heads: int,
    config: KernelConfig,
) -> None:
    """Launch decode (and combine unless the schedule is direct).

    q (total_q, H, 576) bf16; kv_indptr, qo_indptr (batch+1,) int32 on q's device;
    work = (work_req, work_split, work_nsplit, split_indptr) int32 device tensors of ``schedule``;
    workspace = (part_o (num_work, rows_max, 512) float32, part_lse (num_work, rows_max) float32);
    out (total_q, H, 512) bf16, written; lse (total_q, H) float32 natural log, written if given.
    """
    fmt, kv, kv_stride, scales, scale_stride = cache_arguments(cache)
    fmt = int(getattr(fmt, "value", fmt))
    work_req, work_split, work_nsplit, split_indptr = work
    part_o, part_lse = workspace
    write_lse = lse is not None
    lse_arg = lse if write_lse else out
    lse_stride = lse.stride(0) if write_lse else 0
    interpreted = interpreter_active()
    grid = (schedule.num_work, schedule.row_blocks)
    mla_decode_kernel[grid](
        q, q.stride(0), q.stride(1),
        kv, kv_stride, scales, scale_stride,
        kv_indptr, qo_indptr,
        work_req, work_split, work_nsplit,
        out, out.stride(0), out.stride(1), lse_arg, lse_stride,
        part_o, part_lse, schedule.rows_max,
        sm_scale,
        H=num_heads, BLOCK_R=schedule.block_r, BLOCK_T=config.block_t, FORMAT=fmt,
        DIRECT=schedule.direct, WRITE_LSE=write_lse, INTERPRETED=interpreted,
        num_warps=config.num_warps, num_stages=config.num_stages,
    )
    if not schedule.direct:
        batch = split_indptr.shape[0] - 1
        mla_combine_kernel[(batch, -(-schedule.rows_max // COMBINE_BLOCK_R), 512 // COMBINE_BLOCK_D)](
            part_o, part_lse, schedule.rows_max, split_indptr, qo_indptr,
            out, out.stride(0), out.stride(1), lse_arg, lse_stride,
            H=num_heads, BLOCK_R=COMBINE_BLOCK_R, BLOCK_D=COMBINE_BLOCK_D, WRITE_LSE=write_lse,
            BLOCK_S=min(COMBINE_MAX_BLOCK_S, 1 << max(0, schedule.max_splits - 1).bit_length()),
            num_warps=4,
        )
