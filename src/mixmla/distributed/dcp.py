"""Decode context parallelism over ``torch.distributed``: one request's cache spread over ranks.

Every rank of a group holds the same queries and a token shard of the cache
(``mixmla.distributed.shard_kv``). A step is: the local decode over the shard, through the public
API with a float32 ``out`` (the rank's normalized output before any bf16 rounding) and its
log-sum-exp; the exchange of those partials; the exact merge of ``mixmla.distributed.merge`` in
rank order, rounded to bf16 once at the end. Two schedules move the partials:

``"allgather"``
    one all-gather of every rank's (out, lse), packed in one buffer; every rank then merges all
    heads. Each rank receives (N - 1) x (512 + 1) float32 per (query, head).
``"reduce_scatter"``
    vLLM's scheme: an all-gather of the lse only; each rank scales its own output by its weight and
    the heads are reduce-scattered, rank ``j`` summing heads ``j * H/N .. (j+1) * H/N``; an
    all-gather of those bf16 heads then gives every rank the full result. The reduce-scatter is an
    all-to-all of the scaled float32 slices (the bytes a ring reduce-scatter moves) followed by the
    sum in rank order on the receiving rank: NCCL's reduce-scatter would add in its ring's order,
    which differs from slice to slice, and the merge would no longer be the fixed-order one. Each
    rank receives (N - 1) / N x (512 x 4 + 512 x 2) bytes per (query, head) plus the lse.

Both give the same bytes (the same float32 operations in the same order), on every rank.
Collectives are ``torch.distributed``'s (NCCL on GPUs, gloo on CPUs); the group defaults to the
world. One query token per request: with several, a query's causal window is a range of token
positions, which a shard does not hold contiguously.
"""

from __future__ import annotations

import struct
from typing import Callable

import numpy as np
import torch
import torch.distributed as dist

from .. import validate
from ..api import plan as _plan
from ..formats import FORMATS, VALUE_DIM
from . import merge
from .shard import KVShard

__all__ = ["SCHEDULES", "DcpPlan", "dcp_plan", "dcp_decode"]

#: The communication schedules (module doc).
SCHEDULES = ("allgather", "reduce_scatter")

# torch 2.13 names the tensor collectives *_single; earlier releases only have the older names.
_ALL_GATHER = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor


def _all_gather(out: torch.Tensor, part: torch.Tensor, group) -> None:
    """All-gather ``part`` (contiguous) of every rank into ``out`` (contiguous, N x part's
    elements, rank after rank). Flat, the one layout every backend takes (gloo wants the
    concatenated form)."""
    _ALL_GATHER(out.view(-1), part.view(-1), group=group)


def _resolve_group(group):
    if not dist.is_available() or not dist.is_initialized():
        raise RuntimeError("mixmla.distributed needs torch.distributed initialized (torchrun and "
                           "torch.distributed.init_process_group); for one process use mixmla.mla_decode")
    return dist.group.WORLD if group is None else group


def _check_schedule(schedule, num_heads: int, world_size: int) -> None:
    """``schedule`` is one of SCHEDULES; the reduce-scatter gives each rank H / N whole heads."""
    if schedule not in SCHEDULES:
        raise ValueError(f"schedule must be one of {SCHEDULES}, got {schedule!r}")
    if schedule == "reduce_scatter" and num_heads % world_size:
        raise ValueError(f"schedule='reduce_scatter' splits the {num_heads} heads over the group's {world_size} "
                         f"ranks, which needs H divisible by the group size; use schedule='allgather'")


def _check_one_query_per_request(qo_ptr: np.ndarray) -> None:
    lens = qo_ptr[1:] - qo_ptr[:-1]
    if (lens != 1).any():
        b = int(np.argmax(lens != 1))
        raise ValueError(f"qo_indptr: decode context parallelism needs one query token per request, got "
                         f"{int(lens[b])} for request {b}; several query tokens (MTP, speculative decoding) see "
                         f"causal windows of token positions, which a token shard does not hold in one piece")


