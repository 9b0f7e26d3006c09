"""Where a request's cached tokens are: contiguous rows of the cache, or rows of its pages.

The decode kernel asks two things, whatever the layout (``PAGE_SIZE`` constexpr; docs/SPEC.md §4):
``request_tokens`` gives a request's first row (contiguous) or first page-table entry (paged) and
its cached-token count, ``tile_pages`` the page-table entry of a tile of its token positions and
``token_rows`` the cache rows of that tile. A page-major cache ``(pages, P, width)`` is read as
its ``pages * P`` rows, so token ``t`` of a request is row ``page * P + t % P`` with ``page`` its
page-table entry ``t // P``.

PAGE_SIZE = 0: contiguous, ``kv_indptr`` (batch+1,) prefix sums of rows. PAGE_SIZE = P > 0:
``kv_indptr`` holds the cached-token counts (batch,) instead; the page table is a block table
(``CSR`` False: ``pages`` (batch, max_pages) with row stride ``page_stride``, ``max_pages`` entries
a row) or CSR (``CSR`` True: ``pages`` the page indices, ``page_indptr`` (batch+1,) prefix sums
over them). Every bound comes from these tensors on the device: a count beyond the request's pages
is cut to them, and a page entry outside ``[0, num_pages)`` reads nothing, so no value a caller
writes into the tables makes the kernel read outside the cache.
"""

import triton
import triton.language as tl


@triton.jit
def request_tokens(req, kv_indptr, pages, page_stride, page_indptr, max_pages, PAGE_SIZE: tl.constexpr,
                   CSR: tl.constexpr):
    """``(first, kv_len)`` of request ``req``: its first cache row (contiguous) or the offset of its
    first page-table entry in ``pages`` (paged), int64; its cached tokens, int32."""
    if PAGE_SIZE == 0:
        first = tl.load(kv_indptr + req).to(tl.int64)
        kv_len = (tl.load(kv_indptr + req + 1) - first).to(tl.int32)
    else:
        if CSR:
            first = tl.load(page_indptr + req).to(tl.int64)
            num_pages = (tl.load(page_indptr + req + 1) - first).to(tl.int32)
        else:
            first = req.to(tl.int64) * page_stride
            num_pages = max_pages
        kv_len = tl.minimum(tl.load(kv_indptr + req).to(tl.int32), num_pages * PAGE_SIZE)
        kv_len = tl.maximum(kv_len, 0)
    return first, kv_len


def loop_stages(page_size: int, block_t: int, num_stages: int, programs: int, num_sms: int):
    """``LOOP_STAGES`` of the decode kernel: the token loop's pipeline stages for pages of
    ``page_size`` tokens (0: contiguous) and tiles of ``block_t``, or None to take the launch's
    ``num_stages``.

    Pages smaller than a tile are gathered: the row loads depend on a page-table load in the same
    step. Triton's pipeliner (3.6) then gives each level of loads ``(stages - 1) // 2`` stages of
    latency, the table load its own copy into shared memory; at the launch's stages the rows would
    be left fewer buffers than in the contiguous kernel (3 stages: one, so each tile's load waits
    for the work on the previous one). ``2 * num_stages - 1`` stages give the rows the contiguous
    kernel's ``num_stages - 1``. Tiles of 128 tokens are left alone: there the pipeliner does not
    take the table load, so the rows already get the launch's stages, and more would not fit.

    Only a grid of at most one program per SM (``programs <= num_sms``) takes the deeper loop: its
    buffers nearly double the program's shared memory, so where two programs would share an SM
    they could no longer, and on the H200 losing that overlap cost more than the stages gained."""
    deeper = page_size % block_t and block_t <= 64 and programs <= num_sms
    return 2 * num_stages - 1 if deeper else None


@triton.jit
def tile_pages(first, t0, t_end, pages, PAGE_SIZE: tl.constexpr, BLOCK_T: tl.constexpr):
    """The page-table entry (int64 scalar: a wide entry must not wrap into the pool) of the tile of token positions ``t0 .. t0 + BLOCK_T``
    (t0 a multiple of BLOCK_T) when pages hold whole tiles, for ``token_rows``; none (0) when the
    tile starts at or past ``t_end``, when contiguous, and when pages are smaller than a tile
    (``token_rows`` gathers their entries with the rows; see ``loop_stages``).

    The decode loop reads the next tile's entry while it works on this one, so the row loads never
    wait on the table load of the same step."""
    if PAGE_SIZE == 0 or PAGE_SIZE % BLOCK_T != 0:
        return tl.zeros((), tl.int64)
    else:
        return tl.load(pages + first + t0 // PAGE_SIZE, mask=t0 < t_end, other=0).to(tl.int64)


@triton.jit
def token_rows(first, t0, tok_ok, page, pages, num_pages, PAGE_SIZE: tl.constexpr, BLOCK_T: tl.constexpr):
    """``(rows, ok)``: the cache rows (T,) int64 of the tile of token positions ``t0 ..
    t0 + BLOCK_T`` (t0 a multiple of BLOCK_T) of a request whose ``request_tokens`` gave ``first``,
    and ``tok_ok`` (T,) narrowed to the tokens whose page entry lies in ``[0, num_pages)`` (paged;
    contiguous: unchanged). ``page``: the tile's ``tile_pages``.

    Pages of at least a tile (a multiple of BLOCK_T) hold a whole tile: one page entry is read and
    the rows are consecutive, as in the contiguous layout, which keeps the contiguous kernel's
    address arithmetic and registers. Smaller pages are gathered token by token."""
    pos = t0 + tl.arange(0, BLOCK_T)
    if PAGE_SIZE == 0:
        return first + pos, tok_ok
    elif PAGE_SIZE % BLOCK_T == 0:
        ok = tok_ok & (page >= 0) & (page < num_pages)
        return page * PAGE_SIZE + (t0 % PAGE_SIZE) + tl.arange(0, BLOCK_T), ok
    else:
        entry = tl.load(pages + first + pos // PAGE_SIZE, mask=tok_ok, other=0).to(tl.int64)
        ok = tok_ok & (entry >= 0) & (entry < num_pages)
        return entry * PAGE_SIZE + pos % PAGE_SIZE, ok
