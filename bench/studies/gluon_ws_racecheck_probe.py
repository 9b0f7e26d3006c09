"""Whether compute-sanitizer racecheck reports hazards inside Triton's ``warp_specialize`` itself
(prepared in the thirteenth session for design log step 86's four remaining hazards, all at the
staged kernel's entry and its ``warp_specialize`` call).

A kernel of two partitions (4 warps each, as ``kernels/gluon/decode_tma.py``) whose own code
touches no shared memory: each partition writes its program id and partition index to global
memory. Hazards reported for it are Triton's partition setup, not ours.

``PYTHONPATH=src compute-sanitizer --tool racecheck python bench/studies/gluon_ws_racecheck_probe.py``
on the GPU (prints the output check); ``--compile`` (any machine, ``TRITON_INTERPRET=0``): the
barriers and shared-memory accesses of its PTX.
"""

import re
import sys

import torch
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl


@gluon.jit
def _part(out_ptr, WG: gl.constexpr):
    one: gl.constexpr = gl.BlockedLayout([1], [32], [4], [0])
    lanes = gl.arange(0, 128, layout=one)
    gl.store(out_ptr + gl.program_id(0) * 256 + WG * 128 + lanes, gl.program_id(0) * 2 + WG + lanes * 0)


@gluon.jit
def ws_probe_kernel(out_ptr):
    gl.warp_specialize([(_part, (out_ptr, 0)), (_part, (out_ptr, 1))], [4], [240])


def compile_facts():
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource

    k = triton.compile(GluonASTSource(ws_probe_kernel, {"out_ptr": "*i32"}, constexprs={}),
                       target=GPUTarget("cuda", 90, 32), options={"num_warps": 4})
    ptx = k.asm["ptx"]
    print("barriers:", sorted(set(re.findall(r"bar(?:rier)?\.sync\s+[^;]*", ptx))),
          "shared accesses:", len(re.findall(r"\b(?:ld|st)\.shared", ptx)), "shared bytes:", k.metadata.shared)


def run(programs: int = 132) -> None:
    out = torch.full((programs, 256), -1, dtype=torch.int32, device="cuda")
    ws_probe_kernel[(programs, )](out, num_warps=4)
    want = (torch.arange(programs, device="cuda")[:, None] * 2 + (torch.arange(256, device="cuda") >= 128)).int()
    print("outputs as written:", bool(torch.equal(out, want)))


if __name__ == "__main__":
    compile_facts() if "--compile" in sys.argv else run()
