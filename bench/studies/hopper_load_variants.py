"""Variants of the Hopper kernel's cache loads (design log steps 47-48), written as text edits of
the shipped ``kernels/gluon/decode.py`` so that each differs from it in one idea only.

``write_variants(outdir)`` writes one module per variant into ``outdir`` (a copy of decode.py with
absolute imports and the edit) and returns their paths; ``hopper_variants.py`` and
``hopper_timeline.py`` take such paths as MODULE arguments. An edit whose anchor no longer stands
alone in the shipped source (or no longer starts a line, for an indented anchor) fails, so a
variant never silently edits something else.

- ``noload``: the next tile's loads masked off (every tile decodes zeros: wrong by design, a bound).
- ``cg``: the raw loads with the ``.cg`` cache modifier (no L1 allocation).
- ``late2``: fp8's next-tile loads issued after P^T is stored instead of after the tile maximum.
- ``afterfence``: fp8's next-tile loads issued after P^T's store and its proxy fence (ncu, ninth
  session: ``fence.proxy.async`` waits for the loads issued before it).
- ``late3``: fp8's next-tile loads issued after the value products (the next tile's decode then
  waits for them, which the L2 prefetch is meant to make short).
- ``pf3``: the fp8 L2 prefetch three tiles ahead instead of two (contiguous caches).
- ``cp4``, ``cp6``: fp8's next-tile chunks 0-3 (0-5) copied by ``cp.async`` into 16 (24) KB of
  shared memory (no registers, no register scoreboard), the other chunks register loads as shipped.
- ``mxcp``: MXFP4's next-tile code words copied by ``cp.async`` into shared memory (18 KB) instead
  of registers (the tile carried in registers: 54 -> 18), each chunk read back when its copy group
  is done (ninth session: ncu finds MXFP4 latency-bound at 255 registers); ``mxcp2``: the same
  with each chunk's words read one chunk ahead.
- ``before``: the shipped kernel of ``b03fc5a``, before the L2 prefetch (``git show``).

Made the shipped kernel, so no longer variants here: ``l2pf`` (the L2 prefetch,
``paging.prefetch_rows``; this file at ``b03fc5a`` has it) and ``late1`` (the loads after the tile
maximum, fp8 only). Round 3 of step 48 timed this file as of ``982e0da`` applied to the kernel of
``6ec12f3``, whose loads were still inside the chunk loop for both formats.
"""

import os
import re
import subprocess

import mixmla.kernels.gluon.decode as shipped

HERE = os.path.dirname(os.path.abspath(__file__))

IMPORTS = [
    ("from ..constants import", "from mixmla.kernels.constants import"),
    ("from . import fp8, mxfp4, paging", "from mixmla.kernels.gluon import fp8, mxfp4, paging"),
    ("from . import mxfp4, paging", "from mixmla.kernels.gluon import mxfp4, paging"),
    ("from .layouts import", "from mixmla.kernels.gluon.layouts import"),
]

NEXT_TILE = ("row_off, sc_off, ok = _tile_rows(FORMAT, PAGED, first_row, kv_len, t + 1, t + 1 < t_end, page,")

CG_HELPER = '''

@gluon.jit
def _load_chunk(FORMAT: gl.constexpr, kv_ptr, sc_ptr, row_off, sc_off, ok, C: gl.constexpr):
    if FORMAT == FMT_MXFP4:
        word_l: gl.constexpr = chunk_word_layout(2)
        sc_l: gl.constexpr = gl.SliceLayout(2, mxfp4.mxfp4_scale_layout())
        cols = gl.arange(0, 8, layout=gl.SliceLayout(0, word_l))
        codes = gl.load(kv_ptr + row_off[:, None] + (8 * C + cols)[None, :], mask=ok[:, None], other=0,
                        cache_modifier=".cg")
        blk = gl.arange(0, 2, layout=gl.SliceLayout(0, sc_l))
        sc_rows = gl.convert_layout(sc_off, gl.SliceLayout(1, sc_l), assert_trivial=True)
        sc_ok = gl.convert_layout(ok, gl.SliceLayout(1, sc_l), assert_trivial=True)
        scale = gl.inline_asm_elementwise(mxfp4.SCALE_LOAD_ASM, "=r,l,r",
                                          [sc_ptr + sc_rows[:, None] + (2 * C + blk)[None, :],
                                           sc_ok[:, None].to(gl.int32)], dtype=gl.int32, is_pure=True, pack=1)
        return codes, scale
    else:
        word_l: gl.constexpr = chunk_word_layout(4)
        cols = gl.arange(0, 16, layout=gl.SliceLayout(0, word_l))
        return gl.load(kv_ptr + row_off[:, None] + (16 * C + cols)[None, :], mask=ok[:, None], other=0,
                       cache_modifier=".cg")

'''


