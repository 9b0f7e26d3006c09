"""Where a request's cached tokens are, for the Hopper kernel: contiguous rows or rows of pages.

The same rules as the Triton path's ``kernels/triton/paging.py`` (docs/SPEC.md §4), with the page
table read ahead of the rows it points at, so that the two dependent loads never meet in one
tile's critical path. ``PAGED`` (constexpr): 0 contiguous (``kv_indptr`` (batch+1,)
prefix sums of cache rows); 1 a block table (``kv_indptr`` holds the cached-token counts (batch,),
``pages`` (batch, max_pages) int32 with row stride ``page_stride``); 2 CSR (counts as for 1,
``pages`` the page indices, ``page_indptr`` (batch+1,) prefix sums over them). Pages hold
``1 << page_shift`` tokens. A count beyond the request's pages is cut to them and a page entry
outside ``[0, num_pages)`` reads nothing, so no value in the tables makes the kernel read outside
the cache.
"""

from triton.experimental import gluon
from triton.runtime.jit import constexpr_function
from triton.experimental.gluon import language as gl

from .layouts import TILE, chunk_word_layout

PAGED_NONE = gl.constexpr(0)
PAGED_BLOCK_TABLE = gl.constexpr(1)
PAGED_CSR = gl.constexpr(2)


@gluon.jit
def request_lengths(bi, live_b, kv_indptr, page_indptr, max_pages, page_shift, PAGED: gl.constexpr):
    """Cached tokens of requests ``bi`` (a vector of request indices; 0 where not ``live_b``),
    as ``request_tokens`` gives them one at a time."""
    if PAGED == PAGED_NONE:
        return gl.load(kv_indptr + bi + 1, mask=live_b, other=0) - gl.load(kv_indptr + bi, mask=live_b, other=0)
    else:
        if PAGED == PAGED_CSR:
            cap = gl.load(page_indptr + bi + 1, mask=live_b, other=0) - gl.load(page_indptr + bi, mask=live_b, other=0)
        else:
            cap = gl.full(bi.shape, 0, gl.int32, bi.type.layout) + max_pages
        return gl.minimum(gl.maximum(gl.load(kv_indptr + bi, mask=live_b, other=0), 0), cap << page_shift)


@gluon.jit
def request_tokens(b, kv_indptr, page_indptr, page_stride, max_pages, page_shift, PAGED: gl.constexpr):
    """``(first, kv_len)`` of request ``b``: its first cache row (contiguous, int32) or the offset
    of its first entry in the page table (paged, int64); its cached tokens, int32."""
    if PAGED == PAGED_NONE:
        first = gl.load(kv_indptr + b)
        return first, gl.load(kv_indptr + b + 1) - first
    else:
        if PAGED == PAGED_CSR:
            first = gl.load(page_indptr + b)
            cap = gl.load(page_indptr + b + 1) - first
            first = first.to(gl.int64)
        else:
            first = b.to(gl.int64) * page_stride
            cap = max_pages
        return first, gl.minimum(gl.maximum(gl.load(kv_indptr + b), 0), cap << page_shift)


@constexpr_function
def chunk_rows(words_per_thread):
    """The layout of a tile's rows (TILE,) in ``chunk_word_layout(words_per_thread)``."""
    return gl.SliceLayout(1, chunk_word_layout(words_per_thread))


@gluon.jit
def _positions(ROW_L: gl.constexpr, kv_len, t, live):
    pos = t * TILE + gl.arange(0, TILE, layout=ROW_L)
    return pos, (pos < kv_len) & live


@gluon.jit
def tile_pages(ROW_L: gl.constexpr, pages, first, kv_len, t, live, page_shift, PAGED: gl.constexpr):
    """Page-table entries (TILE,) int32 of tile ``t``'s token positions (-1 where no token), in row
    layout ``ROW_L`` (e.g. ``chunk_rows``); a placeholder when contiguous."""
    pos, ok = _positions(ROW_L, kv_len, t, live)
    if PAGED == PAGED_NONE:
        return gl.zeros_like(pos)
    else:
        return gl.load(pages + first + (pos >> page_shift), mask=ok, other=-1)


@gluon.jit
def tile_rows(ROW_L: gl.constexpr, first, kv_len, t, live, page, num_pages, page_shift, PAGED: gl.constexpr):
    """``(rows, ok)``: the cache rows (TILE,) of tile ``t`` in row layout ``ROW_L`` (``page``: its
    ``tile_pages``) and which of them exist; int64 when contiguous, int32 when paged (the pool's
    rows are counted in int32: ``launch.cache_unsupported`` keeps them below 2**31), for
    ``row_offsets``."""
    pos, ok = _positions(ROW_L, kv_len, t, live)
    if PAGED == PAGED_NONE:
        return (first + pos).to(gl.int64), ok
    else:
        # One unsigned compare covers both ends: a negative entry reads as a huge page.
        ok = ok & (page.to(gl.uint32, bitcast=True) < num_pages.to(gl.uint32, bitcast=True))
        return (page << page_shift) | (pos & ((1 << page_shift) - 1)), ok


@gluon.jit
def row_offsets(rows, stride, PAGED: gl.constexpr):
    """int64 offsets ``rows * stride`` of ``tile_rows``'s rows for an int32 row stride."""
    if PAGED == PAGED_NONE:
        return rows * stride
    else:
        return rows.to(gl.int64) * stride


@gluon.jit
def tile_start(pages, first, t, live, num_pages, page_shift, PAGED: gl.constexpr):
    """The first cache row (int32 scalar) of tile ``t``, for a copy of the tile's TILE rows at once:
    contiguous rows, or pages of at least TILE tokens (``page_shift >= 6``), so that a tile lies in
    one page. Where the tile's page entry is outside ``[0, num_pages)`` (or not ``live``): the pool's
    row count, ``num_pages << page_shift``, from which the copy engine reads zeros, as the row loads
    of ``tile_rows`` read nothing there."""
    if PAGED == PAGED_NONE:
        return first + t * TILE
    else:
        pos = t * TILE
        page = gl.load(pages + first + (pos >> page_shift), mask=live, other=-1)
        ok = page.to(gl.uint32, bitcast=True) < num_pages.to(gl.uint32, bitcast=True)
        return gl.where(ok, (page << page_shift) | (pos & ((1 << page_shift) - 1)), num_pages << page_shift)
