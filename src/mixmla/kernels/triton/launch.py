"""The Triton kernels' argument lists and their launch.

This is the only module that knows what the kernels take: ``launches`` turns a plan's constants and
one call's tensors into the kernel launches of that call, each a :class:`Launch` holding every
kernel parameter in order (constexprs included), which is what Triton's dispatcher and a compiled
kernel's own launcher both take. ``compile`` compiles them for a target without a GPU.

Launching through Triton's dispatcher (``kernel[grid](...)``) binds and specializes every argument
in Python on every call, which costs more host time than the GPU work of a small decode step.
:class:`CompiledLaunches` does that once per specialization (``plan_key`` for what a plan fixes,
``call_key`` for what a call passes) and afterwards calls the compiled kernels' own launchers;
one instance, ``SHARED``, serves every plan, so a new plan of a known specialization (each
``mla_decode`` call makes one) skips the dispatcher too.
"""

from __future__ import annotations

import functools
import inspect
from typing import NamedTuple

import torch
import triton
from triton.compiler import CompiledKernel

from ...formats import VALUE_DIM, Bf16Cache, Fp8Cache, KVCache, Mxfp4Cache
from ...schedule import Schedule, device_sm_count
from .combine import mla_combine_kernel
from .configs import KernelConfig
from .decode import mla_decode_kernel
from .paging import loop_stages, rows32, wide_table, windowed_gather
from ..backend import PageTable
from ..constants import FMT_BF16, FMT_FP8, FMT_FP8_FNUZ, FMT_MXFP4

COMBINE_BLOCK_R = 16  #: rows per combine program
COMBINE_BLOCK_D = 32  #: output columns per combine program: 16 programs per row block, many in flight
COMBINE_MAX_BLOCK_S = 16  #: partials one combine load reads (registers: 16 x 16 x 32 floats per program)


class Launch(NamedTuple):
    """One kernel launch: ``kernel[grid](*args, **options)``. args: every parameter of the kernel
    in order, constexprs included; options: Triton launch options (num_warps, num_stages);
    outputs: the positions in ``args`` of the call's output and of its lse argument (the output
    again when the call writes no lse), which ``Repeat.with_outputs`` may point elsewhere; empty
    for a launch that has none."""

    kernel: object
    grid: tuple
    args: tuple
    options: dict
    outputs: tuple = ()


def with_arguments(one: Launch, kernel=None, **values) -> Launch:
    """``one`` run by ``kernel`` (default: its own), each of that kernel's parameters given ``one``'s
    argument of the same name or the value ``values`` names for it: a variant of a launch for a
    test or a study (a forced constexpr, another kernel whose parameters are a subset)."""
    value = dict(zip(one.kernel.arg_names, one.args))
    unknown = set(values) - set(value)
    if unknown:
        raise KeyError(f"{one.kernel.__name__} has no parameters {sorted(unknown)}")
    value.update(values)
    kernel = kernel or one.kernel
    return Launch(kernel, one.grid, tuple(value[n] for n in kernel.arg_names), one.options)


def cache_arguments(cache: KVCache) -> tuple:
    """``(FORMAT, kv, kv_stride, scales, scale_stride)`` for the decode kernel: the stored rows and
    their row stride, and the format's scales (fp8: the per-tensor float32 scale, read on the
    device so that no host sync is needed; MXFP4: the E8M0 rows and their stride; bf16: none)."""
    if isinstance(cache, Bf16Cache):
        return FMT_BF16.value, cache.data, cache.data.stride(0), None, None
    if isinstance(cache, Fp8Cache):
        if cache.is_fnuz:
            data = cache.data.view(torch.uint8)
            return FMT_FP8_FNUZ.value, data, data.stride(0), cache.scale, None
        data = cache.data  # e4m3fn: the containers hold no other fp8 dtype but fnuz
        return FMT_FP8.value, data, data.stride(0), cache.scale, None
    if isinstance(cache, Mxfp4Cache):
        return FMT_MXFP4.value, cache.data, cache.data.stride(0), cache.scales, cache.scales.stride(0)
    raise TypeError(f"unsupported cache type {type(cache).__name__}")


