"""CPU screen of the two-warpgroup study variant (``kernels/gluon/study_wg2.py``) against the
shipped kernel: per specialization, registers, spill bytes, shared memory, wgmma in the PTX, and
per tile loop (one per warpgroup in the variant) its SASS instructions and local-memory
instructions. ``TRITON_INTERPRET=0 PYTHONPATH=src python bench/studies/wg2_screen.py [--all]``
(default: the contiguous specs and paged forms at BLOCK_B 256); prints one JSON row per kernel.
"""

import json
import re
import sys

import triton
from triton.backends.compiler import GPUTarget
from triton.experimental.gluon._runtime import GluonASTSource

from mixmla.kernels.gluon import compile as gcompile
from mixmla.kernels.gluon import study_wg2
from mixmla.kernels.gluon.launch import shipped_specs
from mixmla.kernels.gluon.sass import _sass_instructions, kernel_facts


def tile_loops(cubin):
    """(instructions, HGMMA, local-memory instructions) of each innermost loop holding HGMMA."""
    ins = _sass_instructions(cubin)
    index = {a: i for i, (a, _) in enumerate(ins)}
    loops = []
    for i, (a, t) in enumerate(ins):
        m = re.search(r"BRA\s+(0x[0-9a-f]+)", t)
        if m and int(m.group(1), 16) < a and int(m.group(1), 16) in index:
            body = [x for _, x in ins[index[int(m.group(1), 16)]:i + 1]]
            h = sum("HGMMA" in x for x in body)
            if h:
                loops.append((index[int(m.group(1), 16)], i, len(body), h,
                              sum(bool(re.search(r"\b(LDL|STL)\b", x)) for x in body)))
    # innermost: no other HGMMA loop nested inside
    inner = [l for l in loops if not any(o is not l and l[0] <= o[0] and o[1] <= l[1] for o in loops)]
    return [{"instructions": l[2], "hgmma": l[3], "local": l[4]} for l in sorted(inner)]


def compile_study(spec):
    names = list(gcompile.SIGNATURE)
    attrs = {(names.index(n), ): [["tt.divisibility", d]] for n, d in gcompile.DIVISIBILITY.items()}
    src = GluonASTSource(study_wg2.mla_decode_hopper_kernel, dict(gcompile.SIGNATURE), constexprs=spec.constexprs(),
                         attrs=attrs)
    return triton.compile(src, target=GPUTarget("cuda", 90, 32),
                          options={"num_warps": study_wg2.NUM_WARPS, "maxnreg": study_wg2.MAX_REGISTERS})


def main(all_specs):
    for spec in shipped_specs():
        if not all_specs and spec.PAGED and spec.BLOCK_B != 256:
            continue
        for name, kernel in (("shipped", gcompile.compile_decode(spec)), ("study_wg2", compile_study(spec))):
            f = kernel_facts(kernel)
            print(json.dumps({"kernel": name, "spec": spec.constexprs(), "registers": f.registers,
                              "spill_bytes": f.spill_bytes, "shared": f.shared, "wgmma": f.wgmma,
                              "warps": kernel.metadata.num_warps, "loops": tile_loops(kernel.asm["cubin"])}),
                  flush=True)


if __name__ == "__main__":
    main("--all" in sys.argv)
