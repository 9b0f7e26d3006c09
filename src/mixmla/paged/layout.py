"""Batches in pages: which pool rows hold a request's tokens (``token_rows``), a contiguous cache
laid out in randomly shuffled pages (``scatter_to_pages``, for tests and benchmarks), and the
gather back to contiguous rows that the paged reference uses (``gather_rows``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ..formats import Bf16Cache, Fp8Cache, KVCache, Mxfp4Cache, as_cache
from ..formats.paged import PagedCache, check_page_size
from ..kernels.backend import PageTable


def token_rows(pages: PageTable) -> tuple[np.ndarray, np.ndarray]:
    """``(rows, kv_indptr)``: the pool rows (int64) of every request's tokens in order, and the
    (batch+1,) prefix sums of the requests' token counts, read on the host from ``pages`` (whose
    values must be valid: ``mixmla.paged.validate``)."""
    lens = pages.seq_lens.cpu().numpy().astype(np.int64)
    table = pages.table.cpu().numpy().astype(np.int64)
    csr = pages.page_indptr is not None
    starts = pages.page_indptr.cpu().numpy().astype(np.int64)[:-1] if csr else None
    P = pages.page_size
    rows = []
    for b, n in enumerate(lens):
        t = np.arange(n)
        entries = table[starts[b] + t // P] if csr else table[b, t // P]
        rows.append(entries * P + t % P)
    kv_indptr = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
    return (np.concatenate(rows) if rows else np.zeros(0, np.int64)), kv_indptr


def gather_rows(cache: KVCache, rows: torch.Tensor) -> KVCache:
    """A new contiguous container holding rows ``rows`` (int64 (n,)) of ``cache``, same format and
    bits (fp8: same scale)."""
    if isinstance(cache, Bf16Cache):
        return Bf16Cache(cache.data[rows])
    if isinstance(cache, Fp8Cache):
        return Fp8Cache(cache.data[rows], cache.scale)
    return Mxfp4Cache(cache.data[rows], cache.scales[rows])


@dataclass(frozen=True)
class PagedBatch:
    """A batch laid out in pages, in both table forms, all on the pool's device.

    cache: the pool (``PagedCache``). block_table (batch, max_pages) int32, entries past a
    request's pages -1; seq_lens (batch,) int32. kv_indptr (batch+1,) int32 over pages,
    kv_indices (pages used,) int32, kv_len = seq_lens: the CSR form of the same table.
    """

    cache: PagedCache
    block_table: torch.Tensor
    seq_lens: torch.Tensor
    kv_indptr: torch.Tensor
    kv_indices: torch.Tensor

    @property
    def block_pages(self) -> PageTable:
        return PageTable(self.seq_lens, self.block_table, None, self.cache.page_size)

    @property
    def csr_pages(self) -> PageTable:
        return PageTable(self.seq_lens, self.kv_indices, self.kv_indptr, self.cache.page_size)


def _poisoned_pool(like: KVCache, num_rows: int) -> KVCache:
    """A pool of ``num_rows`` rows of ``like``'s format whose every value decodes to NaN, so that a
    kernel reading a row no request owns fails a check instead of passing on a lucky value."""
    if isinstance(like, Bf16Cache):
        return Bf16Cache(torch.full((num_rows, like.data.shape[1]), float("nan"), dtype=torch.bfloat16,
                                    device=like.device))
    if isinstance(like, Fp8Cache):
        nan_bits = 0x80 if like.is_fnuz else 0x7F
        nan = torch.full((num_rows, like.data.shape[1]), nan_bits, dtype=torch.uint8, device=like.device)
        return Fp8Cache(nan.view(like.data.dtype), like.scale)
    codes = torch.zeros(num_rows, like.data.shape[1], dtype=torch.uint8, device=like.device)
    return Mxfp4Cache(codes, torch.full((num_rows, like.scales.shape[1]), 255, dtype=torch.uint8, device=like.device))


def scatter_to_pages(cache, kv_indptr, page_size: int, generator: torch.Generator | None = None,
                     spare_pages: int = 0) -> PagedBatch:
    """Lay a contiguous batch out in a pool of pages in random order.

    cache: a contiguous cache (any format, container or benchmark form); kv_indptr: (batch+1,)
    prefix sums of its rows per request. page_size: tokens per page. generator: the CPU generator
    of the page order (default: torch's global one). spare_pages: pages that no request owns, mixed
    in. Every value in a row no request owns (spare pages, the tail of a request's last page)
    decodes to NaN. Returns a ``PagedBatch`` on the cache's device.
    """
    src = as_cache(cache)
    P = check_page_size(page_size)
    ptr = kv_indptr.cpu().numpy().astype(np.int64)
    lens = ptr[1:] - ptr[:-1]
    n_pages = -(-lens // P)
    num_pages = max(1, int(n_pages.sum()) + int(spare_pages))
    order = torch.randperm(num_pages, generator=generator).numpy().astype(np.int64)
    page_ptr = np.concatenate([[0], np.cumsum(n_pages)]).astype(np.int64)
    kv_indices = order[:page_ptr[-1]]
    block_table = np.full((lens.shape[0], max(1, int(n_pages.max(initial=1)))), -1, np.int64)
    dest, source = [], []
    for b, n in enumerate(lens):
        own = kv_indices[page_ptr[b]:page_ptr[b + 1]]
        block_table[b, :own.shape[0]] = own
        t = np.arange(n)
        dest.append(own[t // P] * P + t % P)
        source.append(ptr[b] + t)
    pool = _poisoned_pool(src, num_pages * P)
    if lens.sum():
        d = torch.from_numpy(np.concatenate(dest)).to(src.device)
        s = torch.from_numpy(np.concatenate(source)).to(src.device)
        pool.data[d] = src.data[s]
        if isinstance(src, Mxfp4Cache):
            pool.scales[d] = src.scales[s]
    device = src.device

    def i32(a):
        return torch.from_numpy(np.ascontiguousarray(a).astype(np.int32)).to(device)

    return PagedBatch(PagedCache(pool, P), i32(block_table), i32(lens), i32(page_ptr), i32(kv_indices))


__all__ = ["token_rows", "gather_rows", "PagedBatch", "scatter_to_pages"]
