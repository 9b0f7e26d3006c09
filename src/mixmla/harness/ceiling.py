"""The HBM ceiling, measured at the start of every benchmark run on the same GPU.

Three streaming measurements over one ``nbytes`` float32 buffer (default 3 GiB, in the 2-8 GB
range where docs/SPEC.md found the H200's read rate flat at about 4.44 TB/s):

- ``torch.sum(x)``: reads ``nbytes`` (the 4-byte result write is ignored).
- a Triton grid-stride read kernel: each program sums its strided blocks and writes one float;
  reads ``nbytes``, writes ``4 * programs`` bytes (ignored).
- ``y.copy_(x)``: reads and writes ``nbytes`` each; reported as ``2 * nbytes / t`` (read + write),
  for information only.

The *read ceiling* is the better of the two read measurements: the fastest way we could find to
stream bytes from HBM. A kernel's achieved bandwidth is then reported as a share of it. Each
measurement is the median of ``reps`` event-timed runs after two warm-up runs; no L2 flush is
needed because the buffer is 60x the L2.
"""

from __future__ import annotations

import functools
from dataclasses import asdict, dataclass

from .stats import median

__all__ = ["Ceiling", "measure_hbm_ceiling", "triton_read_sum"]

DEFAULT_BYTES = 3 << 30


@dataclass(frozen=True)
class Ceiling:
    """Measured streaming rates in GB/s (1e9 bytes per second).

    read_gbps: the ceiling, ``max(torch_sum_gbps, triton_read_gbps)``. copy_gbps counts read + write.
    nbytes: buffer size in bytes. method: which read measurement gave the ceiling.
    """

    read_gbps: float
    torch_sum_gbps: float
    triton_read_gbps: float | None
    copy_gbps: float
    nbytes: int
    method: str

    def as_dict(self) -> dict:
        return asdict(self)


@functools.lru_cache(maxsize=None)
def _read_kernel():
    """Build the Triton kernel on first use (so importing this module does not import Triton, and
    TRITON_INTERPRET set by then is honoured)."""
    import triton
    import triton.language as tl

    @triton.jit
    def read_sum(x_ptr, partial_ptr, n, programs, ITERS: tl.constexpr, BLOCK: tl.constexpr):
        pid = tl.program_id(0)
        acc = tl.zeros([BLOCK], dtype=tl.float32)
        # A constexpr trip count: one compile per buffer size, and the Triton 3.6 interpreter
        # (which cannot take a runtime loop bound under numpy >= 2.4) runs it too.
        for i in range(0, ITERS):
            # Block i*programs + pid: consecutive programs read consecutive blocks.
            offs = (i * programs + pid).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
            acc += tl.load(x_ptr + offs, mask=offs < n, other=0.0)
        tl.store(partial_ptr + pid, tl.sum(acc, axis=0))

    return read_sum


def triton_read_sum(x, programs: int | None = None, block: int = 4096):
    """Sum of a contiguous float32 tensor ``x`` (any shape) by the grid-stride read kernel.

    programs: grid size (default 16 per SM on CUDA, 4 on CPU/interpreter). block: elements per
    program per step (power of two). Returns a 0-d float32 tensor on ``x``'s device. Reads
    ``x.numel() * 4`` bytes once.
    """
    import torch

    if x.dtype != torch.float32 or not x.is_contiguous():
        raise ValueError(f"x must be a contiguous float32 tensor, got {x.dtype}, contiguous={x.is_contiguous()}")
    n = x.numel()
    if programs is None:
        programs = 16 * torch.cuda.get_device_properties(x.device).multi_processor_count if x.is_cuda else 4
    programs = max(1, min(programs, -(-n // block)))
    partial = torch.empty(programs, dtype=torch.float32, device=x.device)
    iters = -(-n // (programs * block))
    _read_kernel()[(programs,)](x, partial, n, programs, ITERS=iters, BLOCK=block, num_warps=8)
    return partial.sum()


def _time_us(fn, reps: int) -> float:
    import torch

    for _ in range(2):
        fn()
    torch.cuda.synchronize()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for s, e in zip(starts, ends):
        s.record()
        fn()
        e.record()
    torch.cuda.synchronize()
    return median([s.elapsed_time(e) * 1e3 for s, e in zip(starts, ends)])


def measure_hbm_ceiling(nbytes: int = DEFAULT_BYTES, reps: int = 10, device=None) -> Ceiling:
    """Measure the streaming read (and copy) rate of the current CUDA device; see the module doc.

    nbytes: buffer size in bytes (rounded down to a multiple of 4). Needs 2 * nbytes of free GPU
    memory for the copy. Returns a :class:`Ceiling` in GB/s.
    """
    import torch

    device = torch.device(device or "cuda")
    n = nbytes // 4
    nbytes = n * 4
    x = torch.ones(n, dtype=torch.float32, device=device)
    t_sum = _time_us(lambda: torch.sum(x), reps)
    try:
        t_triton = _time_us(lambda: triton_read_sum(x), reps)
        triton_gbps = nbytes / t_triton * 1e-3
    except Exception:  # the ceiling must not depend on Triton compiling here
        triton_gbps = None
    y = torch.empty_like(x)
    t_copy = _time_us(lambda: y.copy_(x), reps)
    del x, y
    torch.cuda.empty_cache()
    sum_gbps = nbytes / t_sum * 1e-3  # bytes / us * 1e-3 = GB/s
    copy_gbps = 2 * nbytes / t_copy * 1e-3
    if triton_gbps is not None and triton_gbps > sum_gbps:
        read, method = triton_gbps, "triton grid-stride read"
    else:
        read, method = sum_gbps, "torch.sum"
    return Ceiling(read, sum_gbps, triton_gbps, copy_gbps, nbytes, method)
