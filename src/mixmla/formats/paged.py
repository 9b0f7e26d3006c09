"""Paged caches: a pool of fixed-size pages, page-major, one row per token (docs/SPEC.md §4).

A serving engine keeps every request's tokens in pages of ``P`` tokens from one pool and tells
the kernel which pages a request owns (a page table). The pool is a tensor ``(pages, P, width)``
(bf16 also ``(pages, P, 1, 576)``); :class:`PagedCache` reads it as the ``pages * P`` rows of a
cache container (``Bf16Cache``/``Fp8Cache``/``Mxfp4Cache``, no copy), so token row ``r`` of page
``p`` is row ``p * P + r``, which is also the slot a cache writer addresses.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass

import torch

from .cache import FP8_DTYPES, HEAD_DIM, MX_PACKED_DIM, MX_SCALES_PER_ROW, Bf16Cache, Fp8Cache, KVCache, Mxfp4Cache

#: Tokens per page: any positive count; vLLM uses 16-128, FlashMLA 64, SGLang 1.
MAX_PAGE_SIZE = 1 << 16


@dataclass(frozen=True)
class PagedCache:
    """A paged pool: ``rows``, a cache container over its ``num_pages * page_size`` token rows, and
    ``page_size`` (tokens per page, >= 1). Made by :func:`as_paged_cache` from the page-major
    tensors an engine holds, or from a container of rows and a page size."""

    rows: KVCache
    page_size: int

    def __post_init__(self):
        if not isinstance(self.rows, (Bf16Cache, Fp8Cache, Mxfp4Cache)):
            raise TypeError(f"PagedCache.rows must be a Bf16Cache, Fp8Cache or Mxfp4Cache, got "
                            f"{type(self.rows).__name__}")
        check_page_size(self.page_size)
        if self.rows.num_tokens < self.page_size:
            raise ValueError(f"a paged cache needs at least one page of {self.page_size} rows, got "
                             f"{self.rows.num_tokens}")

    @property
    def num_pages(self) -> int:
        """Pages in the pool (rows past the last whole page are not addressed)."""
        return self.rows.num_tokens // self.page_size

    @property
    def num_slots(self) -> int:
        """Token slots, ``num_pages * page_size``: a slot is ``page * page_size + row``."""
        return self.num_pages * self.page_size

    @property
    def format(self) -> str:
        return self.rows.format

    @property
    def device(self) -> torch.device:
        return self.rows.device


def check_page_size(page_size, name: str = "page_size") -> int:
    """``page_size`` must be an int in [1, MAX_PAGE_SIZE]; returns it."""
    if isinstance(page_size, bool) or not isinstance(page_size, numbers.Integral):
        raise TypeError(f"{name} must be an int (tokens per page), got {type(page_size).__name__} {page_size!r}")
    if not 1 <= int(page_size) <= MAX_PAGE_SIZE:
        raise ValueError(f"{name} must be in [1, {MAX_PAGE_SIZE}] tokens per page, got {int(page_size)}")
    return int(page_size)


def _page_rows(name: str, t, min_width: int, exact: bool = True) -> tuple[torch.Tensor, int]:
    """``(rows, page_size)``: a page-major tensor ``(pages, P, W)`` or ``(pages, P, 1, W)`` read as
    its ``pages * P`` rows ``(pages * P, W)`` without copying. W == min_width (``exact``) or >= it.
    The pages must be evenly spaced rows (page stride == P * row stride), which every pool that
    engines allocate is; the row stride is taken as given."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dim() == 4:
        if t.shape[2] != 1:
            raise ValueError(f"{name} must have one KV head: expected (pages, P, 1, {min_width}), got {tuple(t.shape)}")
        t = t[:, :, 0, :]
    width_ok = t.dim() == 3 and (t.shape[2] == min_width if exact else t.shape[2] >= min_width)
    if not width_ok:
        want = f"{min_width}" if exact else f">={min_width}"
        raise ValueError(f"{name} must be page-major (pages, P, {want}) or (pages, P, 1, {want}), got "
                         f"{tuple(t.shape)}")
    pages, page_size = t.shape[0], t.shape[1]
    if pages > 1 and page_size > 1 and t.stride(0) != page_size * t.stride(1):
        raise ValueError(f"{name}: pages must follow each other as rows (stride(0) == P * stride(1)), got shape "
                         f"{tuple(t.shape)} with strides {t.stride()}")
    rows = t.as_strided((pages * page_size, t.shape[2]), (t.stride(1) if page_size > 1 else t.stride(0), t.stride(2)))
    return rows, page_size


