"""MXFP4 in pages smaller than a tile: the L2 line prefetch one tile further ahead (a text edit of the
shipped ``kernels/gluon/decode.py``; issue 14's page-1 bar; twenty-ninth session, not yet timed).

Design log step 118 compiles into pages smaller than a tile (``KernelSpec.SMALL_PAGES``) an L2
line prefetch of the rows of the tile after next; measured (twenty-ninth session, H100 SXM) it took
256x8192 at page 1 from x1.27 to x1.22 of contiguous, where step 112 had predicted x1.19 and page
64 stays at 1.00-1.02. If the rows' DRAM latency is what is left, asking for them a tile earlier
gives it more time to pass: ``pf3`` prefetches the rows of tile t + 3 instead of t + 2, from the
page entries the loop already holds for that tile (``page2``, read three tiles ahead). Compiled
(CPU, sm_90a, 16 heads, block table and CSR, small pages): tile loop 1371 instructions against the
shipped 1377, the same four line prefetches (``CCTL``), no spill. The loaded bytes and the arithmetic are unchanged: outputs are the shipped bits.

Predicted (256x8192, page 1): if latency binds, x1.22 -> about x1.15 (another third of step 118's
gain per tile of distance, less what a line evicted before its use costs: four tiles of prefetched
rows are 78 KB per program in a 50 MB L2, so eviction is unlikely); if not, within 1% of shipped.
Contiguous caches and pages of at least a tile compile to the shipped code.

    TRITON_INTERPRET=0 python bench/studies/hopper_pfdist_variant.py OUTDIR --compile   # write var_pf3.py, compile (CPU)
    python bench/studies/hopper_variants.py OUT OUTDIR/var_pf3.py --shapes 256x8192,64x8192 --paged 1,64  # (GPU)
"""

import sys

import mixmla.kernels.gluon.decode as shipped

from hopper_load_variants import _edit, absolute_imports
from hopper_variants import print_compile_facts, write_source


def variant_source() -> str:
    src = absolute_imports(open(shipped.__file__).read())
    src = _edit(src, "                    pf_off, pf_sc, pf_ok = _tile_rows(PAGED, first_row, kv_len, t + 2, t + 2 < t_end, page, num_pages,\n",
                "                    pf_off, pf_sc, pf_ok = _tile_rows(PAGED, first_row, kv_len, t + 3, t + 3 < t_end, page2, num_pages,\n")
    return src + '\nFORMATS = ("mxfp4", )\n'


def write_variant(outdir: str) -> list[str]:
    return [write_source(outdir, "var_pf3.py", variant_source())]


if __name__ == "__main__":
    for out in write_variant(sys.argv[1] if len(sys.argv) > 1 else "bench/out/pfdist"):
        print(out)
        if "--compile" in sys.argv:
            print_compile_facts(out, [(2, 0), (2, 1), (2, 1, True), (2, 2, True)], ops=("CCTL", "HGMMA", "LDG"))
