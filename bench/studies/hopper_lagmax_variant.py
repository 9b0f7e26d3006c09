"""The MXFP4 loop with the tile maximum's exchange taken off the path to P: a variant of the shipped
``kernels/gluon/decode.py`` (issue 13; twenty-ninth session).

Every tile of the shipped loop waits, between its score products and its probabilities, for the
column maxima of the scores from all four warps of the warpgroup (``decode._tile_max``: shuffles,
a shared-memory store, a barrier, a load). The online softmax does not need the tile's own maximum,
only a shift no smaller than about it: with any shift M, ``p = 2**(s - M)`` gives the same output
and log-sum-exp as long as the largest ``p`` neither overflows nor loses the sum to underflow.
``lagmax`` shifts tile k of a piece by the running maximum of tiles 0 .. k-1, whose last term each
warp reads at tile k from the exchange that tile k-1 stored: two exchange buffers alternate by the
tile's parity, so the store of one tile and the read of the previous one need no barrier between
them (the barrier before P^T's product, which the loop has anyway, separates a buffer's store
from its read a tile later). The shift starts at 0, so the first tile needs no maximum.

A tile's scores may then exceed its shift; the loop keeps, per query row, how far (the previous
tile's true maximum read at the next tile, the last tile's after the loop) and a row that went
more than 16 above its shift (``p`` up to 2**16: no overflow in bf16 or the float32 sums) would
need its piece decoded again with the exact shift, the slow path of a shipped form. This variant
has no slow path: such rows are written as NaN, so the strict check fails where it would have
been taken (the benchmark's random inputs never rise that far after the first tile).

``lagearly`` (design log step 122) keeps one exchange buffer and reads each tile's maxima back at
the end of that tile, after the barrier before P^T's product and the value products' issue, so the
read is not queued behind the next tile's loads and value-tile stores and the next tile's P does
not wait for it (the barrier the loop meets before its first value-tile store separates that read
from the next store). ``lagsafe``: ``lagearly`` with the slow path a shipped form needs (a piece
with a row that rose more than 16 above its shift runs the shipped loop again); ``hopper_variants.py
--staircase`` checks it on scores that rise by up to 30 between tiles. ``*_f16``: the same on step
77's f16 decode (``hopper_mxf16_variant``).

Measured (step 120, H100 SXM): ``lagmax`` 1.6% slower than shipped. Predicted for ``lagmax``
(256x8192, H100 SXM, shipped 403-411 us): between the shipped time and the ``fixedmax``
bound (``hopper_fixedmax_variant.py``, the exchange removed entirely), nearer the bound if the
warps' meeting once per tile is what holds the loop, and about the shipped time if the exchange's
instructions are.

    TRITON_INTERPRET=0 python bench/studies/hopper_lagmax_variant.py OUTDIR --compile   # write, compile (CPU)
    python bench/studies/hopper_variants.py OUT OUTDIR/var_lagearly.py --shapes 256x8192,64x8192,32x1024  # (GPU)
"""

import sys

import mixmla.kernels.gluon.decode as shipped

import hopper_mxf16_variant

from hopper_load_variants import _edit, absolute_imports
from hopper_variants import print_compile_facts, write_source