def as_paged_cache(kv, page_size: int | None = None) -> PagedCache:
    """Wrap a paged pool into a :class:`PagedCache` (no copy).

    kv: a ``PagedCache``; a bf16 tensor ``(pages, P, 576)`` or ``(pages, P, 1, 576)``; ``(fp8
    tensor of that shape, scale)`` (one float32 value); ``(MXFP4 bytes (pages, P, 288), E8M0 scales
    (pages, P, >=18))`` (uint8 or ``float4_e2m1fn_x2`` / ``float8_e8m0fnu`` views; scales also as
    rows ``(>= pages * P, >=18)``; their row stride is taken as given); or a cache container of
    rows with ``page_size`` given. page_size: when given, the page size the caller expects; a pool
    of another one is a ValueError. TypeError/ValueError name what is wrong.
    """
    if page_size is not None:
        page_size = check_page_size(page_size)
    if isinstance(kv, PagedCache):
        paged = kv
    elif isinstance(kv, (Bf16Cache, Fp8Cache, Mxfp4Cache)):
        if page_size is None:
            raise ValueError("a cache container of rows needs page_size to be read as pages: pass page_size, or "
                             "the page-major tensors (pages, P, width)")
        paged = PagedCache(kv, page_size)
    else:
        paged = PagedCache(*_rows_of(kv))
    if page_size is not None and paged.page_size != page_size:
        raise ValueError(f"page_size is {page_size} but the cache's pages hold {paged.page_size} tokens "
                         f"(shape (pages, P, ...) with P = {paged.page_size})")
    return paged


def _rows_of(kv) -> tuple[KVCache, int]:
    if isinstance(kv, torch.Tensor):
        if kv.dtype in FP8_DTYPES:
            raise TypeError("a paged fp8 cache needs its scale: pass (data, scale)")
        rows, page_size = _page_rows("bf16 cache", kv, HEAD_DIM)
        return Bf16Cache(rows), page_size
    if isinstance(kv, (tuple, list)) and len(kv) == 2:
        data, extra = kv
        if isinstance(data, torch.Tensor) and data.dtype in FP8_DTYPES:
            rows, page_size = _page_rows("fp8 cache", data, HEAD_DIM)
            return Fp8Cache(rows, extra), page_size
        rows, page_size = _page_rows("mxfp4 cache", data, MX_PACKED_DIM)
        scales = extra
        if isinstance(scales, torch.Tensor) and scales.dim() >= 3:
            scales, scale_page = _page_rows("mxfp4 scales", scales, MX_SCALES_PER_ROW, exact=False)
            if scale_page != page_size:
                raise ValueError(f"mxfp4 scales have pages of {scale_page} rows but the codes have {page_size}")
        return Mxfp4Cache(rows, scales), page_size
    raise TypeError("cache must be a PagedCache, a bf16 tensor (pages, P, 576), (fp8 tensor, scale) or "
                    f"(fp4 bytes (pages, P, 288), e8m0 scales (pages, P, >=18)); got {type(kv).__name__}")


def empty_paged_cache(num_pages: int, page_size: int, fmt: str, device=None, scale=None) -> PagedCache:
    """A zeroed pool of ``num_pages`` pages of ``page_size`` tokens in ``fmt`` ('bf16', 'fp8':
    e4m3fn with the float32 ``scale`` (> 0; a float or a one-element tensor), 'mxfp4': codes and
    E8M0 scales ``(num_pages, page_size, 18)``), on ``device``; fill it with ``mixmla.append_kv``.
    Zero rows decode to zeros in every format."""
    page_size = check_page_size(page_size)
    if isinstance(num_pages, bool) or not isinstance(num_pages, numbers.Integral) or num_pages < 1:
        raise ValueError(f"num_pages must be an int >= 1, got {num_pages!r}")
    shape = (int(num_pages), page_size)
    if fmt == "bf16":
        return as_paged_cache(torch.zeros(*shape, HEAD_DIM, dtype=torch.bfloat16, device=device))
    if fmt == "fp8":
        if scale is None:
            raise ValueError("an fp8 pool needs its scale (the per-tensor float32 scale new tokens are quantized with)")
        if not isinstance(scale, torch.Tensor):
            scale = torch.tensor([float(scale)], dtype=torch.float32, device=device)
        return as_paged_cache((torch.zeros(*shape, HEAD_DIM, dtype=torch.float8_e4m3fn, device=device), scale))
    if fmt == "mxfp4":
        return as_paged_cache((torch.zeros(*shape, MX_PACKED_DIM, dtype=torch.uint8, device=device),
                               torch.zeros(*shape, MX_SCALES_PER_ROW, dtype=torch.uint8, device=device)))
    raise ValueError(f"fmt must be one of ('bf16', 'fp8', 'mxfp4'), got {fmt!r}")


__all__ = ["PagedCache", "as_paged_cache", "empty_paged_cache", "check_page_size", "MAX_PAGE_SIZE"]