class PlanConstants(NamedTuple):
    """What a plan fixes for every call: the schedule and its device tensors, and the kernel shape.

    work: (work_req, work_split, work_nsplit, split_indptr) int32 device tensors of ``schedule``;
    workspace: (part_o (num_work, rows_max, 512) float32, part_lse (num_work, rows_max) float32)
    device tensors (unused when the schedule is direct); sm_scale: softmax scale; num_heads: H.
    """

    schedule: Schedule
    work: tuple
    workspace: tuple
    sm_scale: float
    num_heads: int
    config: KernelConfig
    interpreted: bool


def page_arguments(pages: PageTable | None, cache: KVCache) -> tuple:
    """``(pages, page_stride, page_indptr, max_pages, num_pages, table_len, PAGE_SIZE, CSR)`` for
    the decode kernel (``paging``): the page table of a paged call, or the contiguous layout's
    unused values (PAGE_SIZE 0) when ``pages`` is None. ``cache`` holds the pool's pages as rows;
    table_len: the entries from the table's first to one past its last (what the kernel may read)."""
    if pages is None:
        return None, 0, None, 0, 0, 0, 0, False
    num_pages = cache.num_tokens // pages.page_size
    table = pages.table
    if pages.page_indptr is None:  # a block table
        rows, width = table.shape
        table_len = (rows - 1) * table.stride(0) + width if rows and width else 0
        return table, table.stride(0), None, width, num_pages, table_len, pages.page_size, False
    return table, 0, pages.page_indptr, 0, num_pages, table.shape[0], pages.page_size, True


def launches(plan: PlanConstants, q: torch.Tensor, cache: KVCache, kv_indptr: torch.Tensor | None,
             qo_indptr: torch.Tensor, out: torch.Tensor, lse: torch.Tensor | None,
             pages: PageTable | None = None) -> list[Launch]:
    """The launches of one call: decode, then combine unless the schedule is direct.

    q (total_q, H, 576) bf16; cache a ``mixmla.formats`` container (a paged pool as its rows);
    kv_indptr (batch+1,) int32/int64 on q's device, or None with ``pages`` (the page table and the
    cached-token counts of a paged call); qo_indptr (batch+1,); out (total_q, H, 512) bf16,
    written; lse (total_q, H) float32 natural log, written when given.
    """
    s, config = plan.schedule, plan.config
    fmt, kv, kv_stride, scales, scale_stride = cache_arguments(cache)
    table, page_stride, page_indptr, max_pages, num_pages, table_len, page_size, csr = page_arguments(pages, cache)
    if pages is not None:
        kv_indptr = pages.seq_lens
    work_req, work_split, work_nsplit, split_indptr = plan.work
    part_o, part_lse = plan.workspace
    q_stride, out_stride = q.stride(), out.stride()
    write_lse = lse is not None
    lse_arg = lse if write_lse else out
    lse_stride = lse.stride(0) if write_lse else 0
    inputs = (q, q_stride[0], q_stride[1],
              kv, kv_stride, scales, scale_stride,
              kv_indptr, qo_indptr,
              table, page_stride, page_indptr, max_pages, num_pages, table_len,
              work_req, work_split, work_nsplit)
    decode = Launch(mla_decode_kernel, (work_req.shape[0], s.row_blocks), inputs + (
        out, out_stride[0], out_stride[1], lse_arg, lse_stride,
        part_o, part_lse, s.rows_max,
        plan.sm_scale,
        plan.num_heads, s.block_r, config.block_t, fmt, s.direct, write_lse, plan.interpreted,
        page_size, csr, *_gather_constexprs(plan, page_size, q.device, cache, kv_stride, scale_stride, table_len),
    ), _options(config.num_warps, config.num_stages), (len(inputs), len(inputs) + 3))
    if s.direct:
        return [decode]
    partials = (part_o, part_lse, s.rows_max, split_indptr, qo_indptr)
    combine = Launch(mla_combine_kernel, _combine_grid(split_indptr.shape[0] - 1, s.rows_max), partials + (
        out, out_stride[0], out_stride[1], lse_arg, lse_stride,
        plan.num_heads, COMBINE_BLOCK_R, COMBINE_BLOCK_D,
        _combine_block_s(s), write_lse,
    ), _options(4, None), (len(partials), len(partials) + 3))
    return [decode, combine]


