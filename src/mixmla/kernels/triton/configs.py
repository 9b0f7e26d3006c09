"""The Triton kernels' tuned shapes per cache format.

The numbers come from the H200 sweeps recorded in docs/PERF.md's design log, which also records
the variants that were tried and dropped.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, replace

from ...schedule import MAX_BLOCK_R, MIN_BLOCK_R, block_rows

#: block_t is a power of two (``tl.arange``) from the smallest matrix-product side Triton takes ...
MIN_BLOCK_T = 16
#: ... to the largest tile whose decoded keys (block_t x 576 16-bit values) fit an H200's 228 KB of
#: shared memory; twice that would not.
MAX_BLOCK_T = 128
#: num_warps: a power of two up to a 1024-thread program.
MAX_NUM_WARPS = 32


def _int_field(name: str, value, low: int, high: int | None = None, power_of_two: bool = False) -> None:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"KernelConfig.{name} must be an int, got {type(value).__name__} {value!r}")
    value = int(value)
    if value < low or (high is not None and value > high) or (power_of_two and value & (value - 1)):
        kind = "a power of two" if power_of_two else "an int"
        bounds = f"in [{low}, {high}]" if high is not None else f">= {low}"
        raise ValueError(f"KernelConfig.{name} must be {kind} {bounds}, got {value}")


@dataclass(frozen=True)
class KernelConfig:
    """Kernel shape for one format, checked when made (TypeError/ValueError naming the field).

    block_t: cached tokens per loop step, a power of two in [MIN_BLOCK_T, MAX_BLOCK_T];
    num_warps (a power of two up to MAX_NUM_WARPS), num_stages (>= 1): Triton launch options;
    items_per_sm (finite, > 0: work items aimed at per SM) and min_chunk (>= 1 tokens): the split
    policy (``mixmla.schedule``). A shape can be valid here and still not fit a given GPU (shared
    memory, registers): that is a launch error, which ``kernels.triton.compile`` finds without one.
    """

    block_t: int = 32
    num_warps: int = 4
    num_stages: int = 2
    items_per_sm: float = 2.0
    min_chunk: int = 64

    def __post_init__(self):
        _int_field("block_t", self.block_t, MIN_BLOCK_T, MAX_BLOCK_T, power_of_two=True)
        _int_field("num_warps", self.num_warps, 1, MAX_NUM_WARPS, power_of_two=True)
        _int_field("num_stages", self.num_stages, 1)
        _int_field("min_chunk", self.min_chunk, 1)
        if isinstance(self.items_per_sm, bool) or not isinstance(self.items_per_sm, numbers.Real):
            raise TypeError(f"KernelConfig.items_per_sm must be a number, got {type(self.items_per_sm).__name__} "
                            f"{self.items_per_sm!r}")
        if not math.isfinite(self.items_per_sm) or self.items_per_sm <= 0:
            raise ValueError(f"KernelConfig.items_per_sm must be finite and > 0, got {self.items_per_sm!r}")


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


def config_fields(text: str | None, sep: str = ",") -> dict:
    """``KernelConfig`` fields from ``"field=value<sep>field=value"`` text (a command line's form):
    values with a '.' are floats, others ints. ValueError for an item without '=' or a field
    ``KernelConfig`` does not have; the values are checked when a config is made from them."""
    fields = {}
    for item in filter(None, (t.strip() for t in (text or "").split(sep))):
        name, eq, value = item.partition("=")
        name, value = name.strip(), value.strip()
        if not eq or not name or not value:
            raise ValueError(f"config field {item!r}: expected field=value")
        if name not in KernelConfig.__dataclass_fields__:
            raise ValueError(f"config field {name!r}: KernelConfig has {', '.join(KernelConfig.__dataclass_fields__)}")
        try:
            fields[name] = float(value) if "." in value else int(value)
        except ValueError:
            raise ValueError(f"config field {item!r}: {value!r} is not a number") from None
    return fields