class DcpPlan:
    """One rank's decode-context-parallel step for one batch layout, with its buffers allocated.

    Made by ``dcp_plan(...)`` on every rank of ``group`` together. ``run(q, cache)`` launches the
    local decode, the collectives and the merge without synchronizing with the host; it trusts
    that every rank passes the same q and its own shard of one cache (``dcp_decode`` checks that).

    Attributes: group, world_size (N), rank, schedule, num_heads (H), total_q (= batch), local
    (the ``DecodePlan`` of the local decode, Triton backend: the one that writes a float32
    out), out (total_q, H, 512) bf16 and lse (total_q, H) float32: the buffers ``run`` returns
    (overwritten by the next run).
    """

    def __init__(self, local_kv_indptr: torch.Tensor, qo_indptr: torch.Tensor | None = None, num_heads: int = 16,
                 fmt: str = "bf16", *, group=None, sm_scale: float | None = None, schedule: str = "allgather",
                 device=None, config=None):
        self.group = _resolve_group(group)
        self.world_size = dist.get_world_size(self.group)
        self.rank = dist.get_rank(self.group)
        _, qo_ptr, _ = validate.check_plan_inputs(local_kv_indptr, qo_indptr, num_heads, fmt, sm_scale, device)
        _check_one_query_per_request(qo_ptr)
        _check_schedule(schedule, num_heads, self.world_size)
        self.schedule = schedule
        self.local = _plan(local_kv_indptr, qo_indptr, num_heads, fmt, sm_scale, device, config, backend="triton")
        self.num_heads, self.total_q = int(num_heads), self.local.total_q
        n, t, h, d, dev = self.world_size, self.total_q, self.num_heads, VALUE_DIM, self.local.device
        f32 = dict(dtype=torch.float32, device=dev)
        self.out = torch.empty(t, h, d, dtype=torch.bfloat16, device=dev)
        self.lse = torch.empty(t, h, **f32)
        self._acc = torch.empty(t, h // n if schedule == "reduce_scatter" else h, d, **f32)
        if schedule == "allgather":
            # (out, lse) packed in one buffer: one collective instead of two.
            self._send = torch.empty(t * h * (d + 1), **f32)
            self._part = self._send[:t * h * d].view(t, h, d)
            self._part_lse = self._send[t * h * d:].view(t, h)
            self._recv = torch.empty(n, t * h * (d + 1), **f32)
            self._parts = self._recv[:, :t * h * d].view(n, t, h, d)
            self._lse_parts = self._recv[:, t * h * d:].view(n, t, h)
        else:
            hn = h // n
            self._part = torch.empty(t, h, d, **f32)
            self._lse_parts = torch.empty(n, t, h, **f32)
            self._send = torch.empty(n, t, hn, d, **f32)  # [j]: the heads of rank j, scaled
            self._recv = torch.empty(n, t, hn, d, **f32)  # [r]: this rank's heads from rank r
            self._own = torch.empty(t, hn, d, dtype=torch.bfloat16, device=dev)
            self._heads = torch.empty(n, t, hn, d, dtype=torch.bfloat16, device=dev)

    def run(self, q: torch.Tensor, cache, return_lse: bool = False, marks: Callable[[str], None] | None = None):
        """One step: q (total_q, H, 576) bf16, the same on every rank; cache: this rank's shard, in
        the plan's format. Returns out (total_q, H, 512) bf16, the full result, the same bytes on
        every rank (the plan's buffer ``self.out``), and with ``return_lse`` lse (total_q, H)
        float32 natural log over all ranks' tokens.

        marks: a timing hook, called with the name of each stage as it ends on the host
        ("decode", "comm", "merge"; each collective is one "comm"), so that a caller can record
        CUDA events between stages (``mixmla bench --dcp``).
        """
        mark = marks or (lambda _stage: None)
        lse_local = self.local.run(q, cache, out=self._part, return_lse=True)[1]
        mark("decode")
        if self.schedule == "allgather":
            self._part_lse.copy_(lse_local)
            mark("merge")
            _all_gather(self._recv, self._send, self.group)
            mark("comm")
            self.lse.copy_(merge.global_lse(self._lse_parts))
            weights = merge.rank_weights(self._lse_parts, self.lse)
            merge.sum_in_rank_order(merge.scaled_partial(self._parts, weights), out=self._acc)
            self.out.copy_(self._acc)
            mark("merge")
        else:
            n, t, h = self.world_size, self.total_q, self.num_heads
            _all_gather(self._lse_parts, lse_local, self.group)
            mark("comm")
            self.lse.copy_(merge.global_lse(self._lse_parts))
            weight = merge.rank_weights(self._lse_parts[self.rank], self.lse)
            merge.scaled_partial(self._part.view(t, n, h // n, VALUE_DIM).transpose(0, 1),
                                 weight.view(t, n, h // n).transpose(0, 1), out=self._send)
            mark("merge")
            dist.all_to_all_single(self._recv, self._send, group=self.group)
            mark("comm")
            self._own.copy_(merge.sum_in_rank_order(self._recv, out=self._acc))
            mark("merge")
            _all_gather(self._heads, self._own, self.group)
            mark("comm")
            self.out.view(t, n, h // n, VALUE_DIM).copy_(self._heads.transpose(0, 1))
            mark("merge")
        return (self.out, self.lse) if return_lse else self.out

    def communicate(self) -> None:
        """The schedule's collectives alone, on the buffers as they are (no decode, no merge): what
        ``mixmla bench --dcp`` times as the communication of a step."""
        if self.schedule == "allgather":
            _all_gather(self._recv, self._send, self.group)
        else:
            _all_gather(self._lse_parts, self.local.lse, self.group)
            dist.all_to_all_single(self._recv, self._send, group=self.group)
            _all_gather(self._heads, self._own, self.group)

    def __repr__(self) -> str:
        return (f"DcpPlan(schedule={self.schedule!r}, rank={self.rank}/{self.world_size}, H={self.num_heads}, "
                f"total_q={self.total_q}, local={self.local!r})")


def dcp_plan(local_kv_indptr: torch.Tensor, qo_indptr: torch.Tensor | None = None, num_heads: int = 16,
             fmt: str = "bf16", *, group=None, sm_scale: float | None = None, schedule: str = "allgather",
             device=None, config=None) -> DcpPlan:
    """Plan a decode-context-parallel step on this rank (every rank of ``group`` calls it).

    local_kv_indptr: (batch+1,) int32/int64 prefix sums of this rank's cached tokens per request
    (``KVShard.kv_indptr``). qo_indptr: None or (batch+1,) with one query token per request
    (anything else: ValueError). num_heads: H in {16, 32, 64, 128}. fmt: the cache format.
    group: a ``torch.distributed`` process group (default: the world). sm_scale: softmax scale
    (default 1/sqrt(576)). schedule: 'allgather' or 'reduce_scatter' (module doc; the latter needs
    H divisible by the group size). device: where to run (default: the indptr's). config: the
    Triton kernel shape of the local decode (default: tuned per format).
    """
    return DcpPlan(local_kv_indptr, qo_indptr, num_heads, fmt, group=group, sm_scale=sm_scale, schedule=schedule,
                   device=device, config=config)


# ---------------------------------------------------------------------------------------------
# The cross-rank check of dcp_decode: every rank contributes one row of integers, all-gathered, so
# that every rank takes the same decision from the same table (a rank that raised alone would
# leave the others waiting in the next collective).

_FIELDS = ("ok", "schedule", "batch", "total_q", "num_heads", "fmt", "sm_scale", "q_sum", "sharded", "shard_rank",
           "shard_world", "interleave", "kv_total", "kv_hash")


def _float_bits(x: float) -> int:
    return struct.unpack("<q", struct.pack("<d", float(x)))[0]


def _lengths_hash(kv_lens) -> int:
    """A checksum of the unsharded lengths (position-weighted, modulo a 61-bit prime)."""
    lens = np.asarray(kv_lens, dtype=np.int64) % ((1 << 61) - 1)
    weights = np.arange(1, lens.shape[0] + 1, dtype=np.int64)
    return int(sum(int(a) * int(b) for a, b in zip(lens, weights)) % ((1 << 61) - 1))


def _describe(ok: bool, schedule, checked, q, shard: KVShard | None) -> list[int]:
    row = dict.fromkeys(_FIELDS, -1)
    row["ok"] = int(ok)
    row["schedule"] = SCHEDULES.index(schedule) if schedule in SCHEDULES else -1
    if checked is not None:
        row.update(batch=checked.batch, total_q=checked.total_q, num_heads=checked.num_heads,
                   fmt=FORMATS.index(checked.cache.format), sm_scale=_float_bits(checked.sm_scale),
                   # An integer sum of q's bits: exact in any order, so equal q gives equal sums.
                   q_sum=int(q.view(torch.int16).sum(dtype=torch.int64)))
    if shard is not None:
        row.update(sharded=1, shard_rank=shard.rank, shard_world=shard.world_size, interleave=shard.interleave,
                   kv_total=sum(shard.kv_lens), kv_hash=_lengths_hash(shard.kv_lens))
    else:
        row["sharded"] = 0
    return [row[f] for f in _FIELDS]


def _collective_device(group, q) -> torch.device:
    if isinstance(q, torch.Tensor) and q.device.type != "meta":
        return q.device
    # q is not usable: still take part in the check, on the device the group's backend serves.
    backend = str(dist.get_backend(group))
    return torch.device("cuda", torch.cuda.current_device()) if "nccl" in backend else torch.device("cpu")


def _check_across_ranks(table: np.ndarray, world_size: int) -> None:
    """Raise the same ValueError on every rank when the ranks' rows disagree (module comment)."""
    col = {f: table[:, i] for i, f in enumerate(_FIELDS)}
    failed = [r for r in range(world_size) if not col["ok"][r]]
    if failed:
        raise ValueError(f"dcp_decode: rank(s) {failed} of the group failed their argument checks (their own "
                         f"errors say why); nothing was run")
    names = {"schedule": "schedule", "batch": "the batch (len(kv_indptr) - 1)", "total_q": "q.shape[0]",
             "num_heads": "q.shape[1] (heads)", "fmt": "the cache format", "sm_scale": "sm_scale",
             "q_sum": "q (every rank must pass the same queries)",
             "sharded": "the kind of shard (a KVShard on some ranks, a plain cache on others)"}
    for field, what in names.items():
        values = col[field]
        if (values != values[0]).any():
            r = int(np.argmax(values != values[0]))
            raise ValueError(f"dcp_decode: mismatched shards: ranks 0 and {r} differ in {what}")
    if not col["sharded"][0]:
        return
    if (col["shard_world"] != world_size).any():
        r = int(np.argmax(col["shard_world"] != world_size))
        raise ValueError(f"dcp_decode: wrong group size: rank {r} holds a shard made for world_size="
                         f"{int(col['shard_world'][r])} (shard_kv), but the group has {world_size} ranks")
    if (col["shard_rank"] != np.arange(world_size)).any():
        r = int(np.argmax(col["shard_rank"] != np.arange(world_size)))
        raise ValueError(f"dcp_decode: mismatched shards: rank {r} of the group holds the shard of rank "
                         f"{int(col['shard_rank'][r])}")
    for field, what in (("interleave", "interleave"), ("kv_total", "the unsharded cache's tokens"),
                        ("kv_hash", "the unsharded cache's per-request lengths")):
        values = col[field]
        if (values != values[0]).any():
            r = int(np.argmax(values != values[0]))
            raise ValueError(f"dcp_decode: mismatched shards: ranks 0 and {r} sharded with a different {what}")


def dcp_decode(q: torch.Tensor, local_cache, local_kv_indptr: torch.Tensor | None = None,
               qo_indptr: torch.Tensor | None = None, *, group=None, sm_scale: float | None = None,
               return_lse: bool = False, schedule: str = "allgather"):
    """MLA decode attention over a cache sharded along tokens across the ranks of ``group``.

    Every rank calls it with the same q and its own shard. q: (total_q, H, 576) bf16, one query
    token per request (total_q = batch). local_cache: this rank's cache in any format, or the
    ``KVShard`` of ``shard_kv`` (then local_kv_indptr is taken from it and may be left out, and the
    group's size and this rank's place in it are checked against the shard). local_kv_indptr:
    (batch+1,) int32/int64 prefix sums of this rank's tokens per request. qo_indptr: None or one
    query per request (several: ValueError, see the module doc). group: a process group (default
    the world). sm_scale: default 1/sqrt(576). schedule: 'allgather' or 'reduce_scatter'.

    Returns out (total_q, H, 512) bf16, the attention over every rank's tokens, with the same
    bytes on every rank, and with ``return_lse`` lse (total_q, H) float32 natural log (``-inf``
    where no rank holds a token of the request, whose output is zeros).

    Before anything runs, the ranks compare their arguments in one small all-gather (a host sync):
    a rank whose own checks fail raises its error and the others raise a ValueError naming it; a
    different batch, format, head count, softmax scale, schedule or q on some rank, or shards made
    for another group size, rank or cache, raise the same ValueError on every rank. For repeated
    steps without these checks and without host syncs, use ``dcp_plan`` once and ``DcpPlan.run``.
    """
    group = _resolve_group(group)
    world_size = dist.get_world_size(group)
    shard = local_cache if isinstance(local_cache, KVShard) else None
    checked, error = None, None
    try:
        if shard is not None:
            if local_kv_indptr is not None and local_kv_indptr is not shard.kv_indptr:
                raise ValueError("local_kv_indptr: leave it out when local_cache is a KVShard (it has its own)")
            local_cache, local_kv_indptr = shard.cache, shard.kv_indptr
        elif local_kv_indptr is None:
            raise TypeError("local_kv_indptr is required unless local_cache is the KVShard of shard_kv")
        checked = validate.check_decode_inputs(q, local_cache, local_kv_indptr, qo_indptr, sm_scale)
        _check_one_query_per_request(checked.qo_ptr)
        _check_schedule(schedule, checked.num_heads, world_size)
    except (TypeError, ValueError) as err:
        error = err
    row = _describe(error is None, schedule, checked if error is None else None, q, shard)
    device = _collective_device(group, q if error is None else None)
    mine = torch.tensor(row, dtype=torch.int64, device=device)
    table = torch.empty(world_size, len(row), dtype=torch.int64, device=device)
    _all_gather(table, mine, group)
    if error is not None:
        raise error
    _check_across_ranks(table.cpu().numpy(), world_size)
    p = DcpPlan(local_kv_indptr, qo_indptr, checked.num_heads, checked.cache.format, group=group,
                sm_scale=checked.sm_scale, schedule=schedule, device=q.device)
    return p.run(q, checked.cache, return_lse=return_lse)