HELPERS = '''

@gluon.jit
def _warp_max_read(red, ROWS: gl.constexpr):
    """Column maxima (ROWS,) of the four per-warp rows stored in ``red`` (4, ROWS)."""
    acc_l: gl.constexpr = score_layout(ROWS)
    all_l: gl.constexpr = gl.DistributedLinearLayout(
        reg_bases=[[0, 1], [0, 8], [1, 0], [2, 0]], lane_bases=[[0, 2], [0, 4], [0, 0], [0, 0], [0, 0]],
        warp_bases=[[0, 0], [0, 0]], block_bases=[], shape=[4, ROWS])
    return gl.convert_layout(gl.max(red.load(all_l), axis=0), gl.SliceLayout(0, acc_l))


@gluon.jit
def _softmax_lag(st, qk, pos, kv_len, last_visible, m_i, l_acc, acc, red0, red1, k, m_ref, m_true, over,
                 ROWS: gl.constexpr, EARLY: gl.constexpr):
    """``_softmax_tile`` with tile k of a piece shifted by the largest of 0 and the maxima of tiles
    0 .. k-1: its own per-warp maxima are stored (buffer of k's parity) for the next tile to read.
    With EARLY one buffer serves: ``m_ref`` holds tile k-1's maxima, which the caller read from it
    after tile k-1's P^T barrier; else read here after the store, from the other buffer. ``m_true`` (ROWS,): the maxima of tiles 0 .. k-1 as read; ``over``
    (ROWS,): how far those maxima rose above their tiles' shifts. Returns p, the new shift, sums,
    rescaled accumulators and the new ``m_true`` and ``over``."""
    visible = (pos[:, None] < kv_len) & (pos[:, None] <= last_visible[None, :])
    s = gl.where(visible, st * qk[None, :], float("-inf"))
    per_warp = gl.max(gl.reshape(s, [4, 16, ROWS]), axis=1)
    if EARLY:
        red0.store(per_warp)
    else:
        if k % 2 == 0:
            red0.store(per_warp)
            m_ref = _warp_max_read(red1, ROWS)
        else:
            red1.store(per_warp)
            m_ref = _warp_max_read(red0, ROWS)
    m_true = gl.maximum(m_true, m_ref)
    over = gl.maximum(over, m_ref - m_i)
    m_new = gl.maximum(m_i, m_ref)
    p = gl.exp2(s - m_new[None, :])
    alpha = gl.exp2(m_i - m_new)
    l_acc = l_acc * alpha[None, :] + p
    scaled = ()
    for c in gl.static_range(len(acc)):
        scaled = scaled + (acc[c] * alpha[None, :], )
    return p, m_new, l_acc, scaled, m_true, over

'''


#: The lines of ``decode.py``'s request body that start a piece's tiles (page entries, the first
#: tile's loads) and, from the running state's start, the tile loop through its last wait: what a
#: slow path runs again.
_FIRST_LOADS = ("            page = _tile_pages(PAGED, pages_ptr, first_row, kv_len, t_begin, t_begin < t_end, page_shift)\n",
                "            q_mult = _stage_query(")
_EXACT_LOOP = ("            m_i = gl.full([ROWS], float(\"-inf\"), gl.float32, gl.SliceLayout(0, acc_l))\n",
               "            acc = warpgroup_mma_wait(0, deps=acc)\n            inv_l, lse2 = _finish(")


def _between(src: str, marks: tuple[str, str]) -> str:
    """The text of ``src`` from the first mark up to (excluding) the second, which must follow it."""
    i = src.index(marks[0])
    return src[i:src.index(marks[1], i)]


def _slow_path(src: str) -> str:
    """The shipped piece again, exact maxima, under ``if`` (indented one level more)."""
    body = _between(src, _FIRST_LOADS) + _between(src, _EXACT_LOOP) + "            acc = warpgroup_mma_wait(0, deps=acc)\n"
    return "".join("    " + line if line.strip() else line for line in body.splitlines(keepends=True))


