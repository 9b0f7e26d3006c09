"""Host side of the Hopper kernel: which calls it serves, its workspace, and the launch.

``HopperDecoder`` is made once per batch layout (batch size, heads, query rows, format, device);
``launch`` then enqueues exactly one kernel, with no host synchronization and no allocation, so it
can be captured in a CUDA graph. The kernel derives every request's bounds and its own share of
the work from the indptrs on the device, so the lengths may change from launch to launch.
"""

from __future__ import annotations

import functools
import threading
from typing import NamedTuple

import torch

from ...formats import Fp8Cache, KVCache, Mxfp4Cache
from ..backend import current_stream
from .compile import SIGNATURE, TILE_TOKENS, KernelSpec, compile_decode, staged

from ..constants import FMT_FP8, FMT_MXFP4
ROWS = 16  #: query rows per request the kernel covers (heads x query tokens)
PROGRAMS_PER_SM = 2
#: Fixed cost of a request, in units of one 64-token tile, in the work split between programs.
REQUEST_COST_TILES = 2
VALUE_DIM = 512


MAX_BATCH = 1024  #: larger batches are served by the portable kernel (the per-request tables live in registers)
#: The kernel's ``PAGED`` forms (``paging``): contiguous, block table, CSR.
PAGED_FORMS = (0, 1, 2)


#: The compiled launcher takes a placeholder for each specialization constant, after the arguments.
_CONSTEXPR_PLACEHOLDERS = (None, ) * sum(t == "constexpr" for t in SIGNATURE.values())


def _block_b(batch: int) -> int:
    return max(128, 1 << max(0, batch - 1).bit_length())


def shipped_specs() -> list[KernelSpec]:
    """Every kernel specialization ``HopperDecoder`` can ask for: paged ones in two, for pages
    smaller than a tile and for the others (``small_pages``)."""
    specs = []
    for fmt in (FMT_FP8.value, FMT_MXFP4.value):
        for block_b in (128, 256, 512, 1024):
            for write_lse in (True, False):
                for paged in PAGED_FORMS:
                    for small in sorted({small_pages(paged, p) for p in (1, TILE_TOKENS)}):
                        specs.append(KernelSpec(H=16, ROWS=ROWS, FORMAT=fmt, BLOCK_B=block_b, C0=REQUEST_COST_TILES,
                                                WRITE_LSE=write_lse, PAGED=paged, SMALL_PAGES=small))
    return specs


def shipped_kernels() -> list[tuple[KernelSpec, bool]]:
    """Every compiled kernel ``HopperDecoder`` can ask for, as ``(spec, staged)`` (CI compiles them
    all)."""
    return [(s, staged(s)) for s in shipped_specs()]


def small_pages(paged: int, page_size: int) -> bool:
    """Whether a kernel in page-table form ``paged`` reading pages of ``page_size`` tokens is
    ``KernelSpec.SMALL_PAGES``'s: pages smaller than a tile, which ``decode_tma`` (fp8) cannot stage
    with the copy engine (a copy is of consecutive rows) and where ``decode`` (MXFP4) asks L2 for
    a tile's scattered rows two tiles ahead."""
    return bool(paged) and page_size < TILE_TOKENS


def layout_unsupported(capability: tuple[int, int] | None, fmt: str, num_heads: int, rows_max: int,
                       batch: int, page_size: int = 0) -> str | None:
    """Why the Hopper kernel cannot serve a layout, or None. capability: the CUDA device's compute
    capability (None: not a CUDA device); rows_max: the most query rows (query tokens x heads) of
    any request; page_size: tokens per page of a paged cache (0: contiguous)."""
    if capability is None:
        return "runs on CUDA devices only"
    if tuple(capability) != (9, 0):
        return f"needs an sm_90 GPU (Hopper), got sm_{capability[0]}{capability[1]}"
    if fmt not in ("fp8", "mxfp4"):
        return f"reads fp8 and MXFP4 caches, not {fmt} (the Triton kernel reads bf16 at the memory ceiling)"
    if num_heads != 16 or rows_max > ROWS:
        return f"covers 16 heads and one query token per request, got {num_heads} heads and {rows_max} query rows"
    if batch > MAX_BATCH:
        return f"takes at most {MAX_BATCH} requests per call, got {batch}"
    if page_size < 0 or page_size & (page_size - 1):
        return f"reads pages of a power-of-two number of tokens, got page_size={page_size}"
    return None


