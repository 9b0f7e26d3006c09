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
--safety`` checks it on scores that rise by up to 30 between tiles and on block exponents far from
0. ``*_f16``: the same on step 77's f16 decode (``hopper_mxf16_variant``); ``lagsafe_f16``
(``lag_safe_f16``) also takes the slow path, the shipped bf16 loop, where a block exponent leaves
[-13, 13], so that it is exact wherever the f16 tables are not.

Measured (step 120, H100 SXM): ``lagmax`` 1.6% slower than shipped. Predicted for ``lagmax``
(256x8192, H100 SXM, shipped 403-411 us): between the shipped time and the ``fixedmax``
bound (``hopper_fixedmax_variant.py``, the exchange removed entirely), nearer the bound if the
warps' meeting once per tile is what holds the loop, and about the shipped time if the exchange's
instructions are.

    TRITON_INTERPRET=0 python bench/studies/hopper_lagmax_variant.py OUTDIR --compile   # write, compile (CPU)
    python bench/studies/hopper_variants.py OUT OUTDIR/var_lagearly.py --shapes 256x8192,64x8192,32x1024  # (GPU)
"""

import re
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
    after tile k-1's P^T barrier; else read here after the store, from the other buffer.
    ``m_true`` (ROWS,): the maxima of tiles 0 .. k-1 as read; ``over`` (ROWS,): how far those maxima
    rose above their tiles' shifts. Returns p, the new shift, sums, rescaled accumulators and the
    new ``m_true`` and ``over``."""
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


def lag_max(src: str, early: bool = False, safe: bool = False, slow: str | None = None, over_limit: float = 16.0,
            under_limit: float = 64.0, flags: str = "") -> str:
    """``src`` (a form of ``decode.py``) with the lagged shift; ``early``: one exchange buffer, each
    tile's maxima read back at the end of that tile (after the barrier before P^T's product and the
    value products' issue), so the read is not queued behind the next tile's loads and value-tile
    stores, nor does anything wait for it before the next tile's probabilities. ``safe``: a piece
    with a row that rose too far is decoded again with the exact maxima (the shipped loop), instead
    of written as NaN. ``slow``: the slow path's text (default: ``src``'s own loop again);
    ``over_limit`` / ``under_limit``: how far a row's maxima may rise above its shift / its final
    shift lie above its maxima before the piece is decoded again; ``flags``: more of the condition
    (a Python expression of the kernel's names, or'ed in)."""
    slow = _slow_path(src) if slow is None else slow
    src = _edit(src, "\n\n@gluon.jit\ndef _tile_rows(", HELPERS + "\n@gluon.jit\ndef _tile_rows(")
    red = "    red_smem = gl.allocate_shared_memory(gl.float32, [4, ROWS], gl.SwizzledSharedLayout(1, 1, 1, [1, 0]))\n"
    if not early:  # the second exchange buffer, for the other parity
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
                f"                                                                   m_i, l_acc, acc, red_smem, {'red_smem' if early else 'red1'}, t - t_begin,\n"
                f"                                                                   {'m_ref' if early else 'm_i'}, m_true, over, ROWS, {early})\n")
    if early:
        # The tile's maxima read once its P^T barrier has passed, after its value products are
        # issued: the read completes under the next tile's decode, which does not wait for it.
        src = _edit(src, "                    acc = acc + (warpgroup_mma(v_bufs[c].index(z).permute((1, 0)), p_smem, scaled[c], is_async=True), )\n",
                    "                    acc = acc + (warpgroup_mma(v_bufs[c].index(z).permute((1, 0)), p_smem, scaled[c], is_async=True), )\n"
                    "                m_ref = _warp_max_read(red_smem, ROWS)\n")
    # After the loop: the last tile's maxima join m_true, and a piece with a row whose maxima rose
    # more than over_limit above its shift, or whose final shift lies more than under_limit above
    # them (or that ``flags`` marks) is decoded again (``safe``) or has such rows written as NaN.
    src = _edit(src, "            inv_l, lse2 = _finish(m_i, gl.sum(l_acc, axis=0))\n",
                ("            m_last = m_ref\n" if early else
                 "            gl.thread_barrier()\n"
                 "            if (t_end - t_begin) % 2 == 1:\n"
                 "                m_last = _warp_max_read(red_smem, ROWS)\n"
                 "            else:\n"
                 "                m_last = _warp_max_read(red1, ROWS)\n") +
                "            m_true = gl.maximum(m_true, m_last)\n"
                "            over = gl.maximum(over, m_last - m_i)\n"
                f"            redo = (over > {over_limit}) | ((m_true > float(\"-inf\")) & (m_i - m_true > {under_limit}))\n" +
                (f"            redo = redo | {flags}\n" if flags else "") +
                ("            if gl.max(redo.to(gl.int32), axis=0) > 0:\n" + slow +
                 "            inv_l, lse2 = _finish(m_i, gl.sum(l_acc, axis=0))\n" if safe else
                 "            inv_l, lse2 = _finish(m_i, gl.sum(l_acc, axis=0))\n"
                 "            # No slow path in this variant.\n"
                 "            inv_l = gl.where(redo, float(\"nan\"), inv_l)\n"))
    return src + '\nFORMATS = ("mxfp4", )\n'


