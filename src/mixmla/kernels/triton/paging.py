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

from .configs import MAX_BLOCK_T

#: ``MAX_BLOCK_T`` for the kernels (a global they read must be a constexpr).
SEARCH_TOKENS = tl.constexpr(MAX_BLOCK_T)


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


def windowed_gather(page_size: int, block_t: int, num_stages: int, programs: int, num_sms: int) -> bool:
    """``WINDOW`` of the decode kernel: whether a gathered tile (pages smaller than a tile) reads
    its page entries as one window of consecutive table entries (``token_rows``), or one entry per
    token position, masked at the chunk's end (the gather before PERF step 54). The arguments are
    ``loop_stages``'. The window is taken for gathered pages in tiles of at most 64 tokens, except
    in grids of more programs than SMs whose loop runs at more than two stages.

    Why (PERF step 54, H200): the window was faster wherever it was timed but in the bf16 grids of
    256 direct requests (more programs than SMs, three stages, where ``loop_stages`` keeps the
    launch's stages), where it was slower, though it compiles to fewer registers and instructions
    there too (why is not known); MXFP4's grids of more programs than SMs, at two stages, gained
    from it. The compiled kernels differ, so the launcher's call key holds the flag."""
    if not page_size or page_size % block_t == 0 or block_t > 64:
        return False
    return programs <= num_sms or num_stages <= 2


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


def rows32(page_size: int, rows: int, *row_strides) -> bool:
    """``ROWS32`` of the decode kernel: whether a paged call's gathered rows (pages smaller than a
    tile) may be addressed with 32-bit offsets, i.e. every element offset of the pool's ``rows``
    rows (``rows * stride`` for each of ``row_strides``, in the pointer's elements) is below 2**31.
    Larger pools (and the contiguous layout and whole-tile pages, which keep their own arithmetic)
    take the 64-bit path; the compiled kernel differs, so the launcher's call key holds the flag."""
    return page_size > 0 and all(0 <= rows * max(s, 1) < 1 << 31 for s in row_strides if s is not None)


def wide_table(page_size: int, table_len: int) -> bool:
    """``WIDE_TABLE`` of the decode kernel: whether the page table holds the entries of at least
    the largest tile (``MAX_BLOCK_T`` tokens), so a gathered tile may read its entries as one
    window inside the table."""
    return page_size > 0 and table_len * page_size >= MAX_BLOCK_T


@triton.jit
def _in_pool(entry, num_pages):
    # One unsigned compare in the entry's own width: a negative entry is a large unsigned one, and
    # an int64 entry past 2**31 is not wrapped onto a page of the pool.
    if entry.dtype == tl.int64:
        return entry.to(tl.uint64, bitcast=True) < num_pages.to(tl.uint64)
    else:
        return entry.to(tl.uint32, bitcast=True) < num_pages.to(tl.uint32)


@triton.jit
def gather_fill(first, kv_len, pages, num_pages, table_len, PAGE_SIZE: tl.constexpr, BLOCK_T: tl.constexpr,
                WINDOW: tl.constexpr):
    """``(kv_len, fill)`` for ``token_rows`` of a request whose ``request_tokens`` gave ``(first,
    kv_len)``: ``fill``, the row (int64) of the first of its tokens whose page is in the pool among
    its first ``MAX_BLOCK_T`` tokens, which a windowed tile (WINDOW) reads for its positions outside
    the request; and ``kv_len`` set to 0 when the request is no longer than that and no page of it is
    in the pool (it sees nothing). Pages of a tile or more, contiguous rows and the per-token gather
    (WINDOW False): ``(kv_len, 0)``."""
    if PAGE_SIZE == 0 or PAGE_SIZE % BLOCK_T == 0 or not WINDOW:
        return kv_len, tl.zeros((), tl.int64)
    else:
        # A scalar search that ends at the first entry in the pool, almost always the first one:
        # a vector load of the entries here made the token loop's registers spill.
        SEARCH: tl.constexpr = SEARCH_TOKENS // PAGE_SIZE
        k = 0
        entry = tl.load(pages + tl.maximum(tl.minimum(first, table_len - 1), 0))
        found = _in_pool(entry, num_pages)
        while (not found) & (k + 1 < SEARCH) & ((k + 1) * PAGE_SIZE < kv_len):
            k += 1
            entry = tl.load(pages + tl.maximum(tl.minimum(first + k, table_len - 1), 0))
            found = _in_pool(entry, num_pages)
        fill = tl.where(found, entry.to(tl.int64) * PAGE_SIZE, 0)
        kv_len = tl.where((not found) & (kv_len <= SEARCH_TOKENS), 0, kv_len)
        return kv_len, fill


@triton.jit
def tile_end(t0, t_end, page, num_pages, PAGE_SIZE: tl.constexpr, BLOCK_T: tl.constexpr, NARROW: tl.constexpr):
    """The position bound of the tile at ``t0``: ``t_end``, or with NARROW ``t0`` (no position) when
    pages hold whole tiles and the tile's entry ``page`` (``tile_pages``) is outside the pool. The
    caller's ``pos < tile_end`` is then the tile's whole row mask for ``token_rows`` (give it the
    same NARROW): one scalar select per tile instead of a per-row predicate on the entry, as the
    contiguous kernel's single compare. The kernel narrows in direct grids, where it measured
    faster on the H200 (docs/PERF.md, step 65); split grids keep the per-row predicate."""
    if NARROW and PAGE_SIZE != 0 and PAGE_SIZE % BLOCK_T == 0:
        return tl.where(_in_pool(page, num_pages), t_end, t0)
    else:
        return t_end


