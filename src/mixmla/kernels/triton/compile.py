"""Compile the kernels a call would launch, for a GPU target, on any machine (no GPU needed).

``plan_launches`` builds a small example call of a given shape on CPU tensors and asks the backend
for its launches (``launch.launches``: the same argument lists a GPU run passes); ``compile_launch``
compiles one of them for a target (sm_90 by default, or an AMD target) after specializing its
arguments exactly as Triton's dispatcher would (pointer alignment, integers divisible by 16 or
equal to 1), so what is compiled is what the dispatcher would compile for those arguments. CI uses
this to check that every default shape fits an SM's shared memory and does not spill where that
matters, and that an AMD build compiles (it takes the portable decoders);
``bench/compile_report.py`` prints registers, spills and SASS.

It needs the kernels defined as compiled functions: import mixmla with ``TRITON_INTERPRET=0``.
It leans on Triton 3.6 internals (the dispatcher's binder, ``JITFunction._pack_args``, the active
driver slot), pinned by the test requirements.
"""

from __future__ import annotations

import contextlib

import numpy as np
import torch
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource, make_backend
from triton.runtime.jit import JITFunction, create_function_from_signature

from ... import formats
from ...validate import check_sm_scale
from ..backend import Layout, PageTable
from ..nvtools import cuobjdump
from .backend import TritonPlan
from .configs import KernelConfig
from .launch import Launch, launches

SM90 = GPUTarget("cuda", 90, 32)  #: Hopper (the H200)
GFX942 = GPUTarget("hip", "gfx942", 64)  #: AMD MI300 (CDNA3)


def example_layout(fmt: str, num_heads: int = 16, q_len: int = 1, split: bool = True, page_size: int = 0) -> Layout:
    """A uniform batch the default configs plan as split (4 requests of 1024 tokens) or direct
    (264 requests of 64 tokens), ``q_len`` query tokens each; in pages of ``page_size`` tokens
    when it is > 0 (``plan_launches`` then builds a block table)."""
    batch, kv_len = (4, 1024) if split else (264, 64)
    return Layout(torch.device("cpu"), num_heads, fmt, check_sm_scale(None), np.full(batch, kv_len, np.int64),
                  np.full(batch, q_len, np.int64), page_size)


def _example_cache(fmt: str, rows: int, fnuz: bool):
    x = torch.randn(rows, formats.HEAD_DIM, generator=torch.Generator().manual_seed(0))
    if fmt == "fp8":
        return formats.quantize_fp8(x, torch.float8_e4m3fnuz if fnuz else torch.float8_e4m3fn)
    return formats.quantize(x, fmt)


def plan_launches(layout: Layout, config: KernelConfig | None = None, write_lse: bool = False,
                  fnuz: bool = False) -> tuple[TritonPlan, list[Launch]]:
    """The Triton plan of ``layout`` and the launches of one call on CPU tensors shaped as the
    layout says (an e4m3fnuz cache when ``fnuz``; lse written when ``write_lse``)."""
    plan = TritonPlan(layout, config)
    plan.use_workspace(torch.empty(plan.workspace_floats, dtype=torch.float32) if plan.workspace_floats else None)
    total_q, total_kv, h = int(layout.q_lens.sum()), int(layout.kv_lens.sum()), layout.num_heads
    q = torch.zeros(total_q, h, formats.HEAD_DIM, dtype=torch.bfloat16)
    kv_indptr = torch.from_numpy(np.concatenate([[0], np.cumsum(layout.kv_lens)]).astype(np.int32))
    qo_indptr = torch.from_numpy(np.concatenate([[0], np.cumsum(layout.q_lens)]).astype(np.int32))
    out = torch.empty(total_q, h, formats.VALUE_DIM, dtype=torch.bfloat16)
    lse = torch.empty(total_q, h, dtype=torch.float32) if write_lse else None
    cache = _example_cache(layout.fmt, total_kv, fnuz)
    if not layout.page_size:
        return plan, launches(plan.constants, q, cache, kv_indptr, qo_indptr, out, lse)
    # A paged call: the same rows as pages in order, read through a block table.
    P = layout.page_size
    pages = -(-layout.kv_lens // P)
    table = torch.full((layout.batch, max(1, int(pages.max(initial=1)))), -1, dtype=torch.int32)
    first = np.concatenate([[0], np.cumsum(pages)])
    for b, n in enumerate(pages):
        table[b, :n] = torch.arange(first[b], first[b] + n, dtype=torch.int32)
    cache = _example_cache(layout.fmt, max(P, int(first[-1]) * P), fnuz)
    seq_lens = torch.from_numpy(layout.kv_lens.astype(np.int32))
    return plan, launches(plan.constants, q, cache, None, qo_indptr, out, lse, PageTable(seq_lens, table, None, P))


class _TargetOnly:
    """Stands in for Triton's active driver during a compile: ``triton.language.target_info``
    asks it for the target (the decoders pick inline PTX by it)."""

    def __init__(self, target: GPUTarget):
        self.target = target

    def get_current_target(self) -> GPUTarget:
        return self.target


@contextlib.contextmanager
def _active_target(target: GPUTarget):
    drivers = triton.runtime.driver
    previous = drivers._active  # None until a driver is looked up; reset_active() would need a GPU
    drivers.set_active(_TargetOnly(target))
    try:
        yield
    finally:
        drivers.set_active(previous)


def compile_launch(launch: Launch, target: GPUTarget = SM90):
    """Compile ``launch`` for ``target`` as the dispatcher would; returns Triton's CompiledKernel
    (``.asm`` holds the IRs and the binary, ``.metadata.shared`` the shared memory in bytes)."""
    kernel = launch.kernel
    if not isinstance(kernel, JITFunction):
        raise RuntimeError("the kernels were defined for Triton's interpreter; import mixmla with "
                           "TRITON_INTERPRET=0 to compile them")
    backend = make_backend(target)
    kwargs = dict(launch.options, debug=kernel.debug or triton.knobs.runtime.debug,
                  instrumentation_mode=triton.knobs.compilation.instrumentation_mode)
    binder = create_function_from_signature(kernel.signature, kernel.params, backend)
    bound, specialization, options = binder(*launch.args, **kwargs)
    options, signature, constexprs, attrs = kernel._pack_args(backend, kwargs, bound, specialization, options)
    with _active_target(target):
        return triton.compile(ASTSource(kernel, signature, constexprs, attrs), target=target, options=options.__dict__)


def resources(kernel) -> dict:
    """Registers per thread, stack (spill) bytes per thread and static shared memory of a CUDA
    kernel, as cuobjdump reports them: ``{"registers", "stack", "shared"}`` (ints)."""
    import re

    m = re.search(r"REG:(\d+) STACK:(\d+) SHARED:(\d+)", cuobjdump(kernel.asm["cubin"], "--dump-resource-usage"))
    if m is None:
        raise RuntimeError("cuobjdump reported no resource usage")
    return {"registers": int(m[1]), "stack": int(m[2]), "shared": int(m[3])}


def sass(kernel) -> str:
    """A CUDA kernel's SASS, disassembled by cuobjdump."""
    return cuobjdump(kernel.asm["cubin"], "--dump-sass")
