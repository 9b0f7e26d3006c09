"""The Triton backend: plans with ``mixmla.schedule`` and the tuned shapes of ``configs``, keeps
each plan's constants on the device, and launches the kernels of ``launch``."""

from __future__ import annotations

import numpy as np
import torch

from ... import interpreter
from ...formats import VALUE_DIM
from ...schedule import device_sm_count, make_schedule, rows_per_request
from ..backend import Backend, BackendPlan, Layout
from . import launch
from .configs import KernelConfig, default_config


def _device_int32(arrays, device: torch.device) -> list:
    """The int32 numpy ``arrays`` as int32 tensors on ``device``, copied in one transfer."""
    sizes = [a.shape[0] for a in arrays]
    packed = torch.from_numpy(np.concatenate(arrays).astype(np.int32, copy=False)).to(device)
    return list(torch.split(packed, sizes))


class TritonPlan(BackendPlan):
    """A layout's schedule, its work items and workspace on the device, and the kernel shape."""

    def __init__(self, layout: Layout, config: KernelConfig | None):
        self.config = config or default_config(layout.fmt, rows_per_request(layout.q_lens, layout.num_heads))
        c = self.config
        self.schedule = s = make_schedule(layout.kv_lens, layout.q_lens, layout.num_heads,
                                          device_sm_count(layout.device), c.items_per_sm, c.min_chunk, c.block_t)
        work = _device_int32([s.work_req, s.work_split, s.work_nsplit, s.split_indptr], layout.device)
        if s.direct:
            workspace = torch.empty(1, dtype=torch.float32, device=layout.device)
            part_o = part_lse = workspace
        else:
            # One allocation for both partial buffers.
            rows = s.num_work * s.rows_max
            workspace = torch.empty(rows * (VALUE_DIM + 1), dtype=torch.float32, device=layout.device)
            part_o = workspace[:rows * VALUE_DIM].view(s.num_work, s.rows_max, VALUE_DIM)
            part_lse = workspace[rows * VALUE_DIM:].view(s.num_work, s.rows_max)
        self.constants = launch.PlanConstants(s, tuple(work), (part_o, part_lse), layout.sm_scale, layout.num_heads,
                                              c, interpreter.active())

    def run(self, q, cache, kv_indptr, qo_indptr, out, lse) -> None:
        for one in launch.launches(self.constants, q, cache, kv_indptr, qo_indptr, out, lse):
            launch.run(one)


class TritonBackend(Backend):
    name = "triton"

    def unsupported(self, layout: Layout) -> str | None:
        device = layout.device
        if device.type == "cpu" and not interpreter.active():
            return ("on CPU tensors the Triton kernels run only in Triton's interpreter: set TRITON_INTERPRET=1 in "
                    "the environment before triton is first imported (importing mixmla first does it without CUDA)")
        if device.type not in ("cpu", "cuda"):
            return f"unsupported device {device}; expected a CUDA device (or CPU with TRITON_INTERPRET=1)"
        return None

    def plan(self, layout: Layout, config: KernelConfig | None = None) -> TritonPlan:
        return TritonPlan(layout, config)


BACKEND = TritonBackend()
