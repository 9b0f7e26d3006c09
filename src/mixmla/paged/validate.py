"""Argument checks of the paged entry points, run before any launch (the rules of ``mixmla.validate``,
extended to page tables).

Structural checks read metadata only (no sync): the page table's kind, dtypes, ranks, strides,
batch and device; the pool's shape and page size. Value checks read O(batch) values on the host
in one transfer (a sync on a GPU), the page table itself in the same transfer when it is small
(``HOST_TABLE_BYTES``), else reduced on the device first (to the smallest and largest entry in use),
so that their host cost does not grow with the table: every
cached-token count is >= 0 and within its request's pages, every page entry a request uses lies
in ``[0, num_pages)`` (entries past a request's tokens are not read and may hold anything, such as
-1 padding), CSR page indptrs start at 0, do not decrease and end within the indices,
``qo_indptr`` as for the contiguous layout, the fp8 scale finite and > 0. Errors are
``TypeError``/``ValueError`` naming the argument.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass
from typing import Optional

import numpy as np
import torch

from .. import validate
from ..formats import Fp8Cache
from ..formats.paged import PagedCache, as_paged_cache, check_page_size
from ..kernels.backend import PageTable

TABLE_DTYPES = validate.INDPTR_DTYPES
#: Page tables of at most this many bytes are read whole with the other values and checked on the
#: host; larger ones are reduced on the device first (``_used_entry_range``). On a GPU's host each
#: torch operation of that reduction costs several us, more than reading a small table along and
#: comparing it with numpy, which grows with the table.
HOST_TABLE_BYTES = 32 * 1024


@dataclass(frozen=True)
class PagedInputs:
    """What the paged checks learned. cache: the pool as a ``PagedCache``; pages: the ``PageTable``
    (the caller's tensors); num_heads, total_q; sm_scale (float); kv_lens (batch,) and qo_ptr
    (batch+1,) int64 host values when the values were checked, else None."""

    cache: Optional[PagedCache]
    pages: PageTable
    num_heads: int
    total_q: int
    sm_scale: float
    kv_lens: Optional[np.ndarray]
    qo_ptr: Optional[np.ndarray]

    @property
    def batch(self) -> int:
        return int(self.pages.seq_lens.shape[0])


def _vector(name: str, t, length: Optional[int], device) -> None:
    """``t``: a 1-D int32/int64 tensor of unit stride (of ``length`` entries when given) on ``device``."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a 1-D {validate._names(TABLE_DTYPES)} torch.Tensor, got {type(t).__name__}")
    if t.dtype not in TABLE_DTYPES:
        raise TypeError(f"{name} must have dtype {validate._names(TABLE_DTYPES)}, got {t.dtype}")
    if t.dim() != 1:
        raise ValueError(f"{name} must be 1-D, got shape {tuple(t.shape)}")
    if length is not None and t.shape[0] != length:
        raise ValueError(f"{name} must have {length} entries, got {t.shape[0]}")
    if t.shape[0] > 1 and t.stride(0) != 1:
        raise ValueError(f"{name} must be contiguous (stride 1), got stride {t.stride(0)}")
    if device is not None and not validate._same_device(t.device, device):
        raise ValueError(f"{name} is on {t.device} but q is on {device}; all tensors must share one device")


def block_table_pages(block_table, seq_lens, page_size, device=None) -> PageTable:
    """Structure of the block-table form: block_table (batch, max_pages) int32/int64 with unit
    last stride, seq_lens (batch,) int32/int64, both on ``device`` (default: block_table's)."""
    page_size = check_page_size(page_size)
    if not isinstance(block_table, torch.Tensor):
        raise TypeError(f"block_table must be a 2-D {validate._names(TABLE_DTYPES)} torch.Tensor (batch, max_pages), "
                        f"got {type(block_table).__name__}")
    if block_table.dtype not in TABLE_DTYPES:
        raise TypeError(f"block_table must have dtype {validate._names(TABLE_DTYPES)}, got {block_table.dtype}")
    if block_table.dim() != 2 or block_table.shape[0] < 1:
        raise ValueError(f"block_table must be 2-D (batch, max_pages) with batch >= 1, got shape "
                         f"{tuple(block_table.shape)}")
    if block_table.shape[1] > 1 and block_table.stride(1) != 1:
        raise ValueError(f"block_table must be contiguous along its last dim (stride 1), got strides "
                         f"{block_table.stride()}")
    device = block_table.device if device is None else device
    if not validate._same_device(block_table.device, device):
        raise ValueError(f"block_table is on {block_table.device} but q is on {device}; all tensors must share "
                         f"one device")
    _vector("seq_lens", seq_lens, block_table.shape[0], device)
    return PageTable(seq_lens, block_table, None, page_size)