#: ``cp4``: chunks 0-3 of the next fp8 tile copied by ``cp.async`` (no registers) into a 16 KB buffer.
CP4_HELPERS = """

#: fp8 chunks of the next tile that ``cp.async`` copies into shared memory (the rest: register loads).
CP_CHUNKS = gl.constexpr(CP_COUNT)


@gluon.jit
def _copy_chunks(raw_smem, kv_ptr, row_off, ok):
    # Each thread copies the words it will read (chunk_word_layout), 16 bytes per row.
    word_l: gl.constexpr = chunk_word_layout(4)
    cols = gl.arange(0, 16, layout=gl.SliceLayout(0, word_l))
    for c in gl.static_range(CP_CHUNKS):
        async_copy.async_copy_global_to_shared(raw_smem[c], kv_ptr + row_off[:, None] + (16 * c + cols)[None, :],
                                               mask=ok[:, None])
    async_copy.commit_group()


@gluon.jit
def _load_rest(FORMAT: gl.constexpr, kv_ptr, sc_ptr, row_off, sc_off, ok):
    raw = ()
    for c in gl.static_range(CP_CHUNKS, NUM_CHUNKS):
        raw = raw + (_load_chunk(FORMAT, kv_ptr, sc_ptr, row_off, sc_off, ok, c), )
    return raw

"""


def _edit(src, old, new):
    assert src.count(old) == 1, old
    at = src.index(old)
    assert not old.startswith(" ") or at == 0 or src[at - 1] == "\n", f"anchor not at a line start: {old!r}"
    return src.replace(old, new)


def absolute_imports(src):
    """A kernel source of ``kernels/gluon/`` with its relative imports made absolute, so that a copy
    of it imports from anywhere."""
    for a, b in IMPORTS:
        src = src.replace(a, b)
    return src


#: The shipped loop's softmax step (``decode._softmax_tile``) written out in the loop again, for studies
#: that edit or probe its parts (``inline_softmax``).
INLINE_SOFTMAX = (
    "                p, m_i, l_acc, scaled = _softmax_tile(st, qk, t * TILE + r_s, kv_len, last_visible, m_i, l_acc, acc,\n"
    "                                                      red_smem, ROWS)\n",
    "                pos = t * TILE + r_s\n"
    "                visible = (pos[:, None] < kv_len) & (pos[:, None] <= last_visible[None, :])\n"
    "                s = gl.where(visible, st * qk[None, :], float(\"-inf\"))\n"
    "                m_new = gl.maximum(m_i, _tile_max(s, red_smem, ROWS))\n"
    "                m_safe = gl.where(m_new == float(\"-inf\"), 0.0, m_new)\n"
    "                p = gl.exp2(s - m_safe[None, :])\n"
    "                alpha = gl.exp2(m_i - m_safe)\n"
    "                l_acc = l_acc * alpha[None, :] + p\n"
    "                m_i = m_new\n"
    "                scaled = ()\n"
    "                for c in gl.static_range(VALUE_CHUNKS):\n"
    "                    scaled = scaled + (acc[c] * alpha[None, :], )\n")


def inline_softmax(src):
    """A ``decode.py`` source with its ``_softmax_tile`` call written out as the loop's own lines
    (sources from before the step became a helper are returned as they are)."""
    if src.count(INLINE_SOFTMAX[0]) == 1:
        src = src.replace(*INLINE_SOFTMAX)
    return src

#: fp8's next-tile loads in the shipped loop: after the tile maximum, with the comment saying why.
FP8_LOADS = re.compile(r"                if FORMAT == FMT_FP8:\n(?:                    #[^\n]*\n)*"
                       r"                    raw = _load_tile\(FORMAT, kv_ptr, sc_ptr, row_off, sc_off, ok\)\n")
