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
def _schedule_on_device(device: torch.device, nsplit: bytes, rows_max: int, block_r: int, row_blocks: int,
                        config: KernelConfig, num_heads: int, sm_scale: float) -> dict:
    """What a ``TritonPlan`` derives from its layout (``TritonPlan._LAYOUT_PARTS``) for the chunk
    counts ``nsplit`` (int32 bytes): the ``Schedule``, its (work_req, work_split, work_nsplit,
    split_indptr) int32 on device (copied in one transfer) and their launch signatures, the
    workspace size and the launch key's layout part. Cached: everything here depends on the
    chunk counts, not the lengths (which grow a little from one step of a serving loop to the
    next while the counts stay), so a plan of new lengths with known counts makes no copy and
    recomputes nothing. The device tensors are only ever read; plans copy the dict's entries into
    their own ``__dict__`` (``_parts``: the dict itself, what ``TritonPlan.fresh`` copies)."""
    s = schedule_of_splits(np.frombuffer(nsplit, dtype=np.int32), rows_max, block_r, row_blocks)
    arrays = (s.work_req, s.work_split, s.work_nsplit, s.split_indptr)
    packed = torch.from_numpy(np.concatenate(arrays)).to(device)
    work, start = [], 0
    for a in arrays:
        work.append(packed[start:start + a.shape[0]])
        start += a.shape[0]
    work = tuple(work)
    signatures = launch.signatures(work)
    direct_constants = None
    if s.direct:  # no workspace: the launch constants are the same for every plan of these counts
        unused = _unused_workspace(device)
        direct_constants = launch.PlanConstants(s, work, (unused, unused), sm_scale, num_heads, config, INTERPRETED)
    parts = dict(config=config, schedule=s, _work=work, _work_signatures=signatures, _device=device,
                 _sm_scale=sm_scale, _num_heads=num_heads,
                 workspace_floats=0 if s.direct else s.num_work * s.rows_max * (VALUE_DIM + 1),
                 _layout_key=launch.layout_key(s, config, num_heads, INTERPRETED, signatures),
                 _direct_constants=direct_constants)
    parts["_parts"] = parts
    return parts


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
        c = config or default_config(layout.fmt, rows_max)
        block_r = block_rows(rows_max)
        row_blocks = -(-rows_max // block_r)
        nsplit = splits_per_request(layout.kv_lens, device_sm_count(layout.device) * c.items_per_sm / row_blocks,
                                    max(c.min_chunk, c.block_t), layout.total_kv)
        self.__dict__.update(_schedule_on_device(layout.device, nsplit.tobytes(), rows_max, block_r, row_blocks, c,
                                                 layout.num_heads, layout.sm_scale))

    def fresh(self) -> "TritonPlan":
        other = TritonPlan.__new__(TritonPlan)
        other.__dict__.update(self._parts)  # what __init__ derived from the layout, nothing use_workspace set
        return other

    def use_workspace(self, buffer: torch.Tensor | None, offset: int = 0) -> None:
        s = self.schedule
        if s.direct:
            # No partial buffers: the constants of every plan of these counts, and the shared
            # dummy's signature (launch.plan_key's).
            part_o = _unused_workspace(self._device)
            self.constants = self._direct_constants
            signature = launch._signature(part_o)
            self._key = self._layout_key + ((signature, signature),)
        else:
            rows = s.num_work * s.rows_max
            part_o = buffer.as_strided((s.num_work, s.rows_max, VALUE_DIM), (s.rows_max * VALUE_DIM, VALUE_DIM, 1),
                                       offset)
            part_lse = buffer.as_strided((s.num_work, s.rows_max), (s.rows_max, 1), offset + rows * VALUE_DIM)
            self.constants = launch.PlanConstants(s, self._work, (part_o, part_lse), self._sm_scale, self._num_heads,
                                                  self.config, INTERPRETED)
            self._key = self._layout_key + (launch.signatures((part_o, part_lse)),)  # launch.plan_key's
        # Compiled launches on CUDA, shared by every plan; the interpreter has nothing to compile.
        self._compiled = launch.SHARED if part_o.is_cuda and not INTERPRETED else None

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