#: What the f16 form's slow path sets up before the shipped (bf16) loop: bf16 views of the f16
#: buffers, the query staged again in bf16, its scale and the bf16 decode tables.
_BF16_PRELUDE = """\
                q_smem_b = q_smem._reinterpret(gl.bfloat16, [NUM_CHUNKS, ROWS, CHUNK], q_layout())
                v_bufs_b = ()
                for c in gl.static_range(VALUE_CHUNKS):
                    v_bufs_b = v_bufs_b + (v_bufs[c]._reinterpret(gl.bfloat16, [1, TILE, CHUNK], v_layout()), )
                p_all_b = p_all._reinterpret(gl.bfloat16, [1, TILE, ROWS], p_layout(ROWS))
                q_rows_b = _load_query(q_ptr, stride_qt, stride_qh, q_lo, q_len, H, ROWS)
                for c in gl.static_range(NUM_CHUNKS):
                    q_smem_b.index(c).store(q_rows_b[c])
                fence_async_shared()
                qk_b = gl.zeros([ROWS], gl.float32, gl.SliceLayout(0, acc_l)) + sm_scale * LOG2E * kscale
                tables_b = mxfp4.decode_tables(gl.sum(zero_smem.load(one), axis=0))
"""


def lag_safe_f16() -> str:
    """``lagsafe`` on step 77's f16 decode, exact: a piece whose block exponents leave [-13, 13]
    (where the f16 tables stop being exact), whose scores rose more than 15 above their shift (P
    past f16's largest) or whose shift ended more than 8 above its maxima (P near f16's smallest
    normal) runs the shipped bf16 loop again, on bf16 views of the same buffers."""
    slow = _slow_path(_shipped_source())
    for name, to in (("q_smem", "q_smem_b"), ("v_bufs", "v_bufs_b"), ("p_all", "p_all_b"), ("qk", "qk_b"),
                     ("tables", "tables_b"), ("MMA_DT", "gl.bfloat16")):
        slow = re.sub(rf"\b{name}\b", to, slow)
    src = hopper_mxf16_variant.variant_source()
    # The block exponents seen: the largest E8M0 byte less 114 (2**-13), as unsigned (a byte
    # under 114 wraps to a large value), so one maximum keeps both ends of [-13, 13].
    src = _edit(src, "                    keys = to_key_operand(_mxf16_decode(raw[c][0], raw[c][1]), ROWS)\n",
                "                    sc_dev = gl.maximum(sc_dev, (raw[c][1] - 114).to(gl.uint32, bitcast=True))\n"
                "                    keys = to_key_operand(_mxf16_decode(raw[c][0], raw[c][1]), ROWS)\n")
    src = _edit(src, "            for t in range(t_begin, t_end):\n",
                "            sc_dev = (raw[0][1] - 114).to(gl.uint32, bitcast=True)\n            for t in range(t_begin, t_end):\n")
    return lag_max(src, early=True, safe=True, slow=_BF16_PRELUDE + slow, over_limit=15.0, under_limit=8.0,
                   flags="(gl.max(gl.max(sc_dev, axis=1), axis=0) > 26)")


def _shipped_source() -> str:
    return absolute_imports(open(shipped.__file__).read())


def variant_source() -> str:
    return lag_max(_shipped_source())


def write_variant(outdir: str) -> list[str]:
    """``var_lagmax.py``, ``var_lagearly.py``, ``var_lagsafe.py`` (module docstring), the first two
    also on step 77's f16 decode (``*_f16``: exact for the benchmark's block exponents only), and
    ``var_lagsafe_f16.py`` (``lag_safe_f16``)."""
    shipped_src = _shipped_source()
    return [write_source(outdir, "var_lagmax.py", lag_max(shipped_src)),
            write_source(outdir, "var_lagmax_f16.py", lag_max(hopper_mxf16_variant.variant_source())),
            write_source(outdir, "var_lagearly.py", lag_max(shipped_src, early=True)),
            write_source(outdir, "var_lagearly_f16.py", lag_max(hopper_mxf16_variant.variant_source(), early=True)),
            write_source(outdir, "var_lagsafe.py", lag_max(shipped_src, early=True, safe=True)),
            write_source(outdir, "var_lagsafe_f16.py", lag_safe_f16())]


if __name__ == "__main__":
    for out in write_variant(sys.argv[1] if len(sys.argv) > 1 else "bench/out/lagmax"):
        print(out)
        if "--compile" in sys.argv:
            print_compile_facts(out, [(2, 0), (2, 1)], ops=("BAR", "SHFL", "STS", "LDS", "HGMMA", "BRA"))
