"""``patches/softmax_tile.patch``'s change to ``kernels/gluon/decode.py`` as a variant module, so that
``hopper_variants.py`` times it beside the shipped MXFP4 kernel in one process, shape by shape
(design log steps 107-108: applied to the tree and alternated with it across processes, MXFP4 came
out 0-2% slower in a drifting call, too close to tell). The online-softmax step the two Hopper
kernels repeat, folded into one ``@gluon.jit`` helper ``_softmax_tile``, read from the patch itself.

    python bench/studies/hopper_softmax_variant.py OUTDIR [--compile]      # write var_softmax.py
    python bench/studies/hopper_variants.py OUT OUTDIR/var_softmax.py       # time it (GPU)
"""

import os
import re
import sys

import mixmla.kernels.gluon.decode as shipped

from hopper_load_variants import _edit
from hopper_variants import print_compile_facts, write_source
from hopper_vlate_variant import _IMPORTS

PATCH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "patches", "softmax_tile.patch")


def _decode_hunks() -> list[tuple[str, str]]:
    """(old, new) text of each hunk of the patch's ``decode.py`` part."""
    text = open(PATCH).read()
    part = text.split("+++ b/src/mixmla/kernels/gluon/decode.py\n", 1)[1].split("\ndiff --git", 1)[0]
    hunks = []
    for body in re.split(r"^@@[^\n]*@@[^\n]*\n", part, flags=re.M)[1:]:
        old, new = [], []
        for line in body.splitlines():
            tag, rest = line[:1], line[1:]
            if tag in (" ", ""):
                old.append(rest)
                new.append(rest)
            elif tag == "-":
                old.append(rest)
            elif tag == "+":
                new.append(rest)
        hunks.append(("\n".join(old) + "\n", "\n".join(new) + "\n"))
    return hunks


def variant_source() -> str:
    src = open(shipped.__file__).read()
    for old, new in _decode_hunks():
        src = _edit(src, old, new)
    for a, b in _IMPORTS:
        src = _edit(src, a, b)
    return src + '\nFORMATS = ("mxfp4", )\n'


if __name__ == "__main__":
    out = write_source(sys.argv[1] if len(sys.argv) > 1 else "bench/out/softmax", "var_softmax.py", variant_source())
    print(out)
    if "--compile" in sys.argv:
        print_compile_facts(out, [(2, 0), (2, 1)], ops=("HGMMA", "MUFU"))
