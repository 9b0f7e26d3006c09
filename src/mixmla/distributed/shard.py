"""Token sharding of a KV cache for decode context parallelism (DCP).

Token ``i`` of a request (its ``i``-th cached row, counted from 0 within the request) belongs to
rank ``(i // interleave) % world_size``: runs of ``interleave`` consecutive tokens are dealt to the
ranks in turn, the layout of vLLM's decode context parallelism and SGLang's ``--dcp-size``. Each
rank keeps its tokens in their order, as a cache of the same format with its own ``kv_indptr``.
With one query token per request the attention does not depend on where a key sits, so the
ranks' partial results merge exactly (``mixmla.distributed.merge``); the interleave only decides
how evenly a growing request is spread and how a serving engine appends new tokens.

Pure PyTorch and numpy: the row selection is computed on the host from the indptr, and the rows
are gathered on the cache's device.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass

import numpy as np
import torch

from .. import validate
from ..formats import Bf16Cache, Fp8Cache, Mxfp4Cache

__all__ = ["KVShard", "shard_kv", "local_lengths", "shard_rows"]


@dataclass(frozen=True, eq=False)
class KVShard:
    """One rank's part of a cache, as ``shard_kv`` made it.

    cache: the rank's rows, in the form the cache was given (a container stays that container, a
    bf16 tensor stays a tensor of the same rank, a benchmark tuple stays a tuple; fp8 keeps the
    unsharded tensor scale, MXFP4 the scale rows of the kept tokens). kv_indptr: (batch+1,) prefix
    sums of the rank's tokens per request, the dtype and device of the unsharded one. rank,
    world_size, interleave: the arguments of ``shard_kv``. kv_lens: the unsharded cached tokens per
    request (host ints), which ``dcp_decode`` compares across the ranks.

    Unpacks as ``cache, kv_indptr = shard``; ``dcp_decode(q, shard)`` also checks the group against
    ``rank`` and ``world_size``.
    """

    cache: object
    kv_indptr: torch.Tensor
    rank: int
    world_size: int
    interleave: int
    kv_lens: tuple

    def __iter__(self):
        return iter((self.cache, self.kv_indptr))


def _int_arg(name: str, value, low: int, high: int | None = None) -> int:
    """``value`` as an int in [low, high) (high None: no upper bound); TypeError/ValueError naming it."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    value = int(value)
    if value < low or (high is not None and value >= high):
        bound = f"in [{low}, {high})" if high is not None else f">= {low}"
        raise ValueError(f"{name} must be {bound}, got {value}")
    return value


def local_lengths(kv_lens: np.ndarray, world_size: int, rank: int, interleave: int = 1) -> np.ndarray:
    """Tokens of each request that ``rank`` holds: kv_lens (batch,) int cached tokens per request
    -> (batch,) int64. A full round of ``interleave * world_size`` tokens gives every rank
    ``interleave``; the last, partial round fills the ranks in order."""
    kv_lens = np.asarray(kv_lens, dtype=np.int64)
    rounds, rest = np.divmod(kv_lens, interleave * world_size)
    return rounds * interleave + np.clip(rest - rank * interleave, 0, interleave)


def shard_rows(kv_ptr: np.ndarray, world_size: int, rank: int, interleave: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """The cache rows ``rank`` holds and its indptr: kv_ptr (batch+1,) int64 host prefix sums ->
    ``(rows, local_ptr)``, rows (local total,) int64 indices into the unsharded cache, request by
    request and in order; local_ptr (batch+1,) int64."""
    kv_ptr = np.asarray(kv_ptr, dtype=np.int64)
    counts = local_lengths(kv_ptr[1:] - kv_ptr[:-1], world_size, rank, interleave)
    local_ptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    # The j-th local token of a request is its token (j // I) * I * N + rank * I + j % I.
    request = np.repeat(np.arange(counts.shape[0]), counts)
    j = np.arange(int(local_ptr[-1]), dtype=np.int64) - local_ptr[request]
    rows = kv_ptr[request] + (j // interleave) * (interleave * world_size) + rank * interleave + j % interleave
    return rows, local_ptr


def _take(t: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """Rows ``index`` of ``t`` (along dim 0), same dtype and trailing shape. One-byte float types
    (fp8, packed fp4, E8M0) are gathered as their bytes, which every index kernel supports."""
    if t.element_size() == 1 and t.dtype != torch.uint8:
        return t.view(torch.uint8).index_select(0, index).view(t.dtype)
    return t.index_select(0, index)


def _sharded_cache(cache, wrapped, index: torch.Tensor):
    """The rows ``index`` of ``cache`` in the form it was given (``wrapped`` is its container)."""
    if isinstance(cache, Bf16Cache):
        return Bf16Cache(_take(cache.data, index))
    if isinstance(cache, Fp8Cache):
        return Fp8Cache(_take(cache.data, index), cache.scale)
    if isinstance(cache, Mxfp4Cache):
        return Mxfp4Cache(_take(cache.data, index), _take(cache.scales, index))
    if isinstance(cache, torch.Tensor):
        return _take(cache, index)
    data, extra = cache  # the benchmark tuple: (fp8, scale) or (fp4 bytes, e8m0 scales)
    extra = extra if isinstance(wrapped, Fp8Cache) else _take(extra, index)
    return type(cache)((_take(data, index), extra))


def shard_kv(cache, kv_indptr: torch.Tensor, world_size: int, rank: int, interleave: int = 1) -> KVShard:
    """This rank's part of ``cache``: token ``i`` of each request goes to rank
    ``(i // interleave) % world_size``, in order.

    cache: any format, a container or the benchmark form (see ``mixmla.formats.as_cache``), with
    N rows. kv_indptr: (batch+1,) int32/int64 prefix sums of cached tokens per request, on the
    cache's device, ending at most at N (rows past it belong to no request and are left out).
    world_size: ranks (>= 1). rank: this rank, in [0, world_size). interleave: tokens per run
    (>= 1; vLLM's ``dcp_kv_cache_interleave_size``).

    Returns a :class:`KVShard`: the rank's cache in the given form, and its kv_indptr (the dtype
    and device of ``kv_indptr``). A rank may get no token of a request, or none at all (a cache of
    0 rows); its partial result then weighs nothing in the merge. Reads the indptr on the host (a
    sync on a GPU) and copies the rank's rows.
    """
    world_size = _int_arg("world_size", world_size, 1)
    rank = _int_arg("rank", rank, 0, world_size)
    interleave = _int_arg("interleave", interleave, 1)
    wrapped = validate.check_cache(cache)
    kv_ptr = validate.check_indptr("kv_indptr", kv_indptr, device=wrapped.device, max_last=wrapped.num_tokens)
    rows, local_ptr = shard_rows(kv_ptr, world_size, rank, interleave)
    index = torch.from_numpy(rows).to(wrapped.device)
    local_indptr = torch.from_numpy(local_ptr).to(device=kv_indptr.device, dtype=kv_indptr.dtype)
    kv_lens = tuple(int(n) for n in kv_ptr[1:] - kv_ptr[:-1])
    return KVShard(_sharded_cache(cache, wrapped, index), local_indptr, rank, world_size, interleave, kv_lens)
