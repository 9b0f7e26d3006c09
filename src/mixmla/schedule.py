"""Split-K scheduling: how many chunks each request's cached tokens are cut into.

The decode kernels read each cached token once; the only freedom is how the tokens are cut into
work items. Too few items leave SMs idle (4 requests on 132 SMs); too many cost partial results
that must be written, read back and merged. A schedule aims at ``items_per_sm`` work items per SM,
never cuts a request into chunks shorter than ``min_chunk`` tokens, and skips the merge entirely
(``direct``) when every request is one chunk. The split policy's numbers are a backend's tuning
(for Triton, ``kernels.triton.configs``); this module is plain numpy.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np
import torch

MAX_BLOCK_R = 64  #: query rows per program (larger head counts use several row blocks)
MIN_BLOCK_R = 16  #: a matrix product needs at least 16 rows


def rows_per_request(q_lens, num_heads: int) -> int:
    """Query rows (Lq * H) of the longest request, at least H: what a program's rows must cover."""
    return max(1, int(np.asarray(q_lens).max(initial=1))) * num_heads


def block_rows(rows_max: int) -> int:
    """Query rows per program for requests of at most ``rows_max`` rows (Lq * H): a power of two
    from MIN_BLOCK_R to MAX_BLOCK_R."""
    return min(MAX_BLOCK_R, max(MIN_BLOCK_R, 1 << max(0, (rows_max - 1).bit_length())))


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


def splits_per_request(kv_lens: np.ndarray, target_items: float, min_chunk: int,
                       total: int | None = None) -> np.ndarray:
    """Chunks per request (int32; kv_lens int64): about ``total_tokens / target_items`` tokens per
    chunk, at least ``min_chunk``, at least one chunk per request. total: ``kv_lens.sum()`` when
    the caller knows it."""
    total = int(kv_lens.sum()) if total is None else total
    chunk = max(min_chunk, math.ceil(total / max(target_items, 1.0)))
    if 2 * int(kv_lens.max(initial=0)) < 3 * chunk:
        # Every request rounds to at most one chunk (rint(x) <= 1 for x < 1.5): the direct case.
        return np.ones(kv_lens.shape[0], np.int32)
    # Never more chunks than min_chunk-sized pieces of the request, never fewer than one.
    nsplit = np.minimum(np.rint(kv_lens / chunk), (kv_lens + (min_chunk - 1)) // min_chunk)
    return np.maximum(nsplit, 1).astype(np.int32)


def make_schedule(kv_lens, q_lens, num_heads: int, num_sms: int, items_per_sm: float, min_chunk: int,
                  block_t: int = 1) -> Schedule:
    """Plan one launch.

    kv_lens, q_lens: per-request cached tokens and query tokens (int sequences or arrays, same
    length). num_heads: H. num_sms: multiprocessors of the device (132 on an H200). items_per_sm,
    min_chunk: the split policy (module doc); min_chunk is rounded up to ``block_t``, the kernel's
    tile.
    """
    kv_lens = np.asarray(kv_lens, dtype=np.int64)
    rows_max = rows_per_request(q_lens, num_heads)
    block_r = block_rows(rows_max)
    row_blocks = -(-rows_max // block_r)
    nsplit = splits_per_request(kv_lens, num_sms * items_per_sm / row_blocks, max(min_chunk, block_t))
    return schedule_of_splits(nsplit, rows_max, block_r, row_blocks)


def schedule_of_splits(nsplit: np.ndarray, rows_max: int, block_r: int, row_blocks: int) -> Schedule:
    """The schedule whose request b has ``nsplit[b]`` chunks (int32 (batch,)); the rest as in
    ``Schedule``. Everything but the rows depends on ``nsplit`` alone."""
    batch = nsplit.shape[0]
    max_splits = int(nsplit.max(initial=1))
    if max_splits == 1:  # direct: one work item per request
        requests = np.arange(batch, dtype=np.int32)
        return Schedule(requests, np.zeros(batch, np.int32), nsplit, np.arange(batch + 1, dtype=np.int32), rows_max,
                        block_r, row_blocks, direct=True, max_splits=1)
    split_indptr = np.zeros(batch + 1, dtype=np.int32)
    np.cumsum(nsplit, out=split_indptr[1:])
    work_req = np.repeat(np.arange(batch, dtype=np.int32), nsplit)
    work_split = np.arange(work_req.shape[0], dtype=np.int32) - split_indptr[work_req]
    return Schedule(work_req, work_split, nsplit[work_req], split_indptr, rows_max, block_r, row_blocks,
                    direct=False, max_splits=max_splits)


@functools.lru_cache(maxsize=None)
def _cuda_sm_count(index: int) -> int:
    return torch.cuda.get_device_properties(index).multi_processor_count


def device_sm_count(device: torch.device) -> int:
    """Multiprocessors of a CUDA device; 132 (an H200) for CPU runs so plans match the GPU's."""
    if device.type == "cuda":
        return _cuda_sm_count(device.index if device.index is not None else torch.cuda.current_device())
    return 132
