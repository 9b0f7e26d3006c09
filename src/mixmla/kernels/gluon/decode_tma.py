"""The Hopper (sm_90a) decode kernel for fp8 caches, contiguous or paged, and contiguous MXFP4
caches: whole tiles staged in shared memory for two warpgroups of one program per SM, the values
read from the staged bytes. It serves fp8; its MXFP4 form is built on request (``compile.staged``),
being slower than ``decode`` so far.

The work split, the tile loop's softmax, and the output and merge of cut requests are those of
``decode`` (same request walk over a persistent cooperative grid, same ``_write_request``). What
differs is where a tile's bytes come from, how the value product gets its operand, and who holds
the query:

- Each program has two warpgroups (``gl.warp_specialize``: the default partition and one worker),
  and each takes one half of every request piece's tiles. A warpgroup streams its tiles through
  two buffers of its own by TMA (fp8: 36 KB, five copies per tile, one per pair of chunks and one
  of chunk 8; MXFP4: 18 KB of codes, three copies, one per four chunks and one of chunk 8),
  completing on the buffer's mbarrier, the next tile's copies issued as the current tile starts.
  Register loads would wait behind the tile's shared-memory traffic in the load/store pipeline;
  an L2 prefetch would slow the copies.
- MXFP4's scale rows have a stride the copy engine cannot take (18 or 24 bytes), so each thread
  loads a few of a tile's scale bytes into registers a tile before they are needed and stores
  them in a (block, token) buffer of the tile's slot at the start of the tile before.
- The scores take the key tile from registers, decoded from the staged words by the format's
  ``decode_chunk`` (``fp8``, ``mxfp4``).
  The value product ``O^T = V^T P^T`` takes V^T from registers too: transposed 8x8 loads of the
  staged bytes (``ldmatrix.trans`` on 16-bit columns) give each thread two rows of 16 bits of
  columns: fp8 two columns, which one byte permute splits into the even and the odd columns
  (``fp8.decode_columns``); MXFP4 four, decoded into four columns (``mxfp4.decode_columns``) and
  scaled by the two rows' block scales. Each is an A operand of 64 columns. No decoded value is
  written to or read from shared memory, which ``decode`` spends 2 KB of shared-memory traffic
  per token on.
- Rows of a tile past its request (the next request's, or its page's unused rows, or the copy's
  zeros past the cache) are zeroed in shared memory after the copy lands (fp8; row copies fill
  them with zeros instead), or get zero scales (MXFP4), so neither product sees them.
- Paged: a tile's page entries are read a tile before its copies are issued, so the copies do
  not wait for them. In pages of at least a tile (``SMALL_PAGES`` False) a tile is one page's
  consecutive rows, and an entry outside the pool points the copy past the pool's rows, where it
  reads zeros. The copy engine cannot gather rows, so smaller pages (``SMALL_PAGES``) fill the
  same buffers by row copies (``cp.async``, 16 bytes each, 18 per thread and tile, eight lanes
  on each row's 128 bytes of a chunk pair: ``row_copy_layout``), completing on the same
  mbarriers; rows past the request or behind an entry outside the pool are filled with zeros.
- The query is staged once per request, by warpgroup 0, for both (warpgroup 1 computes the rows'
  multipliers of ``_stage_query`` from the same rows).
- At the end of a request piece, warpgroup 1 hands its half's maximum, sum and accumulators to
  warpgroup 0 through a shared buffer; warpgroup 0 merges the halves in a fixed order and writes
  the piece. Outputs are bitwise repeatable (not the bits of ``decode``: the halves are summed
  apart).

The warpgroups meet twice per request at named barriers of both (``Q_READY``: the query is
staged and the previous handoff read; ``HANDOFF``: warpgroup 1's half is in the buffer). A
warpgroup's tile count gives each buffer's mbarrier parity. The copies need tensor descriptors
made on the device: 512 bytes of global scratch per program, which the launch passes from the
workspace (``launch.Workspace``).
"""

from triton.experimental import gluon
from triton.runtime.jit import constexpr_function
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import async_copy
from triton.experimental.gluon.language.nvidia.hopper import (fence_async_shared, mbarrier, tma, warpgroup_mma,
                                                               warpgroup_mma_wait)

from ..constants import FMT_FP8, FMT_MXFP4, LOG2E
from . import fp8, mxfp4, paging
from .decode import (_finish, _load_query, _opaque_zero, _piece_tiles, _program_units, _query_multiplier,
                     _request_bounds, _softmax_tile, _stage_query, _write_request)
from .layouts import (CHUNK, NUM_CHUNKS, TILE, VALUE_CHUNKS, chunk_word_layout, key_operand_layout,
                      mxfp4_scale_layout, p_layout, q_layout, score_layout, staged_chunks_layout,
                      staged_columns_layout, staged_rows_layout, to_key_operand)

