"""Variants of the Hopper kernel's piece end and merge (design log steps 62-63), written as text
edits of the shipped ``kernels/gluon/decode.py`` as ``hopper_load_variants.py`` writes its own.

``write_variants(outdir)`` writes one module per variant and returns their paths, for
``hopper_variants.py`` and ``hopper_timeline.py``.

- ``semaphore``: the count raised and read as CUTLASS's semaphores do, without a fence in every
  thread. Arrival: the barrier, then one thread's acq_rel atomic (a release at GPU scope covers
  what the barrier ordered before it) instead of ``fence.acq_rel.gpu`` in all 128 threads first;
  the last arriver of a two-piece request reads the parts after the atomic's broadcast (its
  barrier) without another fence. Wait: each thread polls with ``ld.acquire.gpu``, which orders
  its own later reads, instead of volatile reads and a fence. Bitwise the shipped output.

    PYTHONPATH=src:bench/studies python3 bench/studies/hopper_merge_variants.py DIR
    python3 bench/studies/hopper_variants.py OUT DIR/var_semaphore.py --shapes 4x1024,4x8192,32x8192,256x1024
"""

import os
import sys

import mixmla.kernels.gluon.decode as shipped

from hopper_load_variants import _edit, absolute_imports

ARRIVE = "                _fence_gpu()\n                gl.thread_barrier()\n                done = gl.atomic_add("
LAST_ARRIVER = "                    if done == nparts - 1:\n                        _fence_gpu()\n"
WAIT = '''    while gl.load(ptr, volatile=True) < target:
        pass
    _fence_gpu()
'''
ACQUIRE_WAIT = '''    one: gl.constexpr = gl.BlockedLayout([1], [32], [4], [0])
    ptrs = gl.full([128], 0, gl.int64, one) + ptr.to(gl.int64, bitcast=True)
    while gl.min(gl.inline_asm_elementwise("ld.acquire.gpu.global.b32 $0, [$1];", "=r,l", [ptrs], dtype=gl.int32,
                                           is_pure=False, pack=1), axis=0) < target:
        pass
'''


def _semaphore(src):
    src = _edit(src, ARRIVE, "                gl.thread_barrier()\n                done = gl.atomic_add(")
    src = _edit(src, LAST_ARRIVER, "                    if done == nparts - 1:\n")
    return _edit(src, WAIT, ACQUIRE_WAIT)


VARIANTS = {"semaphore": _semaphore}


def write_variants(outdir):
    os.makedirs(outdir, exist_ok=True)
    base = absolute_imports(open(shipped.__file__).read())
    paths = []
    for name, edit in VARIANTS.items():
        path = os.path.join(outdir, f"var_{name}.py")
        with open(path, "w") as f:
            f.write(edit(base))
        paths.append(path)
    return paths


if __name__ == "__main__":
    for p in write_variants(sys.argv[1] if len(sys.argv) > 1 else "bench/out/merge_variants"):
        print(p)