def cache_unsupported(cache: KVCache) -> str | None:
    """Why the Hopper kernel cannot read ``cache``, or None."""
    if isinstance(cache, Fp8Cache):
        if cache.is_fnuz:
            return "reads e4m3fn fp8 caches, not e4m3fnuz"
        data = cache.data
    elif isinstance(cache, Mxfp4Cache):
        data = cache.data
    else:
        return f"reads fp8 and MXFP4 caches, not {cache.format}"
    if data.data_ptr() % 16 or (data.stride(0) * data.element_size()) % 32:
        return "needs cache rows at a 16-byte aligned address with a row stride that is a multiple of 32 bytes"
    if data.shape[0] >= 1 << 31:
        return "counts a paged pool's rows in int32: at most 2**31 - 1 rows"
    return None


def call_unsupported(q: torch.Tensor, out: torch.Tensor) -> str | None:
    """Why the Hopper kernel cannot take a call's query ``q`` (total_q, H, 576) bf16 or output
    ``out`` (total_q, H, 512), or None. The kernel is compiled for ``compile.DIVISIBILITY``: it
    loads a query row's columns 16 bytes at a time, so a query at an odd address or with row
    strides that are not multiples of 16 elements would be read wrongly, not refused."""
    if q.data_ptr() % 16 or q.stride(0) % 16 or q.stride(1) % 16:
        return (f"q: the Hopper kernel needs a 16-byte aligned query with strides (token, head) that are multiples "
                f"of 16 elements, got address {q.data_ptr()} (mod 16: {q.data_ptr() % 16}) and strides "
                f"{tuple(q.stride())}")
    if out.data_ptr() % 16:
        return f"out: the Hopper kernel needs a 16-byte aligned output, got address {out.data_ptr()}"
    return None


def programs_per_sm(spec: KernelSpec, staged_kernel: bool | None = None) -> int:
    """Programs of the kernel ``staged(spec, staged_kernel)`` names that run on one SM at once
    (shared memory and registers): one of two warpgroups for ``decode_tma``, two of one warpgroup
    for ``decode``."""
    return 1 if staged(spec, staged_kernel) else PROGRAMS_PER_SM