@triton.jit
def token_rows(first, kv_len, fill, t0, tok_ok, page, pages, num_pages, table_len, PAGE_SIZE: tl.constexpr,
               BLOCK_T: tl.constexpr, ROWS32: tl.constexpr, WIDE_TABLE: tl.constexpr, WINDOW: tl.constexpr,
               NARROWED: tl.constexpr):
    """``(rows, read, seen, back)`` of the tile of token positions ``t0 .. t0 + BLOCK_T`` (t0 a
    multiple of BLOCK_T, below the request's ``kv_len``) of a request whose ``request_tokens`` gave
    ``first``: the cache rows (T,) to load, which of them to load (``read``), which hold a token
    whose page entry lies in ``[0, num_pages)`` (``seen``, for the scores), and ``back``: element
    ``i`` of the tile holds position ``t0 - back + i``. ``tok_ok`` (T,): the positions below the
    chunk's end; ``page``: the tile's ``tile_pages``; ``fill``: ``gather_fill``'s.

    Contiguous: rows ``first + t0 + i``, ``read`` and ``seen`` are ``tok_ok``, ``back`` 0. Pages of
    at least a tile (a multiple of BLOCK_T) hold a whole tile: one page entry is read and the rows
    are consecutive, as in the contiguous layout, which keeps the contiguous kernel's address
    arithmetic and registers; ``read`` and ``seen`` are ``tok_ok`` narrowed to an entry in the pool
    (NARROWED: the caller's ``tile_end`` already did). Rows are int64 in both.

    Smaller pages are gathered token by token. Without WINDOW (``windowed_gather``) each position
    below the chunk's end reads its own entry, ``read`` and ``seen`` are ``tok_ok`` narrowed to an
    entry in the pool, ``back`` is 0 and rows are int64. With WINDOW the caller masks the scores by
    position (``gathered_visible``), not by ``tok_ok``, and the tile's page entries are read as one
    window of consecutive entries: a pointer and constant offsets, where per-token entry addresses would be
    64-bit registers (16 of them a thread at 4 warps) that made the 16-row bf16 program spill. The
    window ends at the request's last full tile when the tile would pass the request (``back`` > 0:
    its first positions were seen by the previous tile), so that every position it holds is a token
    of the request, and it never leaves the table (``table_len`` entries; WIDE_TABLE: at least
    ``MAX_BLOCK_T`` tokens of them, so a window fits; smaller tables clamp each entry's index).
    Positions outside the request remain in a request shorter than a tile (and in tables whose
    values are wrong); their rows are replaced by ``fill``, a row of the request. ``read`` is
    ``seen``: a mask that depends on the position would be one more (T,) predicate per layout at
    the row loads, which made the program at three stages spill, while a replaced row address
    costs a select. With ROWS32 (``rows32``: the pool's element offsets fit int32) the rows are
    int32, so that their element offsets are 32-bit too."""
    pos = t0 + tl.arange(0, BLOCK_T)
    if PAGE_SIZE == 0:
        return first + pos, tok_ok, tok_ok, 0
    elif PAGE_SIZE % BLOCK_T == 0:
        ok = tok_ok if NARROWED else tok_ok & (page >= 0) & (page < num_pages)
        return page * PAGE_SIZE + (t0 % PAGE_SIZE) + tl.arange(0, BLOCK_T), ok, ok, 0
    elif not WINDOW:
        entry = tl.load(pages + first + pos // PAGE_SIZE, mask=tok_ok, other=0).to(tl.int64)
        ok = tok_ok & (entry >= 0) & (entry < num_pages)
        return entry * PAGE_SIZE + pos % PAGE_SIZE, ok, ok, 0
    else:
        ENTRIES: tl.constexpr = BLOCK_T // PAGE_SIZE
        i = tl.arange(0, BLOCK_T)
        e0 = first + t0 // PAGE_SIZE
        if WIDE_TABLE:
            w = tl.minimum(e0, first + (tl.maximum(kv_len - BLOCK_T, 0) + PAGE_SIZE - 1) // PAGE_SIZE)
            w = tl.maximum(tl.minimum(w, table_len - ENTRIES), 0)
            entry = tl.load(pages + w + i // PAGE_SIZE)
        else:
            w = e0
            entry = tl.load(pages + tl.maximum(tl.minimum(e0 + i // PAGE_SIZE, table_len - 1), 0))
        # Position of element 0, kept in int32 (below -BLOCK_T every element is outside anyway).
        start = tl.maximum(w - first, -ENTRIES).to(tl.int32) * PAGE_SIZE
        inside = (i + start).to(tl.uint32, bitcast=True) < kv_len.to(tl.uint32, bitcast=True)
        seen = _in_pool(entry, num_pages)
        if ROWS32:
            rows = tl.where(inside, entry.to(tl.int32) * PAGE_SIZE + i % PAGE_SIZE, fill.to(tl.int32))
        else:
            rows = tl.where(inside, entry.to(tl.int64) * PAGE_SIZE + i % PAGE_SIZE, fill)
        return rows, seen, seen, t0 - start


@triton.jit
def gathered_visible(seen, t0, back, row_last):
    """Scores of a gathered tile (``token_rows``' ``seen`` (T,) and ``back``) that row r (R,) sees:
    a token whose entry is in the pool, at a position from t0 (earlier ones are the previous tile's)
    to ``row_last[r]`` (the last position the row sees, already cut to the chunk's end). Positions
    are compared relative to the tile, so the position vector is the constant ``arange`` rather than
    a value the pipeline carries."""
    T: tl.constexpr = seen.shape[0]
    i = tl.arange(0, T)[None, :]
    return seen[None, :] & (i >= back) & (i <= (row_last - t0 + back)[:, None])