def lag_max(src: str, early: bool = False, safe: bool = False) -> str:
    """``src`` (a form of ``decode.py``) with the lagged shift; ``early``: one exchange buffer, each
    tile's maxima read back at the end of that tile (after the barrier before P^T's product and the
    value products' issue), so the read is not queued behind the next tile's loads and value-tile
    stores, nor does anything wait for it before the next tile's probabilities. ``safe``: a piece
    with a row that rose too far is decoded again with the exact maxima (the shipped loop), instead
    of written as NaN."""
    slow = _slow_path(src)
    src = _edit(src, "\n\n@gluon.jit\ndef _tile_rows(", HELPERS + "\n@gluon.jit\ndef _tile_rows(")
    red = "    red_smem = gl.allocate_shared_memory(gl.float32, [4, ROWS], gl.SwizzledSharedLayout(1, 1, 1, [1, 0]))\n"
    src = _edit(src, red, red + red.replace("red_smem", "red1"))
    # The shift starts at 0 (not -inf), and what tile 0 reads as its predecessor's maxima is -inf.
    first = ("            m_ref = m_true\n" if early else
             "            red1.store(gl.full([4, ROWS], float(\"-inf\"), gl.float32, gl.SliceLayout(1, gl.BlockedLayout([1, 1, 1], [1, 2, 16], [4, 1, 1], [2, 1, 0]))))\n"
             "            gl.thread_barrier()\n")
    src = _edit(src, "            m_i = gl.full([ROWS], float(\"-inf\"), gl.float32, gl.SliceLayout(0, acc_l))\n",
                "            m_i = gl.zeros([ROWS], gl.float32, gl.SliceLayout(0, acc_l))\n"
                "            m_true = gl.full([ROWS], float(\"-inf\"), gl.float32, gl.SliceLayout(0, acc_l))\n"
                "            over = m_true\n" + first)
    src = _edit(src, "                p, m_i, l_acc, scaled = _softmax_tile(st, qk, t * TILE + r_s, kv_len, last_visible, m_i, l_acc, acc,\n"
                     "                                                      red_smem, ROWS)\n",
                "                p, m_i, l_acc, scaled, m_true, over = _softmax_lag(st, qk, t * TILE + r_s, kv_len, last_visible,\n"
                "                                                                   m_i, l_acc, acc, red_smem, red1, t - t_begin,\n"
                f"                                                                   {'m_ref' if early else 'm_i'}, m_true, over, ROWS, {early})\n")
    if early:
        # The tile's maxima read once its P^T barrier has passed, after its value products are
        # issued: the read completes under the next tile's decode, which does not wait for it.
        src = _edit(src, "                    acc = acc + (warpgroup_mma(v_bufs[c].index(z).permute((1, 0)), p_smem, scaled[c], is_async=True), )\n",
                    "                    acc = acc + (warpgroup_mma(v_bufs[c].index(z).permute((1, 0)), p_smem, scaled[c], is_async=True), )\n"
                    "                m_ref = _warp_max_read(red_smem, ROWS)\n")
    # After the loop: the last tile's maxima (in the buffer of its parity) join m_true, and a row
    # whose shift ran more than 16 below its maxima (p over 2**16) or more than 64 above them (p
    # near float32's smallest) is written as NaN: the rows a shipped form would decode again.
    src = _edit(src, "            inv_l, lse2 = _finish(m_i, gl.sum(l_acc, axis=0))\n",
                ("            m_last = m_ref\n" if early else
                 "            gl.thread_barrier()\n"
                 "            if (t_end - t_begin) % 2 == 1:\n"
                 "                m_last = _warp_max_read(red_smem, ROWS)\n"
                 "            else:\n"
                 "                m_last = _warp_max_read(red1, ROWS)\n") +
                "            m_true = gl.maximum(m_true, m_last)\n"
                "            over = gl.maximum(over, m_last - m_i)\n"
                "            redo = (over > 16.0) | ((m_true > float(\"-inf\")) & (m_i - m_true > 64.0))\n" +
                ("            if gl.max(redo.to(gl.int32), axis=0) > 0:\n" + slow +
                 "            inv_l, lse2 = _finish(m_i, gl.sum(l_acc, axis=0))\n" if safe else
                 "            inv_l, lse2 = _finish(m_i, gl.sum(l_acc, axis=0))\n"
                 "            # No slow path in this variant.\n"
                 "            inv_l = gl.where(redo, float(\"nan\"), inv_l)\n"))
    return src + '\nFORMATS = ("mxfp4", )\n'


def variant_source() -> str:
    return lag_max(absolute_imports(open(shipped.__file__).read()))


def write_variant(outdir: str) -> list[str]:
    """``var_lagmax.py``, and ``var_lagmax_f16.py``: the same on step 77's f16 decode
    (``hopper_mxf16_variant``, exact for the benchmark's block exponents only)."""
    shipped_src = absolute_imports(open(shipped.__file__).read())
    return [write_source(outdir, "var_lagmax.py", variant_source()),
            write_source(outdir, "var_lagmax_f16.py", lag_max(hopper_mxf16_variant.variant_source())),
            write_source(outdir, "var_lagearly.py", lag_max(shipped_src, early=True)),
            write_source(outdir, "var_lagearly_f16.py", lag_max(hopper_mxf16_variant.variant_source(), early=True)),
            write_source(outdir, "var_lagsafe.py", lag_max(shipped_src, early=True, safe=True))]


if __name__ == "__main__":
    for out in write_variant(sys.argv[1] if len(sys.argv) > 1 else "bench/out/lagmax"):
        print(out)
        if "--compile" in sys.argv:
            print_compile_facts(out, [(2, 0), (2, 1)], ops=("BAR", "SHFL", "STS", "LDS", "HGMMA", "BRA"))