FP8_LOADS_PLAIN = ("                if FORMAT == FMT_FP8:\n"
                   "                    raw = _load_tile(FORMAT, kv_ptr, sc_ptr, row_off, sc_off, ok)\n")


def _move_fp8_loads(src, after):
    """``src`` with fp8's next-tile loads moved from after the tile maximum to after ``after``."""
    assert len(FP8_LOADS.findall(src)) == 1
    return _edit(FP8_LOADS.sub("", src), after, after + FP8_LOADS_PLAIN)


def _cp4(base, count=4):
    """``cp4``: fp8's next-tile chunks 0-3 (``count`` of them) copied by ``cp.async`` into shared
    buffers of 4 KB each during the current tile's chunk loop (after its own are read from them),
    the other chunks register loads after the maximum as shipped; MXFP4 unchanged."""
    s = _edit(base, "from mixmla.kernels.gluon.layouts import (CHUNK,",
              "from triton.experimental.gluon.language.nvidia.ampere import async_copy\n"
              "from mixmla.kernels.gluon.layouts import (chunk_word_layout, CHUNK,")
    s = _edit(s, "\n\n@gluon.jit\ndef _decode_chunk(",
              CP4_HELPERS.replace("CP_COUNT", str(count)) + "\n@gluon.jit\ndef _decode_chunk(")
    # One buffer per chunk, as the value buffers: slices of one buffer would get a barrier
    # between consecutive chunks' copies from the shared-memory hazard analysis.
    s = _edit(s, "    p_all = gl.allocate_shared_memory(",
              "    raw_smem = ()\n"
              "    for c in gl.static_range(CP_CHUNKS if FORMAT == FMT_FP8 else 1):\n"
              "        raw_smem = raw_smem + (gl.allocate_shared_memory(gl.int32, [TILE, 16],\n"
              "                                                         gl.SwizzledSharedLayout(1, 1, 1, [1, 0])), )\n"
              "    p_all = gl.allocate_shared_memory(")
    s = _edit(s, "\n            raw = _load_tile(FORMAT, kv_ptr, sc_ptr, row_off, sc_off, ok)\n            page = ",
              "\n            if FORMAT == FMT_FP8:\n"
              "                _copy_chunks(raw_smem, kv_ptr, row_off, ok)\n"
              "                raw = _load_rest(FORMAT, kv_ptr, sc_ptr, row_off, sc_off, ok)\n"
              "            else:\n"
              "                raw = _load_tile(FORMAT, kv_ptr, sc_ptr, row_off, sc_off, ok)\n            page = ")
    s = _edit(s, "                    keys = to_key_operand(_decode_chunk(FORMAT, raw[c], tables), ROWS)\n",
              "                    if FORMAT == FMT_FP8:\n"
              "                        if c < CP_CHUNKS:\n"
              "                            if c == 0:\n"
              "                                async_copy.wait_group(0)\n"
              "                            words = raw_smem[c].load(chunk_word_layout(4))\n"
              "                        else:\n"
              "                            words = raw[c - CP_CHUNKS]\n"
              "                        keys = to_key_operand(_decode_chunk(FORMAT, words, tables), ROWS)\n"
              "                        if c == CP_CHUNKS - 1:\n"
              "                            _copy_chunks(raw_smem, kv_ptr, row_off, ok)\n"
              "                    else:\n"
              "                        keys = to_key_operand(_decode_chunk(FORMAT, raw[c], tables), ROWS)\n")
    # The last tile's copies (of no rows: zero fill) complete before the next request's are issued
    # into the same buffers.
    s = _edit(s, "            acc = warpgroup_mma_wait(0, deps=acc)\n            inv_l, lse2",
              "            if FORMAT == FMT_FP8:\n                async_copy.wait_group(0)\n"
              "            acc = warpgroup_mma_wait(0, deps=acc)\n            inv_l, lse2")
    assert len(FP8_LOADS.findall(s)) == 1
    return FP8_LOADS.sub("                if FORMAT == FMT_FP8:\n"
                         "                    raw = _load_rest(FORMAT, kv_ptr, sc_ptr, row_off, sc_off, ok)\n", s)


