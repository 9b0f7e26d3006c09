"""The Triton kernels' tuned shapes per cache format.

The numbers come from the H200 sweeps recorded in docs/PERF.md's design log, which also records
the variants that were tried and dropped.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ...schedule import MAX_BLOCK_R, MIN_BLOCK_R, block_rows


@dataclass(frozen=True)
class KernelConfig:
    """Kernel shape for one format. block_t: cached tokens per loop step; num_warps, num_stages:
    Triton launch options; items_per_sm and min_chunk: the split policy (``mixmla.schedule``)."""

    block_t: int = 32
    num_warps: int = 4
    num_stages: int = 2
    items_per_sm: float = 2.0
    min_chunk: int = 64


#: Defaults per format, the fastest in the H200 sweeps (bench/results/2026-11-30-*/sweep*.jsonl).
#: items_per_sm matches how many programs of that shape fit on an SM at once (shared memory: bf16
#: and fp8 168 and 164 KB, so one; MXFP4 111 KB, two): more work items than resident slots only
#: adds a partial result to merge.
DEFAULT_CONFIGS = {
    "bf16": KernelConfig(block_t=64, num_warps=4, num_stages=3, items_per_sm=1.0),
    "fp8": KernelConfig(block_t=64, num_warps=4, num_stages=3, items_per_sm=1.0),
    "mxfp4": KernelConfig(block_t=64, num_warps=4, num_stages=2, items_per_sm=2.0),
}


def default_config(fmt: str, rows_max: int = MIN_BLOCK_R) -> KernelConfig:
    """``DEFAULT_CONFIGS[fmt]``, adapted to 64-row programs (H >= 64, or Lq * H >= 64): 2 pipeline
    stages (3 would not fit an SM's shared memory) and 8 warps (with 4, the 64 x 512 float32
    accumulator is 256 registers per thread and spills; docs/PERF.md, design log step 17)."""
    config = DEFAULT_CONFIGS[fmt]
    if block_rows(rows_max) >= MAX_BLOCK_R:
        config = replace(config, num_stages=min(config.num_stages, 2), num_warps=max(config.num_warps, 8))
    return config