def _scratch_floats(programs: int, scratch_per_program: int) -> int:
    """float32 slots of ``programs`` x ``scratch_per_program`` bytes, rounded up to 256 bytes."""
    return -(-programs * scratch_per_program // 256) * 64


def workspace_floats(programs: int, scratch_per_program: int = 0) -> int:
    """float32 values of the workspace of a grid of ``programs`` (``Workspace``): the partial
    results it writes, after ``scratch_per_program`` bytes of global scratch per program (the
    tensor descriptors ``decode_tma`` makes on the device)."""
    return _scratch_floats(programs, scratch_per_program) + 2 * programs * ROWS * (VALUE_DIM + 1)


class Workspace(NamedTuple):
    """Where a launch writes its partial results and counts a request's pieces, as addresses:
    part_o (2 * programs, ROWS, 512) float32, part_lse (2 * programs, ROWS) float32, counters
    (2 * batch,) int32, zero before the first launch (every launch leaves them zero), scratch
    (the kernel's global scratch, programs x its ``global_scratch_size`` bytes; None without).
    ``tensors``: what holds them (kept alive with the workspace)."""

    part_o: int
    part_lse: int
    counters: int
    scratch: int | None
    tensors: tuple

    @classmethod
    def of(cls, buffer: torch.Tensor, counters: torch.Tensor, programs: int, offset: int = 0,
           scratch_per_program: int = 0, counters_at: int = 0) -> "Workspace":
        """The workspace in ``buffer[offset:offset + workspace_floats(programs, scratch_per_program)]``
        (float32, 256-byte aligned there: the scratch first) and the counts at int32 element
        ``counters_at`` of ``counters`` (``counter_part``, or a tensor of ``new_counters``)."""
        base = buffer.data_ptr() + 4 * offset
        part_o = base + 4 * _scratch_floats(programs, scratch_per_program)
        return cls(part_o, part_o + 4 * 2 * programs * ROWS * VALUE_DIM, counters.data_ptr() + 4 * counters_at,
                   base if scratch_per_program else None, (buffer, counters))


class HopperDecoder:
    """Compiled kernel (and by default workspace) for one batch layout.

    batch: requests; num_heads: H; fmt: 'fp8' or 'mxfp4'; device: a CUDA device; write_lse: also
    write the log-sum-exp; programs: size of the persistent grid (default: all that fit at once,
    ``programs_per_sm``); paged: the
    page-table form ``launch`` gets (0 none, 1 block table, 2 CSR); page_size: tokens per page of
    the paged caches it will read (a paged fp8 decoder for pages of at least ``TILE_TOKENS``
    refuses smaller ones); allocate: make its own ``workspace`` (otherwise every launch is given one);
    staged_kernel: ``compile.staged``'s (None: the kernel that serves the layout; True:
    ``decode_tma`` for a contiguous MXFP4 cache, which is not yet faster, for measurements and
    tests). ``launch(...)`` writes ``out`` (and ``lse``).
    """

    def __init__(self, batch: int, num_heads: int, fmt: str, device: torch.device, write_lse: bool = True,
                 programs: int | None = None, paged: int = 0, allocate: bool = True,
                 staged_kernel: bool | None = None, page_size: int = 0):
        self.batch = int(batch)
        self.num_heads = int(num_heads)
        # With its index: the launch asks for the current stream of exactly this device.
        self.device = device if device.type != "cuda" or device.index is not None else \
            torch.device("cuda", torch.cuda.current_device())
        self.spec = self.spec_of(self.batch, fmt, paged, self.num_heads, write_lse, page_size)
        self.format = self.spec.FORMAT
        #: Whether the kernel is ``decode_tma``'s (tiles staged in shared memory), not ``decode``'s.
        self.staged = staged(self.spec, staged_kernel)
        self.programs = programs or programs_per_sm(self.spec, self.staged) * torch.cuda.get_device_properties(
            device).multi_processor_count
        self.kernel = compile_decode(self.spec, self.staged)
        #: Bytes of global scratch per program the kernel takes from the workspace.
        self.scratch_per_program = _scratch_of(self.kernel)
        self._dummy_scale = _unit_scale(self.device)
        if allocate:
            block, at = counter_part(self.batch, self.device)
            buffer = torch.empty(workspace_floats(self.programs, self.scratch_per_program), dtype=torch.float32,
                                 device=self.device)
            self.workspace = Workspace.of(buffer, block, self.programs, 0, self.scratch_per_program, at)
        else:
            self.workspace = None

    @staticmethod
    def spec_of(batch: int, fmt: str, paged: int = 0, num_heads: int = 16, write_lse: bool = True,
                page_size: int = 0) -> KernelSpec:
        """The kernel specialization a decoder of these parameters compiles."""
        code = {"fp8": FMT_FP8.value, "mxfp4": FMT_MXFP4.value}[fmt]
        return KernelSpec(H=int(num_heads), ROWS=ROWS, FORMAT=code, BLOCK_B=_block_b(int(batch)), C0=REQUEST_COST_TILES,
                          WRITE_LSE=bool(write_lse), PAGED=int(paged),
                          SMALL_PAGES=small_pages(int(paged), int(page_size)))

    def arguments(self, q: torch.Tensor, cache: KVCache, kv_indptr: torch.Tensor, qo_indptr: torch.Tensor,
                  out: torch.Tensor, lse: torch.Tensor | None, sm_scale: float, table: torch.Tensor | None = None,
                  page_indptr: torch.Tensor | None = None, page_size: int = 0,
                  workspace: Workspace | None = None) -> tuple:
        """The kernel's arguments for ``launch``'s inputs (pointers as addresses), in ``SIGNATURE``
        order with the specialization constants' placeholders; ``workspace``: default the
        decoder's own."""
        work = workspace or self.workspace
        if isinstance(cache, Mxfp4Cache):
            data, scales, fp8_scale = cache.data, cache.scales, self._dummy_scale
            sc_stride = scales.stride(0)
        else:
            data = scales = cache.data
            fp8_scale, sc_stride = cache.scale, 0
        kv_stride_words = data.stride(0) * data.element_size() // 4
        if self.spec.PAGED:
            pages = table
            offsets = page_indptr if self.spec.PAGED == 2 else table
            page_stride = table.stride(0) if self.spec.PAGED == 1 else 0
            max_pages = table.shape[1] if self.spec.PAGED == 1 else 0
            if self.staged and not self.spec.SMALL_PAGES and page_size < TILE_TOKENS:
                raise ValueError(f"page_size: this decoder reads pages of at least {TILE_TOKENS} tokens, got "
                                 f"{page_size}")
            num_pages, page_shift = data.shape[0] // page_size, page_size.bit_length() - 1
        else:  # placeholders the contiguous kernel never reads
            pages = offsets = kv_indptr
            page_stride = max_pages = num_pages = page_shift = 0
        lse_t, lse_stride = (lse.data_ptr(), lse.stride(0)) if lse is not None else (work.part_lse, 0)
        return (q.data_ptr(), q.stride(0), q.stride(1),
                data.data_ptr(), kv_stride_words, scales.data_ptr(), sc_stride, fp8_scale.data_ptr(),
                kv_indptr.data_ptr(), qo_indptr.data_ptr(),
                pages.data_ptr(), offsets.data_ptr(), page_stride, max_pages, num_pages, page_shift,
                out.data_ptr(), out.stride(0), out.stride(1), lse_t, lse_stride,
                work.part_o, work.part_lse, work.counters,
                self.batch, float(sm_scale)) + _CONSTEXPR_PLACEHOLDERS

    def bound(self, *args, **kwargs):
        """A function of a CUDA stream handle that launches the kernel on ``launch``'s inputs
        (``arguments``) on that stream."""
        fn, head = _binding(self.kernel)
        if self.scratch_per_program:  # the launcher's global scratch argument: the workspace's
            work = kwargs.get("workspace") or self.workspace
            head = head[:_SCRATCH_AT] + (work.scratch, ) + head[_SCRATCH_AT + 1:]
        rest = head + self.arguments(*args, **kwargs)
        grid = self.programs

        def launch_on(stream) -> None:
            fn(grid, 1, 1, stream, *rest)

        return launch_on

    def launch(self, q: torch.Tensor, cache: KVCache, kv_indptr: torch.Tensor, qo_indptr: torch.Tensor,
               out: torch.Tensor, lse: torch.Tensor | None, sm_scale: float, table: torch.Tensor | None = None,
               page_indptr: torch.Tensor | None = None, page_size: int = 0) -> None:
        """q (total_q, H, 576) bf16; cache Fp8Cache (e4m3fn) or Mxfp4Cache; kv_indptr, qo_indptr
        (batch+1,) int32 on the device; out (total_q, H, 512) bf16; lse (total_q, H) float32 or None
        (then the spec must have write_lse False, or lse points at a scratch buffer).

        Paged (the decoder's ``paged`` form): kv_indptr is the cached-token counts (batch,) int32,
        the cache holds ``num_pages * page_size`` rows (page-major), table the block table (batch,
        max_pages) int32 with unit last stride or the CSR page indices int32, page_indptr (CSR
        only) (batch+1,) int32; page_size a power of two.
        """
        self.bound(q, cache, kv_indptr, qo_indptr, out, lse, sm_scale, table, page_indptr,
                   page_size)(current_stream(self.device))


def counter_part(batch: int, device: torch.device) -> tuple[torch.Tensor, int]:
    """The piece counts of a workspace, ``(block, at)``: the (2 * batch,) int32 zeros at element
    ``at`` of the int32 tensor ``block``, which no other workspace uses; every launch leaves them
    zero (a request's last merger resets its two counts: the pieces arrived, the mergers done).

    They are cut from a zeroed block of the current stream (``_COUNTER_BLOCKS``), each part handed
    out once, so that a plan does not pay the host cost of a fill kernel's launch of its own (a
    ``torch.zeros`` costs an allocation and a launch), nor of a tensor view (the kernel takes an
    address); a new block is zeroed when one runs out. The block's fill is queued on the stream
    the counts are taken on, before any launch there that reads them, as a ``torch.zeros`` of
    their own would be. A workspace keeps its block alive."""
    n = 2 * max(1, batch)
    if n > COUNTER_BLOCK // 4:
        return torch.zeros(n, dtype=torch.int32, device=device), 0
    key = (device, current_stream(device))
    with _COUNTER_LOCK:
        block = _COUNTER_BLOCKS.get(key)
        if block is None or block[1] + n > COUNTER_BLOCK:
            if len(_COUNTER_BLOCKS) >= 16 and key not in _COUNTER_BLOCKS:
                _COUNTER_BLOCKS.pop(next(iter(_COUNTER_BLOCKS)))
            block = [torch.zeros(COUNTER_BLOCK, dtype=torch.int32, device=device), 0]
            _COUNTER_BLOCKS[key] = block
        start = block[1]
        block[1] = start + -(-n // 4) * 4  # 16-byte aligned parts
    return block[0], start


def new_counters(batch: int, device: torch.device) -> torch.Tensor:
    """``counter_part``'s counts as a (2 * batch,) int32 tensor (a view of its block)."""
    block, at = counter_part(batch, device)
    return block[at:at + 2 * max(1, batch)]


#: int32 counts per zeroed block of ``counter_part`` (256 KB: the counts of 32 plans of the largest
#: batch, or 512 of 64 requests).
COUNTER_BLOCK = 1 << 16
#: Per (device, stream): ``[block, next free count]``. A block lives while a workspace holds one of
#: its parts.
_COUNTER_BLOCKS: dict = {}
_COUNTER_LOCK = threading.Lock()


@functools.lru_cache(maxsize=16)
def _unit_scale(device: torch.device) -> torch.Tensor:
    """The fp8 scale MXFP4 launches pass (never read): one per device."""
    return torch.ones(1, dtype=torch.float32, device=device)


def _scratch_of(kernel) -> int:
    """Bytes of global scratch per program a compiled kernel takes (Triton's metadata)."""
    return int(getattr(getattr(kernel, "metadata", None), "global_scratch_size", 0) or 0)


#: Where the launcher's global scratch pointer is in ``_binding``'s head (after the function and the
#: cooperative and dependent-launch flags).
_SCRATCH_AT = 3


@functools.lru_cache(maxsize=None)
def _binding(kernel) -> tuple:
    from ..triton.launch import launcher_binding

    fn, head = launcher_binding(kernel, own_scratch=True)
    if _scratch_of(kernel) and fn is kernel.run:
        raise RuntimeError("the installed Triton's kernel launcher is not the one mixmla knows, so the staged Hopper "
                           "kernel cannot be given its global scratch; use backend='triton'")
    return fn, head