#: ``mxcp``: MXFP4's code words go through shared memory by ``cp.async`` (the scales stay register loads).
MXCP_HELPERS = """

@gluon.jit
def _copy_codes(buf, kv_ptr, row_off, ok, C: gl.constexpr):
    # Each thread copies the 8 bytes per row it will read (chunk_word_layout(2)); one group per chunk.
    word_l: gl.constexpr = chunk_word_layout(2)
    cols = gl.arange(0, 8, layout=gl.SliceLayout(0, word_l))
    async_copy.async_copy_global_to_shared(buf, kv_ptr + row_off[:, None] + (8 * C + cols)[None, :], mask=ok[:, None])
    async_copy.commit_group()


@gluon.jit
def _copy_tile(bufs, kv_ptr, row_off, ok):
    for c in gl.static_range(NUM_CHUNKS):
        _copy_codes(bufs[c], kv_ptr, row_off, ok, c)


@gluon.jit
def _load_scales(sc_ptr, sc_row_off, tok_ok, C: gl.constexpr):
    sc_l: gl.constexpr = gl.SliceLayout(2, mxfp4_scale_layout())
    blk = gl.arange(0, 2, layout=gl.SliceLayout(0, sc_l))
    sc_rows = gl.convert_layout(sc_row_off, gl.SliceLayout(1, sc_l), assert_trivial=True)
    sc_ok = gl.convert_layout(tok_ok, gl.SliceLayout(1, sc_l), assert_trivial=True)
    return gl.inline_asm_elementwise(mxfp4.SCALE_LOAD_ASM, "=r,l,r", [sc_ptr + sc_rows[:, None] + (2 * C + blk)[None, :],
                                                                   sc_ok[:, None].to(gl.int32)],
                                     dtype=gl.int32, is_pure=True, pack=1)


@gluon.jit
def _load_scale_tile(sc_ptr, sc_off, ok):
    raw = ()
    for c in gl.static_range(NUM_CHUNKS):
        raw = raw + (_load_scales(sc_ptr, sc_off, ok, c), )
    return raw

"""


def _mxcp(base):
    """``mxcp``: MXFP4's next-tile code words copied by ``cp.async`` into nine 2 KB shared buffers
    (one per chunk, 18 KB) in the chunk loop, after this tile's chunk is read from its buffer; a
    chunk waits for its own copy group (the eight issued after it may still be in flight). The
    scale bytes stay register loads; the tile's prefetched registers drop from 54 to 18. fp8
    unchanged."""
    s = _edit(base, "from mixmla.kernels.gluon.layouts import (CHUNK,",
              "from triton.experimental.gluon.language.nvidia.ampere import async_copy\n"
              "from mixmla.kernels.gluon.layouts import (chunk_word_layout, mxfp4_scale_layout, CHUNK,")
    s = _edit(s, "\n\n@gluon.jit\ndef _decode_chunk(", MXCP_HELPERS + "\n@gluon.jit\ndef _decode_chunk(")
    s = _edit(s, "    p_all = gl.allocate_shared_memory(",
              "    code_bufs = ()\n"
              "    for c in gl.static_range(NUM_CHUNKS if FORMAT == FMT_MXFP4 else 1):\n"
              "        code_bufs = code_bufs + (gl.allocate_shared_memory(gl.int32, [TILE, 8],\n"
              "                                                           gl.SwizzledSharedLayout(1, 1, 1, [1, 0])), )\n"
              "    p_all = gl.allocate_shared_memory(")
    s = _edit(s, "\n            raw = _load_tile(FORMAT, kv_ptr, sc_ptr, row_off, sc_off, ok)\n            page = ",
              "\n            if FORMAT == FMT_MXFP4:\n"
              "                _copy_tile(code_bufs, kv_ptr, row_off, ok)\n"
              "                raw = _load_scale_tile(sc_ptr, sc_off, ok)\n"
              "            else:\n"
              "                raw = _load_tile(FORMAT, kv_ptr, sc_ptr, row_off, sc_off, ok)\n            page = ")
    s = _edit(s, "                    keys = to_key_operand(_decode_chunk(FORMAT, raw[c], tables), ROWS)\n"
                 "                    if FORMAT == FMT_MXFP4:\n"
                 "                        nxt = nxt + (_load_chunk(FORMAT, kv_ptr, sc_ptr, row_off, sc_off, ok, c), )\n",
              "                    if FORMAT == FMT_MXFP4:\n"
              "                        async_copy.wait_group(NUM_CHUNKS - 1)\n"
              "                        codes = code_bufs[c].load(chunk_word_layout(2))\n"
              "                        keys = to_key_operand(mxfp4.decode_chunk(codes, raw[c], tables), ROWS)\n"
              "                        _copy_codes(code_bufs[c], kv_ptr, row_off, ok, c)\n"
              "                        nxt = nxt + (_load_scales(sc_ptr, sc_off, ok, c), )\n"
              "                    else:\n"
              "                        keys = to_key_operand(_decode_chunk(FORMAT, raw[c], tables), ROWS)\n")
    # The last tile's copies (of no rows: zero fill) land before the buffers serve the next
    # request, or before the program exits.
    return _edit(s, "            acc = warpgroup_mma_wait(0, deps=acc)\n            inv_l, lse2",
                 "            if FORMAT == FMT_MXFP4:\n                async_copy.wait_group(0)\n"
                 "            acc = warpgroup_mma_wait(0, deps=acc)\n            inv_l, lse2")


