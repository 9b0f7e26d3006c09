"""The Gluon backend: the Hopper kernel of ``decode`` behind the interface of ``kernels.backend``.

What it serves (``unsupported`` says why not, otherwise): an sm_90 GPU, fp8 (e4m3fn) and MXFP4
caches, contiguous or paged (pages of a power-of-two number of tokens, block table or CSR), 16
query rows per request (16 heads, one query token), at most ``launch.MAX_BATCH`` requests. 'auto' (``AUTO_MIN_TOKENS``) hands it the layouts where it measured faster than the
Triton kernels on the H200; smaller batches go to Triton, whose per-call cost is lower there.
"""

from __future__ import annotations

import functools

import numpy as np
import torch

from ..backend import Backend, BackendPlan, Layout
from . import launch

#: Layouts with at least this many cached tokens in all go to this backend under 'auto': on the
#: H200 (2026-12-01, bench/studies/hopper_round2.py) it was faster than the Triton kernels for fp8
#: and MXFP4 from 32 x 8192 and 256 x 1024 tokens up, and slower below (its fixed cost per call).
AUTO_MIN_TOKENS = 262144
#: A program gets at least this many cost units (64-token tiles plus each request's fixed cost)
#: when the batch is small, so a request is not cut into more pieces than it has tiles.
MIN_UNITS_PER_PROGRAM = 4
#: ``grid_size`` takes a request-aligned grid when it keeps at least this share of the programs.
ALIGNED_MIN_SHARE = 0.875