def _gather_constexprs(plan: PlanConstants, page_size: int, device: torch.device, cache: KVCache, kv_stride: int,
                       scale_stride: int | None, table_len: int) -> tuple:
    """The decode kernel's ``(LOOP_STAGES, ROWS32, WIDE_TABLE, WINDOW)`` for a call of ``plan``
    with pages of ``page_size`` tokens (0: contiguous): ``paging.loop_stages`` and
    ``paging.windowed_gather`` of the plan's grid on ``device``, ``rows32`` of the pool,
    ``wide_table`` of the table. ``launches`` passes them and ``call_key`` holds them."""
    if not page_size:
        return None, False, False, False
    s, c = plan.schedule, plan.config
    return _gather_choice(page_size, c.block_t, c.num_stages, s.num_work * s.row_blocks, device_sm_count(device),
                          cache.num_tokens, kv_stride, scale_stride, table_len)


@functools.lru_cache(maxsize=1024)
def _gather_choice(page_size: int, block_t: int, num_stages: int, programs: int, num_sms: int, rows: int,
                   kv_stride: int, scale_stride: int | None, table_len: int) -> tuple:
    # Cached: every call computes it twice (``launches``, ``call_key``), from values a serving loop keeps.
    grid = (page_size, block_t, num_stages, programs, num_sms)
    return (loop_stages(*grid), rows32(page_size, rows, kv_stride, scale_stride), wide_table(page_size, table_len),
            windowed_gather(*grid))


@functools.lru_cache(maxsize=None)
def _options(num_warps: int, num_stages: int | None) -> dict:
    # Shared between launches: Triton's dispatcher and ``CompiledLaunches`` only read it.
    return dict(num_warps=num_warps) if num_stages is None else dict(num_warps=num_warps, num_stages=num_stages)


