"""MXFP4 in pages: an L2 line prefetch of the tile after next's rows (a text edit of the shipped
``kernels/gluon/decode.py``; issue 14's page-1 bar; twenty-seventh session).

The shipped MXFP4 kernel loads a tile's rows one tile ahead, into registers, one row address per
token whatever the page size, so pages of 1 and 64 tokens run the same instructions; yet at page 1
it takes 1.14-1.27x its contiguous time on the large shapes (H100 SXM, design log steps 109-110),
against 1.00-1.03 at page 64, and a pool holding each token's codes and scales in one row takes
back only 2-4% of that (step 110). So what page 1 pays is the rows' latency when every 306 bytes
leave a DRAM page, which a load one tile ahead does not cover. The page entries are read three
tiles ahead already (``paging``: the tile after next's entries are in registers when a tile
starts), so here each tile also asks L2 for the rows of the tile after next: lane q of a row's
four (``paging.chunk_rows(2)``) prefetches byte ``min(96 q, 287)`` of the code row (every 128-byte
line the 288 bytes touch gets one), lanes 0 and 1 the first and last byte of the scale row. Only
the paged forms change (``PAGED != 0`` is a compile-time branch); contiguous code is the shipped
one. The loaded bytes and the arithmetic are unchanged, so outputs are the shipped kernel's bits.

Predicted: if the rows' latency binds at page 1, page 1 moves toward page 64 (256x8192: 1.27 ->
1.05-1.15); the prefetches cost about 10 instructions per tile and thread, so page 64 within 1-2%
of the shipped kernel; if nothing changes at page 1, latency is not what it pays either.

Landed for pages smaller than a tile only (design log step 118: ``mxfp4.prefetch_rows`` under
``KernelSpec.SMALL_PAGES``), so on today's ``decode.py`` this edit adds a second prefetch there:
run it at step 112's commit (``bench/studies/README.md``).

    TRITON_INTERPRET=0 python bench/studies/hopper_mxpf_variant.py OUTDIR --compile   # write var_mxpf.py, registers, spills
    python bench/studies/hopper_variants.py OUT OUTDIR/var_mxpf.py --paged 1,64       # time it (GPU)
"""

import sys

import mixmla.kernels.gluon.decode as shipped

from hopper_load_variants import _edit, absolute_imports
from hopper_variants import print_compile_facts, write_source

_HELPER = '''

@gluon.jit
def _prefetch_rows(kv_ptr, kv_stride, sc_ptr, sc_stride, first, kv_len, t, live, page, num_pages, page_shift):
    """L2 line prefetches of tile ``t``'s code and scale rows (pages only; ``page``: its entries)."""
    row, ok = paging.tile_rows(paging.chunk_rows(2), first, kv_len, t, live, page, num_pages, page_shift, 1)
    wide = row.to(gl.int64)
    gl.inline_asm_elementwise(
        "{ .reg .pred p, q; .reg .u32 ln; .reg .u64 o, a; mov.u32 ln, %laneid; and.b32 ln, ln, 3; "
        "setp.ne.u32 p, $3, 0; mul.wide.u32 o, ln, 96; min.u64 o, o, 287; add.u64 a, $1, o; "
        "@p prefetch.global.L2 [a]; setp.lt.and.u32 q, ln, 2, p; mul.wide.u32 o, ln, 17; add.u64 a, $2, o; "
        "@q prefetch.global.L2 [a]; mov.u32 $0, 0; }",
        "=r,l,l,r", [(kv_ptr + wide * kv_stride).to(gl.pointer_type(gl.uint8), bitcast=True), sc_ptr + wide * sc_stride,
                     ok.to(gl.int32)], dtype=gl.int32, is_pure=False, pack=1)
'''


