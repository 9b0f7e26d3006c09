"""Variants of the Hopper kernel's cache loads (design log step 47), written as text edits of the
shipped ``kernels/gluon/decode.py`` so that each differs from it in one idea only.

``write_variants(outdir)`` writes one module per variant into ``outdir`` (a copy of decode.py with
absolute imports and the edit) and returns their paths; ``hopper_variants.py`` and
``hopper_timeline.py`` take such paths as MODULE arguments.

- ``noload``: the next tile's loads masked off (every tile decodes zeros: wrong by design, a bound).
- ``l2pf``: tile t+2's rows (and MXFP4 scale rows) prefetched into L2 with one bulk prefetch each
  while tile t runs (contiguous caches), so that tile t+1's register loads hit L2.
- ``cg``: the raw loads with the ``.cg`` cache modifier (no L1 allocation).
"""

import os

import mixmla.kernels.gluon.decode as shipped

HERE = os.path.dirname(os.path.abspath(__file__))

IMPORTS = [
    ("from ..constants import", "from mixmla.kernels.constants import"),
    ("from . import fp8, mxfp4, paging", "from mixmla.kernels.gluon import fp8, mxfp4, paging"),
    ("from .layouts import", "from mixmla.kernels.gluon.layouts import"),
]

NEXT_TILE = ("row_off, sc_off, ok = _tile_rows(FORMAT, PAGED, first_row, kv_len, t + 1, t + 1 < t_end, page,")

L2PF_HELPER = '''

@gluon.jit
def _prefetch_l2(FORMAT: gl.constexpr, kv_ptr, kv_stride, sc_ptr, sc_stride, first, kv_len, t, live):
    """Thread 0 prefetches tile t's cache rows, thread 32 its MXFP4 scale rows, into L2 (one bulk
    prefetch each; contiguous rows)."""
    one: gl.constexpr = gl.BlockedLayout([1], [32], [4], [0])
    tid = gl.arange(0, 128, layout=one)
    n = gl.where(live, gl.minimum(kv_len - t * TILE, TILE), 0).to(gl.int64)
    row0 = (first + t * TILE).to(gl.int64)
    kv_addr = kv_ptr.to(gl.int64, bitcast=True) + row0 * kv_stride * 4
    kv_size = n * kv_stride * 4
    sc_lo = (sc_ptr.to(gl.int64, bitcast=True) + row0 * sc_stride) & -16
    sc_hi = (sc_ptr.to(gl.int64, bitcast=True) + (row0 + n) * sc_stride) & -16
    zero = gl.zeros([128], gl.int64, one)
    addr = gl.where(tid == 32, sc_lo + zero, kv_addr + zero)
    size = gl.where(tid == 0, kv_size + zero, gl.where((tid == 32) & (FORMAT == FMT_MXFP4), sc_hi - sc_lo + zero, 0))
    gl.inline_asm_elementwise(
        "{ .reg .pred p; setp.ne.u32 p, $2, 0; @p cp.async.bulk.prefetch.L2.global [$1], $2; mov.u32 $0, 0; }",
        "=r,l,r", [addr, size.to(gl.int32)], dtype=gl.int32, is_pure=False, pack=1)

'''

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


def _edit(src, old, new):
    assert src.count(old) == 1, old
    return src.replace(old, new)


def variant_sources():
    base = open(shipped.__file__).read()
    for a, b in IMPORTS:
        base = _edit(base, a, b)
    out = {}
    out["noload"] = _edit(base, NEXT_TILE, NEXT_TILE.replace("t + 1 < t_end, page,", "t_end < 0, page,"))
    s = _edit(base, "\n\n@gluon.jit\ndef _tile_max(", L2PF_HELPER + "\n@gluon.jit\ndef _tile_max(")
    s = _edit(s, "            q_mult = _stage_query(",
              "            if PAGED == 0:\n"
              "                _prefetch_l2(FORMAT, kv_ptr, kv_stride, sc_ptr, sc_stride, first_row, kv_len, t_begin + 1,\n"
              "                             t_begin + 1 < t_end)\n"
              "            q_mult = _stage_query(")
    s = _edit(s, "                nxt = ()\n",
              "                if PAGED == 0:\n"
              "                    _prefetch_l2(FORMAT, kv_ptr, kv_stride, sc_ptr, sc_stride, first_row, kv_len, t + 2,\n"
              "                                 t + 2 < t_end)\n"
              "                nxt = ()\n")
    out["l2pf"] = s
    s = _edit(base, "\n\n@gluon.jit\ndef _decode_chunk(", CG_HELPER + "\n@gluon.jit\ndef _decode_chunk(")
    s = _edit(s, "@gluon.jit\ndef _load_chunk(FORMAT: gl.constexpr, kv_ptr, sc_ptr, row_off, sc_off, ok, C: gl.constexpr):\n"
              "    if FORMAT == FMT_MXFP4:\n        return mxfp4.load_chunk",
              "@gluon.jit\ndef _load_chunk_shipped(FORMAT: gl.constexpr, kv_ptr, sc_ptr, row_off, sc_off, ok, C: gl.constexpr):\n"
              "    if FORMAT == FMT_MXFP4:\n        return mxfp4.load_chunk")
    s = _edit(s, "from mixmla.kernels.gluon.layouts import (CHUNK,", "from mixmla.kernels.gluon.layouts import (chunk_word_layout, CHUNK,")
    out["cg"] = s
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
