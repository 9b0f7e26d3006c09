"""Planning: how many chunks each request is split into, and the kernel shape per format.

The decode kernel reads each cached token once; the only freedom is how the tokens are cut into
work items. Too few items leave SMs idle (4 requests on 132 SMs); too many cost partial results
that must be written, read back and merged. The schedule aims at ``items_per_sm`` work items per
SM, never cuts a request into chunks shorter than ``min_chunk`` tokens, and skips the merge
entirely (``direct``) when every request is one chunk.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
import torch

MAX_BLOCK_R = 64  #: query rows per program (larger head counts use several row blocks)
MIN_BLOCK_R = 16  #: tl.dot needs at least 16 rows


@dataclass(frozen=True)
class KernelConfig:
    """Kernel shape for one format. block_t: cached tokens per loop step; num_warps, num_stages:
    Triton launch options; items_per_sm and min_chunk: the split policy (see module doc). The
    variants measured and dropped (tokens in the matrix unit's row slot, a second read of the
    values, register prefetch, fp8 scores on the fp8 matrix unit, register caps, the combine as a
    programmatic dependent launch) are recorded in docs/PERF.md's design log."""

    block_t: int = 32
    num_warps: int = 4
    num_stages: int = 2
    items_per_sm: float = 2.0
    min_chunk: int = 64


#: Defaults per format, the fastest in the H200 sweeps recorded in docs/PERF.md
#: (bench/results/2026-11-30-*/sweep*.jsonl). items_per_sm matches how many programs of that shape
#: fit on an SM at once (shared memory: bf16 and fp8 168 and 164 KB, so one; MXFP4 111 KB, two):
#: more work items than resident slots only adds a partial result to merge.
DEFAULT_CONFIGS = {
    "bf16": KernelConfig(block_t=64, num_warps=4, num_stages=3, items_per_sm=1.0),
    "fp8": KernelConfig(block_t=64, num_warps=4, num_stages=3, items_per_sm=1.0),
    "mxfp4": KernelConfig(block_t=64, num_warps=4, num_stages=2, items_per_sm=2.0),
}


def rows_per_request(q_lens, num_heads: int) -> int:
    """Query rows (Lq * H) of the longest request, at least H: what a program's rows must cover."""
    return int(max(1, np.asarray(q_lens, dtype=np.int64).max(initial=1))) * num_heads


def block_rows(rows_max: int) -> int:
    """Query rows per program for requests of at most ``rows_max`` rows (Lq * H): a power of two
    from MIN_BLOCK_R to MAX_BLOCK_R."""
    return min(MAX_BLOCK_R, max(MIN_BLOCK_R, _next_pow2(rows_max)))


def default_config(fmt: str, rows_max: int = MIN_BLOCK_R) -> KernelConfig:
    """``DEFAULT_CONFIGS[fmt]``, adapted to 64-row programs (H >= 64, or Lq * H >= 64): 2 pipeline
    stages (3 would not fit an SM's shared memory: bf16 needs 288 KB) and 8 warps (with 4, the
    64 x 512 float32 accumulator is 256 registers per thread and spills; on the H200 at H = 128,
    32 x 4096: bf16 296 -> 163 us, fp8 301 -> 194, MXFP4 431 -> 303, bench/wide_heads.py)."""
    config = DEFAULT_CONFIGS[fmt]
    if block_rows(rows_max) >= MAX_BLOCK_R:
        config = replace(config, num_stages=min(config.num_stages, 2), num_warps=max(config.num_warps, 8))
    return config


@dataclass(frozen=True)
class Schedule:
    """Work items of one launch.

    work_req, work_split, work_nsplit: (num_work,) int32 — request, chunk index, chunks of that
    request. split_indptr: (batch+1,) int32 — work items of request b are
    ``split_indptr[b] .. split_indptr[b+1]``. rows_max: max query rows (Lq * H) of a request;
    block_r: rows per program; row_blocks: programs per work item along the rows;
    direct: every request is a single chunk, so the decode kernel writes the output itself.
    max_splits: the most chunks any request has.
    """

    work_req: np.ndarray
    work_split: np.ndarray
    work_nsplit: np.ndarray
    split_indptr: np.ndarray
    rows_max: int
    block_r: int
    row_blocks: int
    direct: bool
    max_splits: int = 1

    @property
    def num_work(self) -> int:
        return int(self.work_req.shape[0])


def _next_pow2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def splits_per_request(kv_lens: np.ndarray, target_items: float, config: KernelConfig) -> np.ndarray:
    """Chunks per request: about ``total_tokens / target_items`` tokens per chunk, at least
    ``min_chunk`` (rounded to ``block_t``), at least one chunk per request."""
    total = int(kv_lens.sum())
    min_chunk = max(config.min_chunk, config.block_t)
    chunk = max(min_chunk, math.ceil(total / max(target_items, 1.0)))
    nsplit = np.maximum(1, np.rint(kv_lens / chunk)).astype(np.int64)
    # Never more chunks than min_chunk-sized pieces of the request.
    return np.minimum(nsplit, np.maximum(1, -(-kv_lens // min_chunk))).astype(np.int32)


def make_schedule(kv_lens, q_lens, num_heads: int, num_sms: int, config: KernelConfig) -> Schedule:
    """Plan one launch.

    kv_lens, q_lens: per-request cached tokens and query tokens (sequences of ints, same length).
    num_heads: H. num_sms: multiprocessors of the device (132 on an H200).
    """
    kv_lens = np.asarray(kv_lens, dtype=np.int64)
    q_lens = np.asarray(q_lens, dtype=np.int64)
    rows_max = rows_per_request(q_lens, num_heads)
    block_r = block_rows(rows_max)
    row_blocks = -(-rows_max // block_r)
    target = num_sms * config.items_per_sm / row_blocks
    nsplit = splits_per_request(kv_lens, target, config)
    split_indptr = np.zeros(len(kv_lens) + 1, dtype=np.int32)
    np.cumsum(nsplit, out=split_indptr[1:])
    work_req = np.repeat(np.arange(len(kv_lens), dtype=np.int32), nsplit)
    work_split = (np.arange(work_req.shape[0], dtype=np.int32) - split_indptr[work_req]).astype(np.int32)
    work_nsplit = nsplit[work_req].astype(np.int32)
    return Schedule(work_req, work_split, work_nsplit, split_indptr, rows_max, block_r, row_blocks,
                    direct=bool((nsplit == 1).all()), max_splits=int(nsplit.max(initial=1)))


def device_sm_count(device: torch.device) -> int:
    """Multiprocessors of a CUDA device; 132 (an H200) for CPU runs so plans match the GPU's."""
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 132