@functools.lru_cache(maxsize=256)
def _combine_grid(batch: int, rows_max: int) -> tuple:
    return batch, -(-rows_max // COMBINE_BLOCK_R), VALUE_DIM // COMBINE_BLOCK_D


def _int_spec(v: int) -> tuple:
    # What Triton specializes an integer argument on: 1, divisibility by 16, 32- or 64-bit.
    return v == 1, v % 16 == 0, -(1 << 31) <= v < (1 << 31)


def plan_key(plan: PlanConstants, work_signatures: tuple | None = None) -> tuple:
    """What Triton's specialization of a call's kernels depends on among the arguments a plan
    fixes (``launches`` passes these and the call's tensors, see ``call_key``): every constexpr,
    the specialization of every integer, and each plan tensor's signature as for the call's. The
    float ``sm_scale`` and the grid do not specialize. Two plans with equal keys launch the same
    compiled kernels for the same call key. work_signatures: ``signatures(plan.work)`` when the
    caller has them."""
    work = signatures(plan.work) if work_signatures is None else work_signatures
    return layout_key(plan.schedule, plan.config, plan.num_heads, plan.interpreted, work) + \
        (signatures(plan.workspace),)


def layout_key(s: Schedule, c: KernelConfig, num_heads: int, interpreted: bool, work_signatures: tuple) -> tuple:
    """The part of ``plan_key`` that does not depend on the plan's workspace (the same for every
    plan of a layout)."""
    return (s.direct, s.block_r, _int_spec(s.rows_max), _combine_block_s(s), num_heads, c.block_t, c.num_warps,
            c.num_stages, interpreted, work_signatures)


def _combine_block_s(s: Schedule) -> int:
    return _block_s(s.max_splits)


@functools.lru_cache(maxsize=None)
def _block_s(max_splits: int) -> int:
    return min(COMBINE_MAX_BLOCK_S, 1 << max(0, max_splits - 1).bit_length())


def run(launch: Launch):
    """Launch through Triton's dispatcher, which compiles on first sight of a specialization.
    Returns what the dispatcher returns (the CompiledKernel, when it compiled synchronously)."""
    return launch.kernel[launch.grid](*launch.args, **launch.options)


def _signature(t: torch.Tensor | None) -> tuple | None:
    return None if t is None else (t.dtype, t.data_ptr() & 15, t.stride())


def signatures(tensors) -> tuple:
    """``_signature`` of each tensor: what Triton specializes a tensor argument on, as in the keys."""
    return tuple(_signature(t) for t in tensors)


def call_key(plan: PlanConstants, q: torch.Tensor, cache: KVCache, kv_indptr: torch.Tensor | None,
             qo_indptr: torch.Tensor, out: torch.Tensor, lse: torch.Tensor | None,
             pages: PageTable | None = None) -> tuple:
    """What Triton's specialization of a call's kernels depends on, for a given plan (``launches``'
    arguments): each call tensor's dtype, 16-byte alignment and strides, and for a paged call its
    page size, the table's tensors, the specialization of its integers and the gathered loop's
    constexprs (``_gather_constexprs``: they also depend on the plan's grid, which ``plan_key`` does
    not hold). Every per-call argument of ``launches`` is one of these; the rest is the plan's."""
    extra = cache.scale if isinstance(cache, Fp8Cache) else cache.scales if isinstance(cache, Mxfp4Cache) else None
    key = (_signature(q), _signature(cache.data), _signature(extra), _signature(kv_indptr), _signature(qo_indptr),
           _signature(out), _signature(lse))
    if pages is None:
        return key
    table, page_stride, page_indptr, max_pages, num_pages, table_len, page_size, csr = page_arguments(pages, cache)
    # ``cache_arguments``' strides: fp8 views keep 1-byte elements.
    scale_stride = cache.scales.stride(0) if isinstance(cache, Mxfp4Cache) else None
    return key + (page_size, csr, _signature(pages.seq_lens), _signature(table), _signature(page_indptr),
                  _int_spec(page_stride), _int_spec(max_pages), _int_spec(num_pages), _int_spec(table_len),
                  _gather_constexprs(plan, page_size, q.device, cache, cache.data.stride(0), scale_stride, table_len))


def launch_compiled(kernel: CompiledKernel, grid: tuple, stream: int, args: tuple) -> None:
    """Launch a kernel the dispatcher compiled (and loaded) through its own launcher: ``args``
    holds every parameter in order, as for the dispatcher; no launch hooks."""
    kernel.run(grid[0], grid[1] if len(grid) > 1 else 1, grid[2] if len(grid) > 2 else 1, stream, kernel.function,
               kernel.packed_metadata, None, None, None, *args)


#: ``CudaLauncher.__call__`` of the Triton releases whose launcher ``bound_launch`` calls past it
#: (whitespace removed): it only allocates the scratch buffers a kernel asks for (none of ours
#: does) and calls its ``launch`` with the cooperative-grid and PDL flags of the kernel. Any other
#: source (another Triton) goes through ``__call__``, as ``launch_compiled`` does.
_KNOWN_LAUNCHER_CALL = (
    "def__call__(self,gridX,gridY,gridZ,stream,function,*args):defallocate_scratch(size,align,allocator):"
    "ifsize>0:grid_size=gridX*gridY*gridZalloc_size=grid_size*self.num_ctas*sizealloc_fn=allocator.get()"
    "returnalloc_fn(alloc_size,align,stream)returnNoneglobal_scratch=allocate_scratch(self.global_scratch_size,"
    "self.global_scratch_align,_allocation._allocator)profile_scratch=allocate_scratch(self.profile_scratch_size,"
    "self.profile_scratch_align,_allocation._profile_allocator)self.launch(gridX,gridY,gridZ,stream,function,"
    "self.launch_cooperative_grid,self.launch_pdl,global_scratch,profile_scratch,*args)")


@functools.lru_cache(maxsize=None)
def launcher_call_is_known(cls: type) -> bool:
    """Whether ``cls.__call__`` (a compiled kernel's launcher class) is ``_KNOWN_LAUNCHER_CALL``."""
    try:
        source = inspect.getsource(cls.__call__)
    except (OSError, TypeError, AttributeError):
        return False
    return "".join(source.split()) == _KNOWN_LAUNCHER_CALL


def launcher_binding(kernel: CompiledKernel, own_scratch: bool = False) -> tuple:
    """``(fn, head)``: what ``bound_launch`` binds of a compiled kernel whatever its arguments, the
    launcher function and the arguments it takes before the kernel's own (none a tensor). Where
    the launcher's ``__call__`` is a known one with no scratch to allocate, ``fn`` is the compiled
    launch function under it; with ``own_scratch`` the caller puts its own global scratch address
    into ``head`` (index 3, None here), so a kernel that needs global scratch is bound that way too."""
    runner = kernel.run
    tail = (kernel.packed_metadata, None, None, None)
    direct = (launcher_call_is_known(type(runner))
              and (own_scratch or getattr(runner, "global_scratch_size", 1) == 0)
              and getattr(runner, "profile_scratch_size", 1) == 0)
    if direct:
        return runner.launch, (kernel.function, runner.launch_cooperative_grid, runner.launch_pdl, None, None) + tail
    return runner, (kernel.function,) + tail


#: Argument types that are never a tensor (``bind`` passes them as they are).
_SCALAR_TYPES = frozenset({int, float, bool, type(None)})


def bind(binding: tuple, grid: tuple, args: tuple) -> tuple:
    """``bound_launch`` of a kernel whose ``launcher_binding`` is ``binding``."""
    fn, head = binding
    # Every call of a one-call decode binds its launches anew: a list comprehension that asks the
    # plain scalars (most arguments) for their type first costs half of a generator's isinstance
    # tests, and still takes the address of any tensor, subclasses included.
    args = [a if type(a) in _SCALAR_TYPES else a.data_ptr() if isinstance(a, torch.Tensor) else a for a in args]
    return fn, grid[0], grid[1] if len(grid) > 1 else 1, grid[2] if len(grid) > 2 else 1, head + tuple(args)


def bound_launch(kernel: CompiledKernel, grid: tuple, args: tuple) -> tuple:
    """``(fn, grid_x, grid_y, grid_z, rest)`` such that ``fn(grid_x, grid_y, grid_z, stream, *rest)``
    does what ``launch_compiled(kernel, grid, stream, args)`` does, with fewer Python layers: tensor
    arguments become their addresses (the launcher takes an int for a pointer, and would otherwise
    ask each tensor for it), and ``fn`` is the one of ``launcher_binding``. The result holds no
    tensor."""
    return bind(launcher_binding(kernel), grid, args)


def _has_hooks(hook) -> bool:
    # Triton 3.6 keeps its launch hooks as a (normally empty) HookChain; older ones used None.
    return hook is not None and bool(getattr(hook, "calls", True))


class CompiledLaunches:
    """Compiled kernels per key and CUDA device, so that only the first call of each key goes
    through the dispatcher (the key: ``(plan_key, call_key)``; the most recent ``capacity`` kept),
    each kept as its ``launcher_binding``, which is the same for every call.

    The dispatcher also runs when a launch hook is set (a profiler's), so that the hook sees the
    launch, and when it did not hand back a compiled kernel (asynchronous compilation).
    current_device, current_stream: how to find where to launch (default: Triton's active driver,
    which asks torch; the current device's current stream, as the dispatcher launches).
    """

    def __init__(self, current_device=None, current_stream=None, capacity: int = 256):
        self._kernels: dict[tuple, list] = {}
        self._capacity = capacity
        self._current_device = current_device
        self._current_stream = current_stream

    def launch(self, launches: list[Launch], key: tuple):
        """Launch ``launches`` (their call key ``key``). Returns a ``Repeat`` of them (launching
        the same kernels with the same arguments again through ``bound_launch``'s ``bind``, or
        with other outputs), or None when the dispatcher ran them and handed back no compiled
        kernel (a launch hook is set, or compilation is asynchronous)."""
        if self._current_device is None:
            driver = triton.runtime.driver.active
            self._current_device, self._current_stream = driver.get_current_device, driver.get_current_stream
        device = self._current_device()
        bindings = None if _hooked() else self._kernels.get((device, key))
        launched = bindings is None
        if launched:
            compiled = [run(one) for one in launches]
            if _hooked() or not all(isinstance(k, CompiledKernel) for k in compiled):
                return None
            # Compiled now: the repeat is built from the new bindings, so the next identical call
            # repeats this one instead of going through every check again.
            bindings = self._kernels[(device, key)] = [launcher_binding(k) for k in compiled]
            if len(self._kernels) > self._capacity:  # dicts keep insertion order: drop the oldest
                del self._kernels[next(iter(self._kernels))]
        bound = [bind(binding, one.grid, one.args) for binding, one in zip(bindings, launches)]
        # The outputs' positions in each bound argument list, after the launcher's own arguments.
        outputs = [tuple(len(b[4]) - len(one.args) + i for i in one.outputs) for b, one in zip(bound, launches)]
        repeat = Repeat(bound, outputs, device, self._current_device, self._current_stream)
        if not launched:
            repeat()
        return repeat


class Repeat:
    """Bound launches that ran once (``CompiledLaunches.launch``), to run again on the current
    stream of the device they ran on. It holds addresses and scalars, no tensor: the caller keeps
    what they point at alive and unchanged in layout.

    ``repeat()`` launches them with the same arguments; ``repeat.with_outputs(out, lse)`` with the
    output at address ``out`` and the lse at ``lse`` instead (None: a call that writes no lse, as
    the one that ran; the lse argument then holds the output, as ``launches`` makes it), for a
    call whose other arguments are the same addresses and layouts and whose outputs have the
    layouts, alignment and dtypes of the first ones. Both return True, or False without launching
    when a launch hook is set or the current device is another (then launch anew)."""

    __slots__ = ("_bound", "_outputs", "_device", "_current_device", "_current_stream")

    def __init__(self, bound: list, outputs: list, device, current_device, current_stream):
        self._bound, self._outputs, self._device = bound, outputs, device
        self._current_device, self._current_stream = current_device, current_stream

    def __call__(self) -> bool:
        if _hooked() or self._current_device() != self._device:
            return False
        stream = self._current_stream(self._device)
        for fn, gx, gy, gz, rest in self._bound:
            fn(gx, gy, gz, stream, *rest)
        return True

    def with_outputs(self, out: int, lse: int | None) -> bool:
        if _hooked() or self._current_device() != self._device:
            return False
        stream = self._current_stream(self._device)
        for (fn, gx, gy, gz, rest), at in zip(self._bound, self._outputs):
            if at:
                rest = list(rest)
                rest[at[0]] = out
                rest[at[1]] = out if lse is None else lse
            fn(gx, gy, gz, stream, *rest)
        return True


def _hooked() -> bool:
    runtime = triton.knobs.runtime
    return _has_hooks(runtime.launch_enter_hook) or _has_hooks(runtime.launch_exit_hook)


#: The compiled kernels of every plan.
SHARED = CompiledLaunches()
