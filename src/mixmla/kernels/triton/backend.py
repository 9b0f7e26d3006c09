"""The Triton backend: plans with ``mixmla.schedule`` and the tuned shapes of ``configs``, keeps
each plan's constants on the device, and launches the kernels of ``launch``."""

from __future__ import annotations

import functools

import numpy as np
import torch

from ... import interpreter
from ...formats import VALUE_DIM
from ...schedule import block_rows, device_sm_count, schedule_of_splits, splits_per_request
from ..backend import Backend, BackendPlan, Layout
from . import launch
from .configs import KernelConfig, default_config

#: Whether the kernels were defined for Triton's interpreter (decided when Triton was imported).
INTERPRETED = interpreter.active()


@functools.lru_cache(maxsize=64)
def _schedule_on_device(device: torch.device, nsplit: bytes, rows_max: int, block_r: int, row_blocks: int) -> tuple:
    """``(Schedule, (work_req, work_split, work_nsplit, split_indptr) int32 on device, their
    launch signatures)`` of the chunk counts ``nsplit`` (int32 bytes), copied to the device in one
    transfer. Cached: a schedule
    depends on its chunk counts only (which stay the same while the lengths grow a little), so a
    new plan of the same counts makes no copy. The device tensors are only ever read."""
    s = schedule_of_splits(np.frombuffer(nsplit, dtype=np.int32), rows_max, block_r, row_blocks)
    arrays = (s.work_req, s.work_split, s.work_nsplit, s.split_indptr)
    packed = torch.from_numpy(np.concatenate(arrays)).to(device)
    work, start = [], 0
    for a in arrays:
        work.append(packed[start:start + a.shape[0]])
        start += a.shape[0]
    return s, tuple(work), launch.signatures(work)


@functools.lru_cache(maxsize=16)
def _unused_workspace(device: torch.device) -> torch.Tensor:
    """What a direct schedule passes for the partial buffers: the kernels never touch them then
    (``DIRECT`` is a constexpr), so every such plan on a device shares this one."""
    return torch.empty(1, dtype=torch.float32, device=device)


class TritonPlan(BackendPlan):
    """A layout's schedule, its work items and workspace on the device, and the kernel shape."""

    indptr_dtypes = (torch.int32, torch.int64)  # the kernels load either and widen to int64

    def __init__(self, layout: Layout, config: KernelConfig | None):
        rows_max = layout.rows_max
        self.config = c = config or default_config(layout.fmt, rows_max)
        block_r = block_rows(rows_max)
        row_blocks = -(-rows_max // block_r)
        nsplit = splits_per_request(layout.kv_lens, device_sm_count(layout.device) * c.items_per_sm / row_blocks,
                                    max(c.min_chunk, c.block_t), layout.total_kv)
        self.schedule, self._work, self._work_signatures = _schedule_on_device(
            layout.device, nsplit.tobytes(), rows_max, block_r, row_blocks)
        self._device, self._sm_scale, self._num_heads = layout.device, layout.sm_scale, layout.num_heads
        s = self.schedule
        self.workspace_floats = 0 if s.direct else s.num_work * s.rows_max * (VALUE_DIM + 1)
        self._layout_key = launch.layout_key(s, c, layout.num_heads, INTERPRETED, self._work_signatures)

    #: What ``__init__`` derives from the layout and config (``fresh`` copies these).
    _LAYOUT_PARTS = ("config", "schedule", "_work", "_work_signatures", "_device", "_sm_scale", "_num_heads",
                     "workspace_floats", "_layout_key")

    def fresh(self) -> "TritonPlan":
        other = TritonPlan.__new__(TritonPlan)
        mine = self.__dict__
        other.__dict__.update({name: mine[name] for name in self._LAYOUT_PARTS})
        return other

    def use_workspace(self, buffer: torch.Tensor | None, offset: int = 0) -> None:
        s = self.schedule
        if s.direct:
            part_o = part_lse = _unused_workspace(self._device)
        else:
            rows = s.num_work * s.rows_max
            part_o = buffer.as_strided((s.num_work, s.rows_max, VALUE_DIM), (s.rows_max * VALUE_DIM, VALUE_DIM, 1),
                                       offset)
            part_lse = buffer.as_strided((s.num_work, s.rows_max), (s.rows_max, 1), offset + rows * VALUE_DIM)
        self.constants = launch.PlanConstants(s, self._work, (part_o, part_lse), self._sm_scale, self._num_heads,
                                              self.config, INTERPRETED)
        # Compiled launches on CUDA, shared by every plan; the interpreter has nothing to compile.
        self._compiled = launch.SHARED if part_o.is_cuda and not INTERPRETED else None
        self._key = self._layout_key + (launch.signatures((part_o, part_lse)),)  # launch.plan_key's

    def run(self, q, cache, kv_indptr, qo_indptr, out, lse):
        return self._launch(q, cache, kv_indptr, qo_indptr, out, lse, None)

    def run_paged(self, q, cache, pages, qo_indptr, out, lse):
        return self._launch(q, cache, None, qo_indptr, out, lse, pages)

    def _launch(self, q, cache, kv_indptr, qo_indptr, out, lse, pages):
        launches = launch.launches(self.constants, q, cache, kv_indptr, qo_indptr, out, lse, pages)
        if self._compiled is None:
            for one in launches:
                launch.run(one)
            # The interpreter takes the tensors themselves, so this repeat keeps this call's alive
            # until the caller drops it.
            return functools.partial(_run_again, launches)
        key = launch.call_key(self.constants, q, cache, kv_indptr, qo_indptr, out, lse, pages)
        return self._compiled.launch(launches, (self._key, key))


def _run_again(launches) -> bool:
    for one in launches:
        launch.run(one)
    return True


class TritonBackend(Backend):
    name = "triton"
    out_dtypes = (torch.bfloat16, torch.float32)  # the output stores cast to out's dtype

    def unsupported(self, layout: Layout) -> str | None:
        device = layout.device
        if device.type == "cpu" and not INTERPRETED:
            return ("on CPU tensors the Triton kernels run only in Triton's interpreter: set TRITON_INTERPRET=1 in "
                    "the environment before triton is first imported (importing mixmla first does it without CUDA)")
        if device.type not in ("cpu", "cuda"):
            return f"unsupported device {device}; expected a CUDA device (or CPU with TRITON_INTERPRET=1)"
        return None

    def plan(self, layout: Layout, config: KernelConfig | None = None) -> TritonPlan:
        if config is not None and not isinstance(config, KernelConfig):
            raise TypeError(f"config must be a mixmla.KernelConfig (the Triton kernels' shape) or None for the "
                            f"tuned default, got {type(config).__name__} {config!r}")
        return TritonPlan(layout, config)


BACKEND = TritonBackend()