def grid_size(kv_lens: np.ndarray, full: int) -> int:
    """Programs of the persistent grid for requests of ``kv_lens`` cached tokens ((batch,) ints) on
    a GPU that holds ``full`` programs at once.

    At most ``full``, and at least ``MIN_UNITS_PER_PROGRAM`` cost units per program. When every
    request costs the same, the count is rounded down to a multiple of the batch (or, for more
    requests than programs, to a divisor of it) if that keeps at least ``ALIGNED_MIN_SHARE`` of
    it: the kernel cuts the units into equal ranges, so then no program holds pieces of two
    requests, and each pays one piece's start, end and share of the merge instead of two
    (docs/PERF.md, step 71). A smaller share would cost more in programs than it saves in pieces
    on long requests (half the grid leaves one program per SM, without the other's overlap).
    """
    batch = int(kv_lens.shape[0])
    costs = (kv_lens + 63) // 64 + launch.REQUEST_COST_TILES
    cap = max(1, min(full, -(-int(costs.sum()) // MIN_UNITS_PER_PROGRAM)))
    if batch == 0 or (costs != costs[0]).any():
        return cap
    aligned = batch * (cap // batch) if batch <= cap else next(d for d in range(cap, 0, -1) if batch % d == 0)
    return aligned if aligned >= ALIGNED_MIN_SHARE * cap else cap


class HopperPlan(BackendPlan):
    """The Hopper kernel's compiled specializations for one layout (``decoders``, without a
    workspace: shared by the layout's plans), and a plan's ``workspace``: the partial results in
    the owner's float32 buffer (``use_workspace``), the piece counts its own."""

    config = None
    schedule = None
    indptr_dtypes = (torch.int32,)  # the kernel's signature types the indptrs as i32 (compile.SIGNATURE)

    def __init__(self, layout: Layout):
        sms = torch.cuda.get_device_properties(layout.device).multi_processor_count
        # Per (page-table form, lse): contiguous plans launch form 0; paged plans form 1 (block
        # table) or 2 (CSR), whichever run_paged gets. One workspace and one grid: they never run
        # at once, and every form of a layout has the same programs per SM.
        forms = (1, 2) if layout.page_size else (0, )
        per_sm = launch.programs_per_sm(launch.HopperDecoder.spec_of(layout.batch, layout.fmt, forms[0],
                                                                     page_size=layout.page_size))
        programs = grid_size(layout.kv_lens, per_sm * sms)
        self.sm_scale = layout.sm_scale
        self._device = layout.device
        self._batch = layout.batch
        self._programs = programs
        self.workspace = None
        self.decoders = {(form, lse): launch.HopperDecoder(layout.batch, layout.num_heads, layout.fmt, layout.device,
                                                           write_lse=lse, programs=programs, paged=form,
                                                           allocate=False, page_size=layout.page_size)
                         for form in forms for lse in (False, True)}
        self._scratch = max(d.scratch_per_program for d in self.decoders.values())
        self.workspace_floats = launch.workspace_floats(programs, self._scratch)

    def fresh(self) -> "HopperPlan":
        other = HopperPlan.__new__(HopperPlan)
        other.__dict__.update(self.__dict__)  # the compiled decoders are shared: they hold no workspace
        other.workspace = None
        return other

    def use_workspace(self, buffer: torch.Tensor | None, offset: int = 0) -> None:
        # The counts are the plan's own: a workspace may be shared with plans that leave anything
        # in it, and the counts must start at zero.
        block, at = launch.counter_part(self._batch, self._device)
        self.workspace = launch.Workspace.of(buffer, block, self._programs, offset, self._scratch, at)

    def _check_call(self, cache, q, out) -> None:
        reason = launch.cache_unsupported(cache)
        if reason is not None:
            raise ValueError(f"cache: the Hopper kernel {reason}; plan with backend='triton'")
        reason = launch.call_unsupported(q, out)
        if reason is not None:
            raise ValueError(f"{reason}; pass a contiguous tensor, or plan with backend='triton'")

    def run(self, q, cache, kv_indptr, qo_indptr, out, lse):
        self._check_call(cache, q, out)
        return self._launch(self.decoders[0, lse is not None].bound(q, cache, kv_indptr, qo_indptr, out, lse,
                                                                    self.sm_scale, workspace=self.workspace))

    def run_paged(self, q, cache, pages, qo_indptr, out, lse):
        self._check_call(cache, q, out)
        # The kernel bounds a request's tokens by its pages in int32.
        capacity = pages.table.shape[-1] if pages.page_indptr is None else pages.table.shape[0]
        if capacity * pages.page_size >= 2 ** 31:
            raise ValueError(f"pages: the Hopper kernel addresses fewer than 2**31 tokens per request, the table "
                             f"holds {capacity} pages of {pages.page_size}; plan with backend='triton'")
        form = 1 if pages.page_indptr is None else 2
        return self._launch(self.decoders[form, lse is not None].bound(
            q, cache, pages.seq_lens, qo_indptr, out, lse, self.sm_scale, table=pages.table,
            page_indptr=pages.page_indptr, page_size=pages.page_size, workspace=self.workspace))

    def _launch(self, launch_on):
        """Launch on the current stream; returns the repeat ``BackendPlan.run`` describes."""
        device = self._device
        launch_on(launch.current_stream(device))

        def again() -> bool:
            if torch.cuda.current_device() != device.index:
                return False
            launch_on(launch.current_stream(device))
            return True

        return again


def capability(device: torch.device) -> tuple[int, int] | None:
    """The compute capability of a CUDA ``device`` (None for other devices), asked of torch once."""
    return _cuda_capability(device.index if device.index is not None else torch.cuda.current_device()) \
        if device.type == "cuda" else None


@functools.lru_cache(maxsize=None)
def _cuda_capability(index: int) -> tuple[int, int]:
    # Asked at every plan; torch answers it from the device's properties, which cost a few us each.
    return torch.cuda.get_device_capability(index)


class GluonBackend(Backend):
    name = "gluon"

    def unsupported(self, layout: Layout) -> str | None:
        return launch.layout_unsupported(capability(layout.device), layout.fmt, layout.num_heads, layout.rows_max,
                                         layout.batch, layout.page_size)

    def plan(self, layout: Layout, config=None) -> HopperPlan:
        if config is not None:
            raise ValueError("config: the Hopper kernel has no kernel-shape options; leave config=None")
        return HopperPlan(layout)

    def preferred(self, layout: Layout) -> bool:
        """Whether 'auto' should pick this backend for ``layout`` (measured faster there)."""
        # Paged layouts follow the contiguous rule: paged reads cost this kernel less than the gap
        # to the Triton kernels on those layouts (docs/PERF.md, step 43).
        # The size first: it is one comparison, and decides most plans.
        return layout.total_kv >= AUTO_MIN_TOKENS and self.unsupported(layout) is None


BACKEND = GluonBackend()
