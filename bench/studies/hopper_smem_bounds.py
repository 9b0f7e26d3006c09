"""Bounds of the shipped MXFP4 kernel's shared-memory side (design log step 105): text edits of
``kernels/gluon/decode.py`` that leave out one part of the value tile's traffic, wrong by design,
for ``hopper_variants.py`` (timing only: their outputs fail the check).

- ``nostore``: the decoded value tile is never written (the value products read whatever the
  buffers hold): the time without the 64 KB of stores per tile.
- ``novalue``: no value products (the accumulators are only rescaled): the time without their 64
  KB of A-operand reads and their tensor time; the value tile is still stored.
- ``neither``: both left out.

Steps 103-104's variants halve the stored bytes and take the value operand from registers; these
bounds say how much of the shipped loop's time those two parts hold, whatever the variants' own
costs. ``write_variants(outdir)`` writes ``var_<name>.py`` per bound and returns the paths;
``python bench/studies/hopper_smem_bounds.py OUTDIR [--compile]`` writes them (and prints their
compile facts, on any machine).
"""

import os
import sys

import mixmla.kernels.gluon.decode as shipped

IMPORTS = [
    ("from ..constants import", "from mixmla.kernels.constants import"),
    ("from . import mxfp4, paging", "from mixmla.kernels.gluon import mxfp4, paging"),
    ("from .layouts import", "from mixmla.kernels.gluon.layouts import"),
]
STORE = "                        v_bufs[c].index(0).store(keys)\n"
INIT = "                acc = acc + (warpgroup_mma_init(gl.zeros([CHUNK, ROWS], gl.float32, acc_l)), )\n"
PRODUCT = ("                    acc = acc + (warpgroup_mma(v_bufs[c].index(z).permute((1, 0)), p_smem, scaled[c], "
           "is_async=True), )\n")
FORMATS = ("mxfp4", )


def _edit(src, old, new):
    assert src.count(old) == 1, f"anchor not found once in decode.py: {old!r}"
    return src.replace(old, new)


def _no_store(src):
    # An `if` needs a body: the chunk's keys are still decoded for the score product.
    return _edit(src, STORE, "                        pass\n")


def _no_value(src):
    src = _edit(src, INIT, "                acc = acc + (gl.zeros([CHUNK, ROWS], gl.float32, acc_l), )\n")
    return _edit(src, PRODUCT, "                    acc = acc + (scaled[c], )\n")


def variant_sources() -> dict:
    base = open(shipped.__file__).read()
    for a, b in IMPORTS:
        base = _edit(base, a, b)
    base += f"\n\nFORMATS = {FORMATS!r}\n"
    return {"nostore": _no_store(base), "novalue": _no_value(base), "neither": _no_value(_no_store(base))}


def write_variants(outdir: str) -> list:
    os.makedirs(outdir, exist_ok=True)
    paths = []
    for name, src in variant_sources().items():
        path = os.path.join(outdir, f"var_{name}.py")
        open(path, "w").write(src)
        paths.append(path)
    return paths


if __name__ == "__main__":
    paths = write_variants(sys.argv[1])
    print("\n".join(paths))
    if "--compile" in sys.argv:
        from hopper_variants import print_compile_facts

        for p in paths:
            print(os.path.basename(p))
            print_compile_facts(p, [(2, 0)], ops=("HGMMA", "STSM", "STS", "BAR", "LDG"))
