"""Compile probe (CPU, sm_90a): can a Gluon kernel branch on a vote of the whole warpgroup without a
shared-memory reduction? (docs/PERF.md, "Where the Hopper kernel's time goes".)

``bar.red.or.pred`` gives every thread the OR of all threads' predicates in one instruction, and
``inline_asm_elementwise`` emits it; but an ``if`` needs a scalar, and the only way Gluon (triton
3.6) turns the voted tensor into one is a reduction, which this prints as lowered: a shared-memory
store, ``bar.sync``, a load and shuffles, which is the exchange the vote was meant to avoid.

    TRITON_INTERPRET=0 python bench/studies/gluon_vote_probe.py
"""

import os

os.environ["TRITON_INTERPRET"] = "0"

import triton  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.experimental import gluon  # noqa: E402
from triton.experimental.gluon import language as gl  # noqa: E402
from triton.experimental.gluon._runtime import GluonASTSource  # noqa: E402

VOTE = gl.constexpr("{ .reg .pred p, q; setp.ne.u32 p, $1, 0; bar.red.or.pred q, 1, p; selp.u32 $0, 1, 0, q; }")


@gluon.jit
def vote_branch(x_ptr, out_ptr):
    layout: gl.constexpr = gl.BlockedLayout([1], [32], [4], [0])
    i = gl.arange(0, 128, layout=layout)
    x = gl.load(x_ptr + i)
    voted = gl.inline_asm_elementwise(VOTE, "=r,r", [(x > 3.0).to(gl.int32)], dtype=gl.int32, is_pure=False, pack=1)
    if gl.max(voted, axis=0) != 0:  # the scalar: equal in every thread, but the compiler cannot know
        gl.store(out_ptr + i, x * 2)
    else:
        gl.store(out_ptr + i, x)


def main():
    src = GluonASTSource(vote_branch, {"x_ptr": "*fp32", "out_ptr": "*fp32"}, constexprs={})
    ptx = triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": 4}).asm["ptx"]
    keys = ("bar.", "shfl", "st.shared", "ld.shared")
    for line in ptx.splitlines():
        if any(k in line for k in keys):
            print(line.strip())


if __name__ == "__main__":
    main()