def _mxcp2(base):
    """``mxcp2``: ``mxcp`` with each chunk's code words read from shared memory one chunk ahead
    (chunk c + 1's read issued before chunk c is decoded), so the read's latency is covered."""
    s = _mxcp(base)
    return _edit(s, "                    if FORMAT == FMT_MXFP4:\n"
                    "                        async_copy.wait_group(NUM_CHUNKS - 1)\n"
                    "                        codes = code_bufs[c].load(chunk_word_layout(2))\n"
                    "                        keys = to_key_operand(mxfp4.decode_chunk(codes, raw[c], tables), ROWS)\n",
                 "                    if FORMAT == FMT_MXFP4:\n"
                 "                        if c == 0:\n"
                 "                            async_copy.wait_group(NUM_CHUNKS - 1)\n"
                 "                            codes = code_bufs[0].load(chunk_word_layout(2))\n"
                 "                        if c + 1 < NUM_CHUNKS:\n"
                 "                            async_copy.wait_group(NUM_CHUNKS - 2)\n"
                 "                            ahead = code_bufs[c + 1].load(chunk_word_layout(2))\n"
                 "                        keys = to_key_operand(mxfp4.decode_chunk(codes, raw[c], tables), ROWS)\n"
                 "                        if c + 1 < NUM_CHUNKS:\n"
                 "                            codes = ahead\n")



LDS_HELPER = """

@gluon.jit
def _lds_tile(buf, z):
    # z: an opaque 0 (``_opaque_zero``), so that the nine reads have addresses the compiler cannot
    # prove equal and keeps nine reads and nine decodes.
    raw = ()
    for c in gl.static_range(NUM_CHUNKS):
        raw = raw + (buf.index(z * c).load(chunk_word_layout(4)), )
    return raw

"""


def deeper_prefetch(src):
    """``src`` (the shipped kernel or a variant of it) with fp8's L2 prefetch three tiles ahead
    instead of two."""
    s = _edit(src, "_prefetch_tile(FORMAT, PAGED, kv_ptr, first_row, kv_len, t + 2, t + 2 < t_end, page2,",
              "_prefetch_tile(FORMAT, PAGED, kv_ptr, first_row, kv_len, t + 3, t + 3 < t_end, page2,")
    pro = ("                _prefetch_tile(FORMAT, PAGED, kv_ptr, first_row, kv_len, t_begin + 1, t_begin + 1 < t_end, page,\n"
           "                               num_pages, page_shift, kv_stride)\n")
    return _edit(s, pro, pro + pro.replace("t_begin + 1", "t_begin + 2"))