def csr_pages(kv_indptr, kv_indices, kv_len, page_size, device=None) -> PageTable:
    """Structure of the CSR form: kv_indptr (batch+1,) over pages, kv_indices (pages used,),
    kv_len (batch,) cached tokens, all int32/int64 on ``device`` (default: kv_indptr's)."""
    page_size = check_page_size(page_size)
    validate.check_indptr("kv_indptr", kv_indptr, device=device, check_values=False)
    device = kv_indptr.device if device is None else device
    _vector("kv_indices", kv_indices, None, device)
    _vector("kv_len", kv_len, kv_indptr.shape[0] - 1, device)
    return PageTable(kv_len, kv_indices, kv_indptr, page_size)


def _table_names(pages: PageTable) -> tuple[str, str]:
    return ("seq_lens", "block_table") if pages.page_indptr is None else ("kv_len", "kv_indices")


def check_values(pages: PageTable, num_pages: Optional[int], qo_indptr, total_q: Optional[int],
                 max_q_len: Optional[int], cache=None) -> tuple[np.ndarray, np.ndarray]:
    """The value rules (module doc), from one host read of the cached-token counts, the CSR page
    indptr, ``qo_indptr``, the fp8 scale of ``cache`` (a container or ``PagedCache``, or None) and
    the page entries the requests use: a table of at most ``HOST_TABLE_BYTES`` itself, a larger one
    as its smallest and largest used entry (two values reduced on the device, so the read does not
    grow with the table). num_pages: the pool's pages (None: page entries are
    not checked, the pool being unknown yet). Returns ``(kv_lens (batch,), qo_ptr (batch+1,))``
    int64 host arrays."""
    lens_name, table_name = _table_names(pages)
    rows = cache.rows if isinstance(cache, PagedCache) else cache
    block = pages.page_indptr is None
    tensors = [pages.seq_lens] + ([] if block else [pages.page_indptr])
    if qo_indptr is not None:
        tensors.append(qo_indptr)
    fp8 = isinstance(rows, Fp8Cache)
    if fp8:
        tensors.append(rows.scale)
    whole = num_pages is not None and pages.table.numel() * pages.table.element_size() <= HOST_TABLE_BYTES
    if num_pages is not None:
        tensors.append(pages.table if whole else _used_entry_range(pages))
    host = validate._host_values(tensors)
    kv_lens, P = host[0], pages.page_size
    batch = kv_lens.shape[0]
    if block:
        starts = np.zeros(batch, np.int64)
        capacity = np.full(batch, pages.table.shape[1], np.int64)
        next_host = 1
    else:
        page_ptr = validate._check_indptr_values("kv_indptr", host[1], max_last=pages.table.shape[0])
        starts, capacity = page_ptr[:-1], page_ptr[1:] - page_ptr[:-1]
        next_host = 2
    if (kv_lens < 0).any():
        b = int(np.argmax(kv_lens < 0))
        raise ValueError(f"{lens_name}[{b}] = {kv_lens[b]} is negative (cached tokens per request)")
    over = kv_lens > capacity * P
    if over.any():
        b = int(np.argmax(over))
        where = f"row {b} of {table_name}" if block else f"kv_indptr[{b}]..kv_indptr[{b + 1}]"
        raise ValueError(f"{lens_name}[{b}] = {kv_lens[b]} is beyond the table's capacity: {where} holds "
                         f"{capacity[b]} pages of {P} tokens ({capacity[b] * P} tokens)")
    if num_pages is not None:
        table = host[-1] if whole else None
        if not whole:
            lowest, highest = host[-1]
            if lowest < 0 or highest >= num_pages:
                # The error path alone reads a large table, to name the first bad entry.
                table = validate._host_values([pages.table])[0]
        if table is not None:
            _check_entries(table_name, table.reshape(pages.table.shape), starts, -(-kv_lens // P), num_pages, block)
    if qo_indptr is not None:
        qo_ptr = validate._check_indptr_values("qo_indptr", host[next_host], last=total_q, max_len=max_q_len)
    else:
        qo_ptr = np.arange(batch + 1, dtype=np.int64)
        if total_q is not None and total_q != batch:
            raise ValueError(f"qo_indptr is None, which means one query row per request (batch = {batch}), but q "
                             f"has total_q = {total_q} rows; pass qo_indptr")
    if fp8:
        value = float(host[-2 if num_pages is not None else -1][0])
        if not math.isfinite(value) or value <= 0.0:
            raise ValueError(f"cache: fp8 scale must be finite and > 0, got {value!r}")
    return kv_lens, qo_ptr


def _used_entry_range(pages: PageTable) -> torch.Tensor:
    """``[smallest, largest]`` (2,) of the page entries the requests use (the first
    ``ceil(seq_lens[b] / page_size)`` of each; an unused entry counts as 0, so ``[0, 0]`` when
    none is used), on the table's device, in a few tensor operations and no sync: on a GPU's host
    each operation costs several us, so the positions come from a cached range, unused entries are
    zeroed in place of a ``where`` (which would make a scalar tensor too), and the two extremes are
    written into a buffer of this thread instead of being stacked (``_Extremes``: read on the host
    before this thread calls again). Any table values are safe here (every index is clamped):
    whether the lengths and the CSR indptr were valid is decided on the host afterwards, and the
    range means something only when they were."""
    table, lens, P = pages.table, pages.seq_lens, pages.page_size
    if table.numel() == 0:
        return torch.zeros(2, dtype=table.dtype, device=table.device)
    if pages.page_indptr is None:
        first_token = _positions(table.device, table.shape[1], P)
        unused = first_token >= lens.unsqueeze(1)
    else:
        ptr = pages.page_indptr.long()
        pos = _positions(table.device, table.shape[0], 1)
        req = torch.searchsorted(ptr[1:], pos, right=True).clamp_(max=lens.shape[0] - 1)
        unused = (pos - ptr[req]) * P >= lens[req]
    extremes, (lowest, highest) = _EXTREMES.of(table.device, table.dtype)
    torch.aminmax(table.masked_fill(unused, 0), out=(lowest, highest))
    return extremes


def _positions(device: torch.device, count: int, step: int) -> torch.Tensor:
    """``[0, step, .., (count - 1) * step]`` int64 on ``device``: the first token of each block-table
    column (step = page size), or each CSR position (step 1). A view of one range per (device,
    step), grown to the next power of two when too short, so that tables whose length changes
    every step (CSR indices) keep one tensor, not one per length. Only ever read."""
    base = _POSITIONS.get((device, step))
    if base is None or base.shape[0] < count:
        if len(_POSITIONS) >= 64:
            _POSITIONS.pop(next(iter(_POSITIONS)), None)
        size = 1 << max(0, count - 1).bit_length()
        base = _POSITIONS[(device, step)] = torch.arange(0, size * step, step, device=device)
    return base[:count]


#: ``_positions``' ranges per (device, step).
_POSITIONS: dict = {}


class _Extremes(threading.local):
    """Per thread, per (device, dtype): a (2,) tensor and its two elements as 0-d views, which
    ``_used_entry_range`` writes its minimum and maximum into. Per thread because the caller
    reads the values before the same thread can call again (one synchronous host read), while
    another thread's call could overwrite a shared buffer before this one's read."""

    buffers: Optional[dict] = None

    def of(self, device: torch.device, dtype: torch.dtype) -> tuple:
        if self.buffers is None:
            self.buffers = {}
        entry = self.buffers.get((device, dtype))
        if entry is None:
            buffer = torch.empty(2, dtype=dtype, device=device)
            entry = self.buffers[(device, dtype)] = (buffer, (buffer[0], buffer[1]))
        return entry


_EXTREMES = _Extremes()


def _check_entries(name: str, table: np.ndarray, starts: np.ndarray, used: np.ndarray, num_pages: int,
                   block: bool) -> None:
    """Every page entry a request reads (its first ``used[b]``, from ``starts[b]`` for CSR) lies in
    ``[0, num_pages)``: the first one that does not is a ValueError. Vectorized: it runs on every
    one-call decode of a small table."""
    if block:
        cols = np.arange(table.shape[1])[None, :]
        bad = (cols < used[:, None]) & ((table < 0) | (table >= num_pages))
        if bad.any():
            b, j = (int(i) for i in np.argwhere(bad)[0])
            raise ValueError(f"{name}[{b}, {j}] = {table[b, j]} is not a page of the cache: expected 0 <= entry < "
                             f"num_pages = {num_pages} (request {b} reads its first {used[b]} entries)")
        return
    if not used.shape[0]:
        return
    # Position i of the indices is read by request req[i] (the last whose pages start at or before
    # it; starts[0] is 0, so every position has one) when it is among that request's first
    # used[req] entries.
    pos = np.arange(table.shape[0])
    req = np.searchsorted(starts, pos, side="right") - 1
    read = pos - starts[req] < used[req]
    bad = read & ((table < 0) | (table >= num_pages))
    if bad.any():
        i = int(np.argmax(bad))
        raise ValueError(f"{name}[{i}] = {table[i]} is not a page of the cache: expected 0 <= entry < "
                         f"num_pages = {num_pages}")


def check_cache(cache, page_size: Optional[int], device) -> PagedCache:
    """The pool as a ``PagedCache`` on ``device`` with ``page_size`` tokens per page (when given);
    errors name ``cache``."""
    try:
        paged = as_paged_cache(cache, page_size)
    except (TypeError, ValueError) as err:
        raise type(err)(f"cache: {err}") from err
    if device is not None and not validate._same_device(paged.device, device):
        raise ValueError(f"cache is on {paged.device} but q is on {device}; all tensors must share one device")
    return paged


def check_decode_inputs(q, cache, pages: PageTable, qo_indptr=None, sm_scale=None, out=None,
                        check_values_: bool = True) -> PagedInputs:
    """All checks of a one-call paged decode (``mla_decode_paged``, ``mla_decode_paged_csr``):
    q (total_q, H, 576) bf16; the pool (its page size must be ``pages.page_size``); the page
    table's structure (already made by ``block_table_pages`` / ``csr_pages``) on q's device;
    qo_indptr (batch+1,) or None; sm_scale; out. With ``check_values_`` the values too."""
    q = validate.check_q(q)
    paged = check_cache(cache, pages.page_size, q.device)
    return checked_decode_inputs(q, paged, pages, qo_indptr, sm_scale, out, check_values_)


def checked_decode_inputs(q: torch.Tensor, paged: PagedCache, pages: PageTable, qo_indptr=None, sm_scale=None,
                          out=None, check_values_: bool = True) -> PagedInputs:
    """``check_decode_inputs`` for a caller that has checked q (``validate.check_q``) and made the
    pool a ``PagedCache`` on q's device with ``pages.page_size`` tokens per page (``check_cache``)
    already: the rest of its rules, without repeating those two."""
    device = q.device
    if paged.page_size != pages.page_size:
        raise ValueError(f"page_size is {pages.page_size} but the cache's pages hold {paged.page_size} tokens")
    scale = validate.check_sm_scale(sm_scale)
    for name, t in zip(("seq_lens" if pages.page_indptr is None else "kv_len", "page table"),
                       (pages.seq_lens, pages.table)):
        if not validate._same_device(t.device, device):
            raise ValueError(f"{name} is on {t.device} but q is on {device}; all tensors must share one device")
    batch = pages.seq_lens.shape[0]
    if qo_indptr is not None:
        validate.check_indptr("qo_indptr", qo_indptr, device=device, batch=batch, check_values=False)
    elif q.shape[0] != batch:
        raise ValueError(f"qo_indptr is None, which means one query row per request (batch = {batch}), but q has "
                         f"total_q = {q.shape[0]} rows; pass qo_indptr")
    if out is not None:
        validate.check_out(out, q.shape[0], q.shape[1], device, inputs=[q, *validate._cache_tensors(paged.rows)])
    kv_lens = qo_ptr = None
    if check_values_:
        kv_lens, qo_ptr = check_values(pages, paged.num_pages, qo_indptr, q.shape[0], None, paged)
    return PagedInputs(paged, pages, q.shape[1], q.shape[0], scale, kv_lens, qo_ptr)


def check_run_inputs(plan, q, cache, out=None) -> PagedCache:
    """Structural checks of ``PagedDecodePlan.run`` (metadata only, no sync): q (total_q, H, 576)
    bf16 on the plan's device with its H and total_q; the pool in the plan's format with its page
    size; out. Returns the pool as a ``PagedCache``."""
    q = validate.check_q(q, num_heads_supported=None)
    if not validate._same_device(q.device, plan.device):
        raise ValueError(f"q is on {q.device} but the plan was made for {plan.device}")
    if q.shape[1] != plan.num_heads:
        raise ValueError(f"q has {q.shape[1]} heads (shape {tuple(q.shape)}) but the plan was made for "
                         f"num_heads = {plan.num_heads}")
    if q.shape[0] != plan.total_q:
        raise ValueError(f"q must have total_q = {plan.total_q} rows (the plan's qo_indptr[-1]), got shape "
                         f"{tuple(q.shape)}")
    paged = check_cache(cache, plan.page_size, q.device)
    if paged.format != plan.fmt:
        raise ValueError(f"cache: the plan was made for format {plan.fmt!r}, got a {paged.format!r} cache")
    if out is not None:
        validate.check_out(out, plan.total_q, plan.num_heads, q.device,
                           inputs=[q, *validate._cache_tensors(paged.rows)])
    return paged
