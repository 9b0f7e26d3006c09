"""Ahead-of-time compilation of the Hopper kernel (also on machines without a GPU).

``compile_decode(spec)`` builds one specialization with ``triton.compile`` for sm_90a and returns
the ``CompiledKernel``; compiled kernels are cached on disk by Triton and in memory here, so a
launch never goes through the ``@jit`` dispatcher. ``SIGNATURE`` is the kernel's argument list, the
one place it is written down.
"""

from __future__ import annotations

import functools
from dataclasses import asdict, dataclass

from ..constants import FMT_FP8

#: The kernel's parameters in order with their Triton types ("constexpr" for specialization
#: constants). Pointer arguments are 16-byte aligned (checked on the host before a launch).
SIGNATURE = {
    "q_ptr": "*bf16", "stride_qt": "i32", "stride_qh": "i32",
    "kv_ptr": "*i32", "kv_stride": "i32", "sc_ptr": "*u8", "sc_stride": "i32", "fp8_scale_ptr": "*fp32",
    "kv_indptr": "*i32", "qo_indptr": "*i32",
    "pages_ptr": "*i32", "page_indptr": "*i32", "page_stride": "i32", "max_pages": "i32", "num_pages": "i32",
    "page_shift": "i32",
    "out_ptr": "*bf16", "stride_ot": "i32", "stride_oh": "i32", "lse_ptr": "*fp32", "stride_lt": "i32",
    "part_o_ptr": "*fp32", "part_lse_ptr": "*fp32", "counter_ptr": "*i32",
    "batch": "i32", "sm_scale": "fp32",
    "H": "constexpr", "ROWS": "constexpr", "FORMAT": "constexpr", "BLOCK_B": "constexpr", "C0": "constexpr",
    "WRITE_LSE": "constexpr", "PAGED": "constexpr", "SMALL_PAGES": "constexpr",
}
#: What the kernel may assume of an argument: pointers 16-byte aligned, the cache row stride (in
#: 32-bit words) a multiple of 8. ``launch.cache_unsupported`` checks the cache; the other tensors
#: are the library's own, or checked before a launch (``launch.call_unsupported``: q, out).
DIVISIBILITY = {"q_ptr": 16, "kv_ptr": 16, "out_ptr": 16, "part_o_ptr": 16, "part_lse_ptr": 16, "kv_stride": 8,
                "stride_qt": 16, "stride_qh": 16, "stride_ot": 16, "stride_oh": 16}
NUM_WARPS = 4
#: Register cap per thread: two programs share an SM (2 x 128 threads x 255 registers fit its 64 K),
#: or one of two warpgroups (``decode_tma``).
MAX_REGISTERS = 255


@dataclass(frozen=True)
class KernelSpec:
    """One specialization: H query heads, ROWS query rows per request, FORMAT (1 fp8, 2 MXFP4),
    BLOCK_B (power of two >= batch, >= 128), C0 (fixed cost of a request, in tiles), WRITE_LSE,
    PAGED (0 contiguous, 1 block table, 2 CSR: ``paging``), SMALL_PAGES (paged: pages of fewer
    than ``TILE_TOKENS`` tokens, which ``decode_tma`` fills its tiles from by row copies instead
    of the copy engine, and whose rows ``decode`` asks of L2 two tiles ahead)."""

    H: int
    ROWS: int
    FORMAT: int
    BLOCK_B: int
    C0: int
    WRITE_LSE: bool
    PAGED: int = 0
    SMALL_PAGES: bool = False

    def constexprs(self) -> dict:
        return asdict(self)


#: Tokens of a tile: ``decode_tma`` copies a tile from one page with the copy engine where pages
#: hold at least this many tokens, and by row copies from smaller ones (``KernelSpec.SMALL_PAGES``).
TILE_TOKENS = 64


def staged(spec: KernelSpec, staged_kernel: bool | None = None) -> bool:
    """Whether ``spec`` is compiled from ``decode_tma`` (whole tiles staged in shared memory, one
    program of two warpgroups per SM) rather than ``decode`` (two programs of one warpgroup per SM):
    the kernel that serves ``spec`` (``decode_tma`` for fp8, contiguous or paged; ``decode`` for
    MXFP4), unless ``staged_kernel`` is True for a contiguous MXFP4 ``spec``: ``decode_tma`` also
    reads those, but is slower there than ``decode`` so far (docs/PERF.md, design log step 89).
    ``decode`` reads no fp8 cache: ``staged_kernel`` False for fp8 is a ValueError."""
    fp8 = spec.FORMAT == FMT_FP8.value
    if staged_kernel is not None and not staged_kernel and fp8:
        raise ValueError("staged_kernel=False: fp8 caches are read by decode_tma only")
    return fp8 or bool(staged_kernel)


@functools.lru_cache(maxsize=None)
def compile_decode(spec: KernelSpec, staged_kernel: bool | None = None):
    """The compiled kernel for ``spec`` (sm_90a cubin and PTX in ``.asm``): ``decode_tma``'s where
    ``staged(spec, staged_kernel)``, else ``decode``'s. ``NUM_WARPS`` is a program's for ``decode``
    and the default partition's for ``decode_tma`` (its worker adds four)."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource

    if staged(spec, staged_kernel):
        from .decode_tma import mla_decode_hopper_tma_kernel as kernel
    else:
        from .decode import mla_decode_hopper_kernel as kernel

    names = list(SIGNATURE)
    attrs = {(names.index(n), ): [["tt.divisibility", d]] for n, d in DIVISIBILITY.items()}
    src = GluonASTSource(kernel, dict(SIGNATURE), constexprs=spec.constexprs(), attrs=attrs)
    return triton.compile(src, target=GPUTarget("cuda", 90, 32),
                          options={"num_warps": NUM_WARPS, "maxnreg": MAX_REGISTERS,
                                   # The programs of a cut request wait for each other's pieces
                                   # (the merge of ``decode``): the driver must start them all at once.
                                   "launch_cooperative_grid": True})
