"""What the MXFP4 loop's per-tile maximum costs: a bound, as a text edit of the shipped
``kernels/gluon/decode.py`` (issue 13; twenty-eighth session; timed in the twenty-ninth, design log
step 119: 2.3-2.7% under shipped at 256x8192, 9-10% on step 77's f16 decode).

Every tile of the shipped loop finds its scores' column maxima across the warpgroup's four warps
(``decode._tile_max``: shuffles within each warp, a shared-memory exchange and a barrier of the
four), because the scores' tokens lie in the matrix unit's M slot, spread over the warps. Steps 116
and 117 found that neither ordering an SM's two instruction streams nor more warps per scheduler
(at 47% more instructions) moves the loop; what each warpgroup waits for once per tile is this
exchange (and P^T's store before the value products).
``fixedmax`` replaces the tile's maximum by the constant 16: with no tile maximum above it the
running maximum is 16 throughout, every rescale factor 1, and the softmax is exact in real
arithmetic (a constant shift); the random test inputs' scores (times log2 e) stay far below 16, so
outputs pass the strict check there, but a score above about 16 + 127 would overflow: wrong by
design in general, a bound like ``hopper_load_variants``' ``noload``. It removes the exchange, its
barrier and the shuffles, and leaves every other instruction. Compiled (CPU, sm_90a, 16 heads,
contiguous): tile loop 1246 instructions against 1320 (two barriers against three, no shuffles,
no `STS`/`LDS`), 255 registers, no spill.

Predicted (256x8192, H100 SXM, shipped 403-411 us): within 2% if the SM's two programs already
cover the exchange; 10-15% faster if the warpgroup's four warps meeting once per tile is what
holds the loop (5.6% fewer instructions alone would give at most about that much, step 117 having
found the time close to proportional to the instructions issued).

    TRITON_INTERPRET=0 python bench/studies/hopper_fixedmax_variant.py OUTDIR --compile   # write, compile (CPU)
    python bench/studies/hopper_variants.py OUT OUTDIR/var_fixedmax.py --shapes 256x8192,64x8192,32x1024  # (GPU)
"""

import sys

import mixmla.kernels.gluon.decode as shipped

import hopper_mxf16_variant

from hopper_load_variants import _edit, absolute_imports
from hopper_variants import print_compile_facts, write_source


def fixed_max(src: str) -> str:
    """``src`` (a form of ``decode.py``) with the tile maximum replaced by the constant 16, MXFP4 only."""
    return _edit(src, "    m_new = gl.maximum(m_i, _tile_max(s, red_smem, ROWS))\n",
                 "    m_new = gl.maximum(m_i, gl.full([ROWS], 16.0, gl.float32, gl.SliceLayout(0, score_layout(ROWS))))\n"
                 ) + '\nFORMATS = ("mxfp4", )\n'


def variant_source() -> str:
    return fixed_max(absolute_imports(open(shipped.__file__).read()))


def write_variant(outdir: str) -> list[str]:
    """``var_fixedmax.py`` and ``var_fixedmax_f16.py`` (the same bound on step 77's f16 decode,
    ``hopper_mxf16_variant``: does the decode's saving come back once the exchange is gone?)."""
    return [write_source(outdir, "var_fixedmax.py", variant_source()),
            write_source(outdir, "var_fixedmax_f16.py", fixed_max(hopper_mxf16_variant.variant_source()))]


if __name__ == "__main__":
    for out in write_variant(sys.argv[1] if len(sys.argv) > 1 else "bench/out/fixedmax"):
        print(out)
        if "--compile" in sys.argv:
            print_compile_facts(out, [(2, 0)], ops=("BAR", "SHFL", "STS", "LDS", "HGMMA"))