def variant_source() -> str:
    src = absolute_imports(open(shipped.__file__).read())
    src = _edit(src, "\n\n@gluon.jit\ndef _load_tile(", _HELPER + "\n\n@gluon.jit\ndef _load_tile(")
    src = _edit(src, """                page = page2
                page2 = _tile_pages(PAGED, pages_ptr, first_row, kv_len, t + 3, t + 3 < t_end, page_shift)
""", """                page = page2
                page2 = _tile_pages(PAGED, pages_ptr, first_row, kv_len, t + 3, t + 3 < t_end, page_shift)
                if PAGED != 0:
                    _prefetch_rows(kv_ptr, kv_stride, sc_ptr, sc_stride, first_row, kv_len, t + 2, t + 2 < t_end,
                                   page, num_pages, page_shift)
""")
    return src + '\nFORMATS = ("mxfp4", )\n'


#: ``mxpfc``: the tile after next's row offsets computed once, for its prefetch and (carried to the
#: next iteration) its loads, instead of again a tile later; with pages only, as ``mxpf``.
_CARRY_HELPER = _HELPER.replace(
    """    row, ok = paging.tile_rows(paging.chunk_rows(2), first, kv_len, t, live, page, num_pages, page_shift, 1)
    wide = row.to(gl.int64)
""", "").replace("(kv_ptr, kv_stride, sc_ptr, sc_stride, first, kv_len, t, live, page, num_pages, page_shift)",
                 "(kv_ptr, row_off, sc_ptr, sc_off, ok)").replace(
    "(kv_ptr + wide * kv_stride).to(", "(kv_ptr + row_off).to(").replace("sc_ptr + wide * sc_stride", "sc_ptr + sc_off")


def carried_source() -> str:
    src = absolute_imports(open(shipped.__file__).read())
    src = _edit(src, "\n\n@gluon.jit\ndef _load_tile(", _CARRY_HELPER + "\n\n@gluon.jit\ndef _load_tile(")
    src = _edit(src, """            page = _tile_pages(PAGED, pages_ptr, first_row, kv_len, t_begin + 1, t_begin + 1 < t_end, page_shift)
            page2 = _tile_pages(PAGED, pages_ptr, first_row, kv_len, t_begin + 2, t_begin + 2 < t_end, page_shift)
""", """            page = _tile_pages(PAGED, pages_ptr, first_row, kv_len, t_begin + 1, t_begin + 1 < t_end, page_shift)
            page2 = _tile_pages(PAGED, pages_ptr, first_row, kv_len, t_begin + 2, t_begin + 2 < t_end, page_shift)
            n_row, n_sc, n_ok = _tile_rows(PAGED, first_row, kv_len, t_begin + 1, t_begin + 1 < t_end, page, num_pages,
                                           page_shift, kv_stride, sc_stride)
""")
    src = _edit(src, """                row_off, sc_off, ok = _tile_rows(PAGED, first_row, kv_len, t + 1, t + 1 < t_end, page, num_pages,
                                                 page_shift, kv_stride, sc_stride)
                page = page2
                page2 = _tile_pages(PAGED, pages_ptr, first_row, kv_len, t + 3, t + 3 < t_end, page_shift)
""", """                row_off, sc_off, ok = n_row, n_sc, n_ok
                n_row, n_sc, n_ok = _tile_rows(PAGED, first_row, kv_len, t + 2, t + 2 < t_end, page2, num_pages,
                                               page_shift, kv_stride, sc_stride)
                page2 = _tile_pages(PAGED, pages_ptr, first_row, kv_len, t + 3, t + 3 < t_end, page_shift)
                if PAGED != 0:
                    _prefetch_rows(kv_ptr, n_row, sc_ptr, n_sc, n_ok)
""")
    return src + '\nFORMATS = ("mxfp4", )\n'


def write_variant(outdir: str) -> list[str]:
    return [write_source(outdir, "var_mxpf.py", variant_source()), write_source(outdir, "var_mxpfc.py", carried_source())]


if __name__ == "__main__":
    for out in write_variant(sys.argv[1] if len(sys.argv) > 1 else "bench/out/mxpf"):
        print(out)
        if "--compile" in sys.argv:
            print_compile_facts(out, [(2, 0), (2, 1)], ops=("CCTL", "LDG", "HGMMA"))
