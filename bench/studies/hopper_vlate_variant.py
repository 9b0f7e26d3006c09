"""MXFP4's value products left running into the next tile's decode (a text edit of the shipped
``kernels/gluon/decode.py``; issue 13; prepared in the twenty-second session, not timed yet).

Shipped: a tile ends by issuing its eight value products (``O^T += V_c^T P^T``, chunk c's value
columns from the shared value buffer ``v_bufs[c]``), and the next tile starts by waiting for all
of them, because its decode writes the same buffers. So the value products (32 m64n16k16 with A
from shared memory, about 640 tensor cycles) run while the program only computes the next tile's
row addresses. Here the wait moves to where each buffer is rewritten: chunk 0's keys are decoded
(registers only) before waiting for the first value product alone (``warpgroup_mma_wait(7)``: the
seven later ones may run on), chunk 1's before waiting for the second (the six after it and the
first score product may run on); from chunk 1's score product on, the shipped loop's wait for the
previous score product waits for every value product too (the groups complete in order). So the
value products overlap the decode of two key chunks, with the same registers held (the
accumulators are live across the decode in both).

Two forms: ``one`` waits for all eight once chunk 0's keys are decoded; ``two`` waits for the
first two one by one as above. Predicted: 0-9% less at 256x8192 (406 us): up to about 500 of a
program's 5260 cycles per tile if its tile is one serial chain, less where the SM's other program
already fills that time; the same bits (same products in the same order).

Found on the CPU (``--compile``; design log step 102), so neither was timed: ``one`` compiles to
the shipped kernel's tile loop instruction for instruction (1320, the wait first: the compiler
moves chunk 0's decode after it), and in ``two`` ptxas serializes every matrix product of the
kernel (warning C7514, "non wgmma instructions reading accumulator registers of a wgmma between
start and end of the pipeline stage"; a ``WARPGROUP.ARRIVE`` and ``DEPBAR`` around each of the
loop's 68 ``HGMMA``, 1429 instructions): accumulators in flight across the decode are not
something ptxas lets run on.

    python bench/studies/hopper_vlate_variant.py OUTDIR --compile     # write var_vlate.py, registers, spills
    python bench/studies/hopper_variants.py OUT OUTDIR/var_vlate.py   # time it against the shipped kernel (GPU)
"""

import sys

import mixmla.kernels.gluon.decode as shipped

from hopper_load_variants import _edit
from hopper_variants import print_compile_facts, write_source

_ONE = """                    if c == 0:
                        # The previous tile's value products have read the value buffers.
                        acc = warpgroup_mma_wait(0, deps=acc)
"""
_TWO = """                    if c == 0:
                        # The previous tile's first value product has read v_bufs[0]; the other
                        # seven may run on.
                        acc = (warpgroup_mma_wait(7, deps=(acc[0], )), acc[1], acc[2], acc[3], acc[4], acc[5],
                               acc[6], acc[7])
                    if c == 1:
                        # The second has read v_bufs[1]; the last six and this tile's first score
                        # product may run on. The wait for the previous score product below then
                        # waits for every value product (groups complete in order).
                        acc = (acc[0], warpgroup_mma_wait(7, deps=(acc[1], )), acc[2], acc[3], acc[4], acc[5],
                               acc[6], acc[7])
"""

_IMPORTS = [
    ("from ..constants import", "from mixmla.kernels.constants import"),
    ("from . import mxfp4, paging", "from mixmla.kernels.gluon import mxfp4, paging"),
    ("from .layouts import", "from mixmla.kernels.gluon.layouts import"),
]


def variant_source(form: str = "one") -> str:
    """``one``: every value product waited for once chunk 0's keys are decoded; ``two``: the first
    two each waited for before its buffer is rewritten (chunks 0 and 1)."""
    src = open(shipped.__file__).read()
    # Eight value accumulators (VALUE_CHUNKS), written out below.
    assert "for c in gl.static_range(VALUE_CHUNKS):\n                acc = acc + (warpgroup_mma_init(" in src
    for a, b in _IMPORTS:
        src = _edit(src, a, b)
    src = _edit(src, """                # The value product of the previous tile still reads the value buffers.
                acc = warpgroup_mma_wait(0, deps=acc)
""", "")
    waits = _TWO if form == "two" else _ONE
    src = _edit(src, """                    if c < VALUE_CHUNKS:
                        v_bufs[c].index(0).store(keys)
""", waits + """                    if c < VALUE_CHUNKS:
                        v_bufs[c].index(0).store(keys)
""")
    if form == "two":
        src = _edit(src, """                raw = nxt
                st = warpgroup_mma_wait(0, deps=(st, ))
""", """                raw = nxt
                st = warpgroup_mma_wait(0, deps=(st, ))
                # Done already (the score products' waits came after them): marks them ready.
                rest = warpgroup_mma_wait(0, deps=(acc[2], acc[3], acc[4], acc[5], acc[6], acc[7]))
                acc = (acc[0], acc[1]) + rest
""")
    return src


def write_variant(outdir: str, form: str = "one") -> str:
    return write_source(outdir, f"var_vlate_{form}.py", variant_source(form))


if __name__ == "__main__":
    for form in ("one", "two"):
        out = write_variant(sys.argv[1] if len(sys.argv) > 1 else "bench/out/vlate", form)
        print(out)
        if "--compile" in sys.argv:
            print_compile_facts(out, [(2, 0), (2, 1)], ops=("HGMMA", "WARPGROUP"))
