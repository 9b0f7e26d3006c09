"""CPU compile probe (no GPU): what Gluon on triton 3.6 emits around a TMA copy on sm_90.

A kernel that copies four [64, 16 * N] int32 boxes of a device-side tensor descriptor into shared
memory (one copy and one mbarrier wait per iteration) and reads them back in the Hopper kernel's
chunk layout. Prints, per swizzle, the SASS counts of barriers, TMA copies and shared loads:
``PYTHONPATH=src TRITON_INTERPRET=0 python3 bench/studies/gluon_tma_probe.py``. Design log step 81:
four rounds of expect, copy and wait (each with one ``thread_barrier`` of its own) compile to
17 ``bar.sync``, about three per round from the lowering, so a tile's copies should be one box,
not one per chunk.
"""
import triton
from triton.backends.compiler import GPUTarget
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon._runtime import GluonASTSource
from triton.experimental.gluon.language.nvidia.hopper import tma, mbarrier
from mixmla.kernels.gluon.layouts import chunk_word_layout
from mixmla.kernels.gluon import sass

@gluon.jit
def probe(kv_ptr, kv_stride, n_rows, out_ptr, N: gl.constexpr, SW: gl.constexpr):
    lay: gl.constexpr = gl.NVMMASharedLayout(swizzle_byte_width=SW, element_bitwidth=32, rank=2)
    desc = tma.make_tensor_descriptor(kv_ptr, [n_rows, 144], [kv_stride, 1], [64, 16 * N], lay)
    raw = gl.allocate_shared_memory(gl.int32, [64, 16 * N], lay)
    bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    mbarrier.init(bar, count=1)
    acc = gl.zeros([64, 16], gl.int32, chunk_word_layout(4))
    for t in range(4):
        mbarrier.expect(bar, N * 4096)
        tma.async_copy_global_to_shared(desc, [t * 64, 0], bar, raw)
        mbarrier.wait(bar, t & 1)
        for c in gl.static_range(N):
            acc += raw.slice(16 * c, 16, dim=1).load(chunk_word_layout(4))
        gl.thread_barrier()
    rows = gl.arange(0, 64, layout=gl.SliceLayout(1, chunk_word_layout(4)))
    cols = gl.arange(0, 16, layout=gl.SliceLayout(0, chunk_word_layout(4)))
    gl.store(out_ptr + rows[:, None] * 16 + cols[None, :], acc)

sig = {"kv_ptr": "*i32", "kv_stride": "i32", "n_rows": "i32", "out_ptr": "*i32", "N": "constexpr", "SW": "constexpr"}
if __name__ == "__main__":
    for sw in (0, 128):
        k = triton.compile(GluonASTSource(probe, sig, constexprs={"N": 4, "SW": sw},
                                          attrs={(0, ): [["tt.divisibility", 16]], (1, ): [["tt.divisibility", 8]]}),
                           target=GPUTarget("cuda", 90, 32), options={"num_warps": 4})
        ins = [x for _, x in sass._sass_instructions(k.asm["cubin"])]
        print(f"swizzle {sw}: bar.sync {sum('BAR.SYNC' in x for x in ins)}, TMA copies {sum('UTMALDG' in x for x in ins)}, "
              f"shared loads {sum('LDS' in x for x in ins)}")