#: Registers per thread of the worker warpgroup (``setmaxnreg``); the default one takes the rest
#: of the SM's 64 K (one program of 256 threads per SM).
WORKER_REGISTERS = gl.constexpr(240)
SLOTS = gl.constexpr(2)  #: tile buffers per warpgroup: the next tile lands while this one is read
#: First output column of each value accumulator (``_value_products``). fp8: accumulator c holds,
#: in row k, column ``2 * CHUNK * (c // 2) + c % 2 + 2 * k`` (the even or odd columns of chunk pair
#: c // 2); MXFP4: column ``4 * CHUNK * (c // 4) + c % 4 + 4 * k`` (every fourth column of the
#: chunks 4 (c // 4) .. 4 (c // 4) + 3).
PAIR_COLUMNS = gl.constexpr(tuple(2 * CHUNK.value * (c // 2) + c % 2 for c in range(VALUE_CHUNKS.value)))
QUAD_COLUMNS = gl.constexpr(tuple(4 * CHUNK.value * (c // 4) + c % 4 for c in range(VALUE_CHUNKS.value)))
#: Scale blocks of an MXFP4 tile's staged scale bytes (18 used), a power of two.
SCALE_BLOCKS = gl.constexpr(32)
#: Global scratch a program's tensor descriptors take (Triton's ``global_scratch_size``).
SCRATCH_PER_PROGRAM = 512


#: Named barriers (of the 16 an SM has; Triton's own partitions take the lowest) that both
#: warpgroups pass once per request: the query is staged (and the previous handoff read), and
#: warpgroup 1's half is in the handoff buffer.
Q_READY = gl.constexpr("barrier.sync 8, 256; mov.u32 $0, 0;")
HANDOFF = gl.constexpr("barrier.sync 9, 256; mov.u32 $0, 0;")


@gluon.jit
def _both_warpgroups(BARRIER: gl.constexpr):
    """All 256 threads of the program meet at the named barrier of ``BARRIER`` (its PTX): every
    shared-memory access of either warpgroup before it is ordered before every access after it
    (the clobber keeps the compiler from moving memory accesses across it). ``barrier.sync``, not
    ``bar.sync``: that is the ``.aligned`` form, which needs every thread at the same instruction,
    and the warpgroups call it from their own code. A barrier of both rather than an mbarrier that
    one thread arrives at: each side would reach it at the same point anyway, and every thread's
    accesses are ordered, not only the arriving one's."""
    one: gl.constexpr = gl.BlockedLayout([1], [32], [4], [0])
    gl.inline_asm_elementwise(BARRIER, "=r,r,~{memory}",
                              [gl.full([128], 0, gl.int32, one)], dtype=gl.int32, is_pure=False, pack=1)


@constexpr_function
def chunk_words(fmt):
    """32-bit words of one chunk's row of format ``fmt`` (fp8 64 bytes, MXFP4 32)."""
    return fp8.CHUNK_WORDS.value if fmt == FMT_FP8.value else mxfp4.CHUNK_WORDS.value


@constexpr_function
def chunks_per_copy(fmt):
    """Value chunks per copy (and per transposed value load) of format ``fmt``."""
    return fp8.CHUNKS_PER_COPY.value if fmt == FMT_FP8.value else mxfp4.CHUNKS_PER_COPY.value


@gluon.jit
def _group(FORMAT: gl.constexpr, raw, slot, p: gl.constexpr):
    """Value chunks ``p * G .. p * G + G - 1`` (G = ``chunks_per_copy``) of the tile in buffer
    ``slot``: (G, TILE, words), swizzled over a row."""
    return raw.index(slot * (VALUE_CHUNKS // chunks_per_copy(FORMAT)) + p)


@gluon.jit
def _group_rows(FORMAT: gl.constexpr, raw, slot, p: gl.constexpr):
    """``_group`` as (G * TILE, words): row h * TILE + r is row r of chunk p * G + h."""
    G: gl.constexpr = chunks_per_copy(FORMAT)
    W: gl.constexpr = chunk_words(FORMAT)
    return _group(FORMAT, raw, slot, p)._reinterpret(gl.int32, [G * TILE, W], staged_rows_layout(W))


@gluon.jit
def _last(FORMAT: gl.constexpr, last, slot):
    """Chunk 8's (TILE, words) of the tile in buffer ``slot``."""
    W: gl.constexpr = chunk_words(FORMAT)
    return last.index(slot)._reinterpret(gl.int32, [TILE, W], staged_rows_layout(W))


@gluon.jit
def _chunk_words(FORMAT: gl.constexpr, raw, last, slot, c: gl.constexpr):
    """Chunk ``c``'s (TILE, words) of the tile in buffer ``slot``, in ``chunk_word_layout``."""
    G: gl.constexpr = chunks_per_copy(FORMAT)
    word_l: gl.constexpr = chunk_word_layout(chunk_words(FORMAT) // 4)
    if c < VALUE_CHUNKS:
        return _group_rows(FORMAT, raw, slot, c // G).slice(TILE * (c % G), TILE, dim=0).load(word_l)
    else:
        return _last(FORMAT, last, slot).load(word_l)


@gluon.jit
def _issue_tile(FORMAT: gl.constexpr, desc_group, desc_last, bar, raw, last, slot, row0, live):
    """The copies of the tile of 64 cache rows from row ``row0`` into buffer ``slot`` (one per group
    of value chunks, one of chunk 8), completing on ``bar``; nothing unless ``live``. Rows past
    the cache read as zeros; rows of the next request are zeroed after they land (``_clear_rows``;
    MXFP4: their scales are)."""
    G: gl.constexpr = chunks_per_copy(FORMAT)
    mbarrier.expect(bar, TILE * NUM_CHUNKS * 4 * chunk_words(FORMAT), pred=live)
    for p in gl.static_range(VALUE_CHUNKS // G):
        tma.async_copy_global_to_shared(desc_group, [G * p, row0, 0], bar, _group(FORMAT, raw, slot, p), pred=live)
    tma.async_copy_global_to_shared(desc_last, [VALUE_CHUNKS, row0, 0], bar, last.index(slot), pred=live)


@constexpr_function
def row_copy_layout(chunks):
    """Registers of a row copy's source addresses, (chunks, TILE, 16) words of fp8 cache rows, 16
    bytes per thread and copy: for a pair of chunks eight lanes take one row's 128 bytes, so a
    warp's copy reads four rows (rows 16k + 4w + l // 8 % 4, k = 0..3, for warp w and lane l);
    for chunk 8 four lanes take a row's 64 bytes (rows 32k + 8w + l // 4, k = 0, 1). Wider rows per
    copy are fewer memory requests for the same bytes: the number a program can have in flight is
    what binds gathered rows (docs/PERF.md, design log step 91)."""
    if chunks == 2:
        return gl.BlockedLayout([1, 1, 4], [2, 4, 4], [1, 4, 1], [2, 1, 0])
    return gl.BlockedLayout([1, 1, 4], [1, 8, 4], [1, 4, 1], [2, 1, 0])


@constexpr_function
def row_copy_rows(chunks):
    """The layout of a tile's rows (TILE,) in ``row_copy_layout(chunks)``."""
    return gl.SliceLayout(0, gl.SliceLayout(2, row_copy_layout(chunks)))


@gluon.jit
def _row_pages(pages_ptr, first, kv_len, t, live, page_shift, PAGED: gl.constexpr):
    """Tile ``t``'s page entries (``paging.tile_pages``) in the row layouts of both row copies
    (pairs of chunks, chunk 8). Each thread reads its rows' entries for each layout (six loads, L1
    hits after the first): converting one layout's entries into the other would go through shared
    memory and a barrier."""
    return (paging.tile_pages(row_copy_rows(2), pages_ptr, first, kv_len, t, live, page_shift, PAGED),
            paging.tile_pages(row_copy_rows(1), pages_ptr, first, kv_len, t, live, page_shift, PAGED))


@gluon.jit
def _copy_group(kv_ptr, kv_stride, first, kv_len, t, live, page, num_pages, page_shift, smem, C0: gl.constexpr,
                G: gl.constexpr, PAGED: gl.constexpr):
    """``cp.async`` of chunks C0 .. C0 + G - 1 of tile ``t``'s fp8 rows (``page``: its entries in
    ``row_copy_rows(G)``) into ``smem`` (G, TILE, 16); rows that do not exist are filled with
    zeros."""
    L: gl.constexpr = row_copy_layout(G)
    rows, ok = paging.tile_rows(row_copy_rows(G), first, kv_len, t, live, page, num_pages, page_shift, PAGED)
    off = rows.to(gl.int64) * kv_stride
    c = gl.arange(0, G, layout=gl.SliceLayout(1, gl.SliceLayout(2, L)))
    w = gl.arange(0, 16, layout=gl.SliceLayout(0, gl.SliceLayout(1, L)))
    ptrs = kv_ptr + off[None, :, None] + ((C0 + c) * 16)[:, None, None] + w[None, None, :]
    async_copy.async_copy_global_to_shared(smem, ptrs, mask=ok[None, :, None])


@gluon.jit
def _copy_rows(kv_ptr, kv_stride, bar, raw, last, slot, first, kv_len, t, live, pages, num_pages, page_shift,
               PAGED: gl.constexpr):
    """Tile ``t`` of fp8 cache rows into buffer ``slot`` by row copies (``pages``: its
    ``_row_pages``; rows past the request or behind an entry outside the pool are filled with
    zeros), each thread arriving on ``bar`` (which counts the warpgroup's 128 threads) once its
    copies land; nothing unless ``live``. For pages smaller than a tile, whose rows the copy
    engine cannot gather."""
    if live:
        for p in gl.static_range(VALUE_CHUNKS // 2):
            _copy_group(kv_ptr, kv_stride, first, kv_len, t, live, pages[0], num_pages, page_shift,
                        _group(FMT_FP8, raw, slot, p), 2 * p, 2, PAGED)
        _copy_group(kv_ptr, kv_stride, first, kv_len, t, live, pages[1], num_pages, page_shift, last.index(slot),
                    VALUE_CHUNKS, 1, PAGED)
        async_copy.mbarrier_arrive(bar, increment_count=False)


@gluon.jit
def _clear_rows(raw, last, slot, valid):
    """Zeroes rows ``valid`` .. TILE-1 of the landed fp8 tile in buffer ``slot`` (the warpgroup's
    threads then meet)."""
    wl: gl.constexpr = gl.BlockedLayout([1, 4], [8, 4], [4, 1], [1, 0])
    r = gl.arange(0, 2 * TILE, layout=gl.SliceLayout(1, wl))[:, None]
    keep = (r % TILE) < valid
    for p in gl.static_range(VALUE_CHUNKS // 2):
        buf = _group_rows(FMT_FP8, raw, slot, p)
        buf.store(gl.where(keep, buf.load(wl), 0))
    buf1 = _last(FMT_FP8, last, slot)
    keep1 = gl.arange(0, TILE, layout=gl.SliceLayout(1, wl))[:, None] < valid
    buf1.store(gl.where(keep1, buf1.load(wl), 0))
    # The zeros are read by other threads, and the buffer is later written by the copy engine.
    fence_async_shared()
    gl.thread_barrier()


@constexpr_function
def _scale_layout(blocks):
    """Registers of ``blocks`` (16 or 2) scale bytes of each of a tile's rows (blocks, TILE): for 16,
    eight consecutive tokens of one block per thread (one store to the tile's scale buffer)."""
    if blocks == 16:
        return gl.BlockedLayout([1, 8], [4, 8], [4, 1], [1, 0])
    return gl.BlockedLayout([1, 1], [1, 32], [2, 2], [1, 0])


@gluon.jit
def _load_scales(sc_ptr, sc_stride, first_row, kv_len, t, end):
    """E8M0 bytes of tile ``t`` of a request whose rows start at cache row ``first_row``: blocks 0-15
    (16, TILE) and 16-17 (2, TILE) uint8; 0 for rows past ``kv_len`` and for every row unless
    ``t < end`` (so the tile's values past its request decode to zeros, whatever its codes hold)."""
    row0 = first_row + t * TILE
    valid = kv_len - t * TILE
    return (_load_scale_blocks(sc_ptr, sc_stride, row0, valid, t < end, 0, 16),
            _load_scale_blocks(sc_ptr, sc_stride, row0, valid, t < end, 16, 2))


@gluon.jit
def _load_scale_blocks(sc_ptr, sc_stride, row0, valid, live, B0: gl.constexpr, BLOCKS: gl.constexpr):
    sl: gl.constexpr = _scale_layout(BLOCKS)
    blk = gl.arange(0, BLOCKS, layout=gl.SliceLayout(1, sl)) + B0
    r = gl.arange(0, TILE, layout=gl.SliceLayout(0, sl))
    ok = (r < valid) & live
    ptrs = sc_ptr + (row0 + r).to(gl.int64)[None, :] * sc_stride + blk[:, None]
    return gl.load(ptrs, mask=ok[None, :], other=0)


@gluon.jit
def _store_scales(scales, sc_buf, slot):
    """``_load_scales``'s bytes into buffer ``slot`` of the scale buffers (SLOTS, SCALE_BLOCKS, TILE)
    int16: one byte per 16 bits, so that a 32-bit load of two tokens' scales is what the value
    decoder takes (``mxfp4.value_scales``)."""
    sc_buf.index(slot).slice(0, 16, dim=0).store(scales[0].to(gl.int16))
    sc_buf.index(slot).slice(16, 2, dim=0).store(scales[1].to(gl.int16))


@gluon.jit
def _key_chunk(FORMAT: gl.constexpr, words, sc_buf, slot, c: gl.constexpr, tables, ROWS: gl.constexpr):
    """Chunk ``c`` of the keys as the score product's A operand, from its staged ``words``."""
    if FORMAT == FMT_FP8:
        return to_key_operand(fp8.decode_chunk(words), ROWS)
    else:
        sc_l: gl.constexpr = gl.SliceLayout(2, mxfp4_scale_layout())
        scale = sc_buf.index(slot).slice(2 * c, 2, dim=0).permute((1, 0)).load(sc_l).to(gl.int32)
        return to_key_operand(mxfp4.decode_chunk(words, scale, tables), ROWS)


@gluon.jit
def _value_products(FORMAT: gl.constexpr, raw, slot, sc_buf, p_smem, scaled, tables, ROWS: gl.constexpr):
    """``O^T += V^T P^T`` for the tile in buffer ``slot``: VALUE_CHUNKS accumulators (CHUNK, ROWS)
    from ``scaled`` (rescaled accumulators). fp8: the even and odd columns of each chunk pair
    (``PAIR_COLUMNS``); MXFP4: the four columns of each code quad of chunks 0-3 and 4-7
    (``QUAD_COLUMNS``), scaled by their rows' block scales. Each group's products run while the
    next group's bytes are loaded."""
    G: gl.constexpr = chunks_per_copy(FORMAT)
    acc = ()
    cols = _value_columns(FORMAT, raw, slot, 0, ROWS)
    for p in gl.static_range(VALUE_CHUNKS // G):
        if FORMAT == FMT_FP8:
            even, odd = fp8.decode_columns(cols)
            acc = acc + (warpgroup_mma(even, p_smem, scaled[2 * p], is_async=True),
                         warpgroup_mma(odd, p_smem, scaled[2 * p + 1], is_async=True))
        else:
            v = mxfp4.decode_columns(cols, mxfp4.value_scales(sc_buf.index(slot).slice(8 * p, 8, dim=0), ROWS),
                                     tables)
            for i in gl.static_range(4):
                acc = acc + (warpgroup_mma(v[i], p_smem, scaled[4 * p + i], is_async=True), )
        if p + 1 < VALUE_CHUNKS // G:
            cols = _value_columns(FORMAT, raw, slot, p + 1, ROWS)
            acc = warpgroup_mma_wait(0, deps=acc)
    # Done before the next tile: products left in flight across it make the compiler spill.
    return warpgroup_mma_wait(0, deps=acc)


@gluon.jit
def _value_columns(FORMAT: gl.constexpr, raw, slot, p: gl.constexpr, ROWS: gl.constexpr):
    """Group ``p`` of the tile in buffer ``slot`` as (64, TILE) int16 columns, row h * 2W + j =
    the 16 bits of columns 2j, 2j+1 (fp8) or 4j .. 4j+3 (MXFP4) of chunk p * G + h (the transpose
    of its rows), in the value product's A-operand layout (``ldmatrix.trans``)."""
    G: gl.constexpr = chunks_per_copy(FORMAT)
    W: gl.constexpr = chunk_words(FORMAT)
    cols16 = _group(FORMAT, raw, slot, p)._reinterpret(gl.int16, [G, TILE, 2 * W], staged_columns_layout(W))
    return cols16.permute((0, 2, 1)).reshape([G * 2 * W, TILE]).load(key_operand_layout(ROWS))


@gluon.jit
def _half(WG: gl.constexpr, q_ptr, stride_qt, stride_qh, kv_ptr, kv_stride, sc_ptr, sc_stride, fp8_scale_ptr,
          kv_indptr, qo_indptr, pages_ptr, page_indptr, page_stride, max_pages, num_pages, page_shift, out_ptr,
          stride_ot, stride_oh, lse_ptr, stride_lt, part_o_ptr, part_lse_ptr, counter_ptr, batch, sm_scale, q_smem,
          ml_smem, hand, p_all, red_smem, raw, raw_last, sc_buf, zero_smem, tma_bars, H: gl.constexpr,
          ROWS: gl.constexpr, FORMAT: gl.constexpr, BLOCK_B: gl.constexpr, C0: gl.constexpr, WRITE_LSE: gl.constexpr,
          PAGED: gl.constexpr, SMALL_PAGES: gl.constexpr):
    """Warpgroup ``WG`` of a program (0: the default partition, which stages the query and writes;
    1: the worker): ``decode``'s request walk over its half of each piece's tiles. Its own shared
    buffers: ``p_all``, ``red_smem``, ``raw`` / ``raw_last`` (SLOTS staged tiles: the value chunks
    in groups of ``chunks_per_copy``, chunk 8), ``sc_buf`` (MXFP4: the SLOTS tiles' scale bytes)
    and ``tma_bars`` (one per slot); shared by both: the query (``q_smem``, staged by warpgroup 0;
    each computes the rows' multipliers from the query itself), the handoff (``ml_smem``: maximum
    and sum; ``hand``: warpgroup 1's accumulators) and (MXFP4) ``zero_smem``, a 0 for the decode
    tables."""
    acc_l: gl.constexpr = score_layout(ROWS)
    G: gl.constexpr = chunks_per_copy(FORMAT)
    W: gl.constexpr = chunk_words(FORMAT)
    MMA_DT: gl.constexpr = gl.float16 if FORMAT == FMT_FP8 else gl.bfloat16
    pid = gl.program_id(0)
    num_programs = gl.num_programs(0)
    bi, cost, cum, total, u_begin, u_end = _program_units(pid, num_programs, kv_indptr, page_indptr, max_pages,
                                                          page_shift, batch, BLOCK_B, C0, PAGED)
    kscale = 1.0
    key_tables = ()
    value_tables = ()
    if FORMAT == FMT_FP8:
        kscale = gl.load(fp8_scale_ptr)
    else:
        zero = mxfp4.shared_zero(zero_smem)
        key_tables = mxfp4.decode_tables(zero)
        value_tables = mxfp4.tables_like(zero, gl.full([64, TILE], 0, gl.int32, key_operand_layout(ROWS)))
    if not SMALL_PAGES:
        # The rows the copies may read: those of the requests, or the pool's.
        if PAGED == 0:
            n_rows = gl.load(kv_indptr + batch)
        else:
            n_rows = num_pages << page_shift
        desc_group = tma.make_tensor_descriptor(kv_ptr, [NUM_CHUNKS, n_rows, W], [W, kv_stride, 1], [G, TILE, W],
                                                staged_chunks_layout(W))
        desc_last = tma.make_tensor_descriptor(kv_ptr, [NUM_CHUNKS, n_rows, W], [W, kv_stride, 1], [1, TILE, W],
                                               staged_chunks_layout(W))
    n = gl.arange(0, ROWS, layout=gl.SliceLayout(0, acc_l))
    r_s = gl.arange(0, TILE, layout=gl.SliceLayout(1, acc_l))
    it = 0  # tiles this warpgroup has taken: buffer it % 2, whose mbarrier has completed it // 2 times
    if u_begin < u_end:
        b_first = gl.sum((cum <= u_begin).to(gl.int32), axis=0)
        b_last = gl.sum((cum < u_end).to(gl.int32), axis=0)
        for b in range(b_first, b_last + 1):
            start_b, cum_b, first, nparts = _request_bounds(b, bi, cum, cost, num_programs, total)
            first_row, kv_len = paging.request_tokens(b, kv_indptr, page_indptr, page_stride, max_pages, page_shift,
                                                      PAGED)
            q_lo = gl.load(qo_indptr + b)
            q_len = gl.load(qo_indptr + b + 1) - q_lo
            t_begin, t_end = _piece_tiles(u_begin, u_end, start_b, cum_b, kv_len, C0)
            mid = t_begin + (t_end - t_begin + 1) // 2
            if WG == 0:
                my_begin = t_begin
                my_end = mid
            else:
                my_begin = mid
                my_end = t_end
            if SMALL_PAGES:
                _copy_rows(kv_ptr, kv_stride, tma_bars.index(it % 2), raw, raw_last, it % 2, first_row, kv_len,
                           my_begin, my_begin < my_end,
                           _row_pages(pages_ptr, first_row, kv_len, my_begin, my_begin < my_end, page_shift, PAGED),
                           num_pages, page_shift, PAGED)
                # The next tile's page entries, read a tile before its copies need them.
                pages_next = _row_pages(pages_ptr, first_row, kv_len, my_begin + 1, my_begin + 1 < my_end, page_shift,
                                        PAGED)
            else:
                _issue_tile(FORMAT, desc_group, desc_last, tma_bars.index(it % 2), raw, raw_last, it % 2,
                            paging.tile_start(pages_ptr, first_row, my_begin, my_begin < my_end, num_pages, page_shift,
                                              PAGED), my_begin < my_end)
                # Paged: the next tile's first row, its page entry read a tile before the copy needs it.
                next_row = paging.tile_start(pages_ptr, first_row, my_begin + 1, my_begin + 1 < my_end, num_pages,
                                             page_shift, PAGED)
            if FORMAT == FMT_MXFP4:
                # A tile's scale bytes are loaded into registers a tile before they are stored in its
                # scale buffer (at the start of the tile before it, after the barrier that frees it).
                scales = _load_scales(sc_ptr, sc_stride, first_row, kv_len, my_begin, my_end)
            q_rows = _load_query(q_ptr, stride_qt, stride_qh, q_lo, q_len, H, ROWS)
            if WG == 0:
                # Warpgroup 1 no longer reads the query buffer: its previous handoff was read at
                # the previous request's end, after its last products.
                q_mult = _stage_query(FORMAT, q_smem, q_rows, ROWS)
            elif FORMAT == FMT_FP8:
                # The same multipliers from the same rows (L2 hits), rather than from warpgroup 0
                # through shared memory.
                q_mult = _query_multiplier(q_rows, ROWS)
            else:
                q_mult = gl.full([ROWS], 1.0, gl.float32, gl.SliceLayout(1, q_rows[0].type.layout))
            _both_warpgroups(Q_READY)
            if FORMAT == FMT_MXFP4:
                _store_scales(scales, sc_buf, it % 2)
                scales = _load_scales(sc_ptr, sc_stride, first_row, kv_len, my_begin + 1, my_end)
            qk = (sm_scale * LOG2E * kscale) / gl.convert_layout(q_mult, gl.SliceLayout(0, acc_l))
            last_visible = kv_len - q_len + n // H
            row_ok = n < q_len * H

            m_i = gl.full([ROWS], float("-inf"), gl.float32, gl.SliceLayout(0, acc_l))
            l_acc = gl.zeros([TILE, ROWS], gl.float32, acc_l)
            st = gl.zeros([TILE, ROWS], gl.float32, acc_l)
            acc = ()
            for c in gl.static_range(VALUE_CHUNKS):
                acc = acc + (gl.zeros([CHUNK, ROWS], gl.float32, acc_l), )
            for t in range(my_begin, my_end):
                slot = it % 2
                # Every thread has read the other buffer (the previous tile): the next tile's
                # copies go there now.
                gl.thread_barrier()
                if SMALL_PAGES:
                    _copy_rows(kv_ptr, kv_stride, tma_bars.index(1 - slot), raw, raw_last, 1 - slot, first_row, kv_len,
                               t + 1, t + 1 < my_end, pages_next, num_pages, page_shift, PAGED)
                    pages_next = _row_pages(pages_ptr, first_row, kv_len, t + 2, t + 2 < my_end, page_shift, PAGED)
                else:
                    if PAGED == 0:
                        row_next = first_row + (t + 1) * TILE
                    else:
                        row_next = next_row
                        next_row = paging.tile_start(pages_ptr, first_row, t + 2, t + 2 < my_end, num_pages,
                                                     page_shift, PAGED)
                    _issue_tile(FORMAT, desc_group, desc_last, tma_bars.index(1 - slot), raw, raw_last, 1 - slot,
                                row_next, t + 1 < my_end)
                if FORMAT == FMT_MXFP4:
                    _store_scales(scales, sc_buf, 1 - slot)
                    scales = _load_scales(sc_ptr, sc_stride, first_row, kv_len, t + 2, my_end)
                mbarrier.wait(tma_bars.index(slot), (it // 2) % 2)
                if FORMAT == FMT_FP8 and not SMALL_PAGES:  # row copies fill missing rows with zeros
                    if (t + 1) * TILE > kv_len:
                        _clear_rows(raw, raw_last, slot, kv_len - t * TILE)
                words = _chunk_words(FORMAT, raw, raw_last, slot, 0)
                for c in gl.static_range(NUM_CHUNKS):
                    # The next chunk's words are read before this one decodes: otherwise every
                    # chunk waits for its shared-memory load.
                    if c + 1 < NUM_CHUNKS:
                        nxt = _chunk_words(FORMAT, raw, raw_last, slot, c + 1)
                    keys = _key_chunk(FORMAT, words, sc_buf, slot, c, key_tables, ROWS)
                    if c + 1 < NUM_CHUNKS:
                        words = nxt
                    q_c = q_smem.index(c + _opaque_zero(t))
                    st = warpgroup_mma(keys, q_c.permute((1, 0)), st, use_acc=c > 0, is_async=True)
                    if c > 0:
                        st = warpgroup_mma_wait(1, deps=(st, ))
                it += 1
                st = warpgroup_mma_wait(0, deps=(st, ))
                p, m_i, l_acc, scaled = _softmax_tile(st, qk, t * TILE + r_s, kv_len, last_visible, m_i, l_acc, acc,
                                                      red_smem, ROWS)
                p_smem = p_all.index(_opaque_zero(t))
                p_smem.store(p.to(MMA_DT))
                fence_async_shared()
                acc = _value_products(FORMAT, raw, slot, sc_buf, p_smem, scaled, value_tables, ROWS)
            l_i = gl.sum(l_acc, axis=0)
            if WG == 1:
                ml_smem[0].store(m_i)
                ml_smem[1].store(l_i)
                for c in gl.static_range(VALUE_CHUNKS):
                    hand.index(c).store(acc[c])
            _both_warpgroups(HANDOFF)
            if WG == 0:
                m_o = ml_smem[0].load(gl.SliceLayout(0, acc_l))
                l_o = ml_smem[1].load(gl.SliceLayout(0, acc_l))
                m_all = gl.maximum(m_i, m_o)
                m_safe = gl.where(m_all == float("-inf"), 0.0, m_all)
                a_mine = gl.exp2(m_i - m_safe)
                a_other = gl.exp2(m_o - m_safe)
                merged = ()
                for c in gl.static_range(VALUE_CHUNKS):
                    merged = merged + (acc[c] * a_mine[None, :] + hand.index(c).load(acc_l) * a_other[None, :], )
                inv_l, lse2 = _finish(m_all, l_i * a_mine + l_o * a_other)
                dcol = G * gl.arange(0, CHUNK, layout=gl.SliceLayout(1, acc_l))
                COLUMNS: gl.constexpr = PAIR_COLUMNS if FORMAT == FMT_FP8 else QUAD_COLUMNS
                _write_request(merged, inv_l, lse2, kscale, n, dcol, COLUMNS, row_ok, b, b_first, pid, num_programs,
                               total, u_begin, start_b, first, nparts, q_lo, q_len, out_ptr, stride_ot, stride_oh,
                               lse_ptr, stride_lt, part_o_ptr, part_lse_ptr, counter_ptr, batch, H, ROWS, WRITE_LSE)


@gluon.jit
def mla_decode_hopper_tma_kernel(
    q_ptr, stride_qt, stride_qh,
    kv_ptr, kv_stride, sc_ptr, sc_stride, fp8_scale_ptr,
    kv_indptr, qo_indptr,
    pages_ptr, page_indptr, page_stride, max_pages, num_pages, page_shift,
    out_ptr, stride_ot, stride_oh, lse_ptr, stride_lt,
    part_o_ptr, part_lse_ptr, counter_ptr,
    batch, sm_scale,
    H: gl.constexpr, ROWS: gl.constexpr, FORMAT: gl.constexpr, BLOCK_B: gl.constexpr, C0: gl.constexpr,
    WRITE_LSE: gl.constexpr, PAGED: gl.constexpr, SMALL_PAGES: gl.constexpr,
):
    """Grid: (programs,), persistent, one program per SM; two warpgroups (4 warps each) per program.

    ``decode.mla_decode_hopper_kernel``'s arguments (``compile.SIGNATURE``). Contiguous:
    kv_indptr[batch] must be the number of cache rows the copies may read (at most the cache's
    rows). Paged (fp8 only): SMALL_PAGES False needs pages of at least TILE tokens (``page_shift
    >= 6``), so that each tile is one copy of consecutive rows of one page (``paging.tile_start``);
    SMALL_PAGES True reads any power-of-two page size by row copies.
    """
    gl.static_assert(PAGED == 0 or FORMAT == FMT_FP8, "the staged kernel reads paged fp8 caches, not paged MXFP4")
    gl.static_assert(PAGED != 0 or not SMALL_PAGES, "SMALL_PAGES is a form of the paged kernel")
    gl.static_assert(ROWS == 16, "the Hopper kernel covers 16 query rows per request")
    G: gl.constexpr = chunks_per_copy(FORMAT)
    W: gl.constexpr = chunk_words(FORMAT)
    MMA_DT: gl.constexpr = gl.float16 if FORMAT == FMT_FP8 else gl.bfloat16
    q_smem = gl.allocate_shared_memory(MMA_DT, [NUM_CHUNKS, ROWS, CHUNK], q_layout())
    bars0 = gl.allocate_shared_memory(gl.int64, [SLOTS, 1], mbarrier.MBarrierLayout())
    bars1 = gl.allocate_shared_memory(gl.int64, [SLOTS, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(SLOTS):
        if SMALL_PAGES:  # every thread of a warpgroup arrives when its row copies land
            mbarrier.init(bars0.index(i), count=128)
            mbarrier.init(bars1.index(i), count=128)
        else:  # one thread arrives and expects the copy engine's bytes
            mbarrier.init(bars0.index(i), count=1)
            mbarrier.init(bars1.index(i), count=1)
    raw0 = gl.allocate_shared_memory(gl.int32, [SLOTS * (VALUE_CHUNKS // G), G, TILE, W], staged_chunks_layout(W))
    raw1 = gl.allocate_shared_memory(gl.int32, [SLOTS * (VALUE_CHUNKS // G), G, TILE, W], staged_chunks_layout(W))
    last0 = gl.allocate_shared_memory(gl.int32, [SLOTS, 1, TILE, W], staged_chunks_layout(W))
    last1 = gl.allocate_shared_memory(gl.int32, [SLOTS, 1, TILE, W], staged_chunks_layout(W))
    hand = gl.allocate_shared_memory(gl.float32, [VALUE_CHUNKS, CHUNK, ROWS], gl.SwizzledSharedLayout(1, 1, 1, [1, 0]))
    p0 = gl.allocate_shared_memory(MMA_DT, [1, TILE, ROWS], p_layout(ROWS))
    p1 = gl.allocate_shared_memory(MMA_DT, [1, TILE, ROWS], p_layout(ROWS))
    red0 = gl.allocate_shared_memory(gl.float32, [4, ROWS], gl.SwizzledSharedLayout(1, 1, 1, [1, 0]))
    red1 = gl.allocate_shared_memory(gl.float32, [4, ROWS], gl.SwizzledSharedLayout(1, 1, 1, [1, 0]))
    ml_smem = (gl.allocate_shared_memory(gl.float32, [ROWS], gl.SwizzledSharedLayout(1, 1, 1, [0])),
               gl.allocate_shared_memory(gl.float32, [ROWS], gl.SwizzledSharedLayout(1, 1, 1, [0])))
    if FORMAT == FMT_MXFP4:
        sc_l: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [1, 0])
        sc0 = gl.allocate_shared_memory(gl.int16, [SLOTS, SCALE_BLOCKS, TILE], sc_l)
        sc1 = gl.allocate_shared_memory(gl.int16, [SLOTS, SCALE_BLOCKS, TILE], sc_l)
        zero_smem = mxfp4.zero_buffer()
    else:  # never read
        sc0 = q_smem
        sc1 = q_smem
        zero_smem = q_smem
    fence_async_shared()
    gl.thread_barrier()
    gl.warp_specialize([
        (_half, (0, q_ptr, stride_qt, stride_qh, kv_ptr, kv_stride, sc_ptr, sc_stride, fp8_scale_ptr, kv_indptr,
                 qo_indptr, pages_ptr, page_indptr, page_stride, max_pages, num_pages, page_shift, out_ptr,
                 stride_ot, stride_oh, lse_ptr, stride_lt, part_o_ptr, part_lse_ptr, counter_ptr, batch, sm_scale,
                 q_smem, ml_smem, hand, p0, red0, raw0, last0, sc0, zero_smem, bars0,
                 H, ROWS, FORMAT, BLOCK_B, C0, WRITE_LSE, PAGED, SMALL_PAGES)),
        (_half, (1, q_ptr, stride_qt, stride_qh, kv_ptr, kv_stride, sc_ptr, sc_stride, fp8_scale_ptr, kv_indptr,
                 qo_indptr, pages_ptr, page_indptr, page_stride, max_pages, num_pages, page_shift, out_ptr,
                 stride_ot, stride_oh, lse_ptr, stride_lt, part_o_ptr, part_lse_ptr, counter_ptr, batch, sm_scale,
                 q_smem, ml_smem, hand, p1, red1, raw1, last1, sc1, zero_smem, bars1,
                 H, ROWS, FORMAT, BLOCK_B, C0, WRITE_LSE, PAGED, SMALL_PAGES)),
    ], [4], [WORKER_REGISTERS])