def _ldsbound(base):
    """``ldsbound`` (a bound, wrong by design): fp8's raw tiles read from shared memory instead of
    global memory, what a kernel whose copy engine staged them would read: the nine chunks of every
    tile come from one 4 KB buffer of zeros (the same ``ld.shared`` count and bytes per thread as a
    staged 36 KB tile, conflict-free), and the L2 prefetch of the rows stays, so DRAM is still read.
    MXFP4 unchanged."""
    s = _edit(base, "from mixmla.kernels.gluon.layouts import (CHUNK,", "from mixmla.kernels.gluon.layouts import (chunk_word_layout, CHUNK,")
    s = _edit(s, "\n\n@gluon.jit\ndef _decode_chunk(", LDS_HELPER + "\n@gluon.jit\ndef _decode_chunk(")
    s = _edit(s, "    p_all = gl.allocate_shared_memory(",
              "    raw_buf = gl.allocate_shared_memory(gl.int32, [1, TILE, 16], gl.SwizzledSharedLayout(1, 1, 1, [1, 0]))\n"
              "    raw_buf.index(0).store(gl.zeros([TILE, 16], gl.int32, chunk_word_layout(4)))\n"
              "    p_all = gl.allocate_shared_memory(")
    s = _edit(s, "            raw = _load_tile(FORMAT, kv_ptr, sc_ptr, row_off, sc_off, ok)\n            page = ",
              "            if FORMAT == FMT_FP8:\n                raw = _lds_tile(raw_buf, _opaque_zero(t_begin))\n"
              "            else:\n                raw = _load_tile(FORMAT, kv_ptr, sc_ptr, row_off, sc_off, ok)\n            page = ")
    assert len(FP8_LOADS.findall(s)) == 1
    return FP8_LOADS.sub("                if FORMAT == FMT_FP8:\n                    raw = _lds_tile(raw_buf, _opaque_zero(t))\n", s)


def variant_sources():
    base = absolute_imports(open(shipped.__file__).read())
    out = {}
    out["noload"] = _edit(base, NEXT_TILE, NEXT_TILE.replace("t + 1 < t_end, page,", "t_end < 0, page,"))
    s = _edit(base, "\n\n@gluon.jit\ndef _decode_chunk(", CG_HELPER + "\n@gluon.jit\ndef _decode_chunk(")
    s = _edit(s, "@gluon.jit\ndef _load_chunk(FORMAT: gl.constexpr, kv_ptr, sc_ptr, row_off, sc_off, ok, C: gl.constexpr):\n"
              "    if FORMAT == FMT_MXFP4:\n        return mxfp4.load_chunk",
              "@gluon.jit\ndef _load_chunk_shipped(FORMAT: gl.constexpr, kv_ptr, sc_ptr, row_off, sc_off, ok, C: gl.constexpr):\n"
              "    if FORMAT == FMT_MXFP4:\n        return mxfp4.load_chunk")
    s = _edit(s, "from mixmla.kernels.gluon.layouts import (CHUNK,", "from mixmla.kernels.gluon.layouts import (chunk_word_layout, CHUNK,")
    out["cg"] = s
    out["late2"] = _move_fp8_loads(base, "                p_smem.store(p.to(MMA_DT))\n")
    out["late3"] = _move_fp8_loads(base, "scaled[c], is_async=True), )\n")
    out["afterfence"] = _move_fp8_loads(base, "                p_smem.store(p.to(MMA_DT))\n                fence_async_shared()\n")
    out["pf3"] = deeper_prefetch(base)
    # ``latepf``: a piece's first prefetch (tile t_begin + 1, fp8) issued after the query is staged,
    # so that the query's and the first tile's loads do not queue behind it at the piece's start.
    pre = ("            if PAGED == 0:  # paged: tile t_begin + 1's entries were only just asked for\n"
           "                _prefetch_tile(FORMAT, PAGED, kv_ptr, first_row, kv_len, t_begin + 1, t_begin + 1 < t_end, page,\n"
           "                               num_pages, page_shift, kv_stride)\n")
    stage = "            q_mult = _stage_query(FORMAT, q_smem, q_rows, ROWS)\n"
    out["latepf"] = _edit(_edit(base, pre, ""), stage, stage + pre)
    out["ldsbound"] = _ldsbound(base)
    out["cp4"] = _cp4(base)
    out["cp6"] = _cp4(base, 6)
    out["mxcp"] = _mxcp(base)
    out["mxcp2"] = _mxcp2(base)
    old = subprocess.run(["git", "show", "b03fc5a:src/mixmla/kernels/gluon/decode.py"], capture_output=True, text=True,
                         cwd=HERE)
    if old.returncode == 0:  # a copy of the tree without its git history has no "before"
        out["before"] = absolute_imports(old.stdout)
    return out


def write_variants(outdir, names=None):
    os.makedirs(outdir, exist_ok=True)
    paths = []
    for name, src in variant_sources().items():
        if names and name not in names:
            continue
        path = os.path.join(outdir, f"var_{name}.py")
        open(path, "w").write(src)
        paths.append(path)
    return paths


if __name__ == "__main__":
    import sys
    print("\n".join(write_variants(sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "_gen"))))
