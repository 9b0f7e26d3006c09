"""The seam between the public API and the kernels: a backend interface and the registry that
picks one at plan time.

``mixmla.api`` checks the arguments, reads the indptrs once and describes the batch as a
:class:`Layout`; the chosen :class:`Backend` turns it into a :class:`BackendPlan` (schedule,
device-side constants, workspace, kernel arguments bound where they can be), and ``run`` launches
that plan's kernels. Everything a backend needs beyond the layout and the run-time tensors is its
own business. A backend lives in ``mixmla.kernels.<name>.backend`` and exposes ``BACKEND``, an
instance of :class:`Backend`; ``get_backend`` imports it on first use.
"""

from __future__ import annotations

import abc
import importlib
import sys
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import torch

#: Backends a caller may name; 'auto' picks one for the layout (see ``get_backend``).
BACKENDS = ("triton", "gluon")
BACKEND_CHOICES = ("auto",) + BACKENDS


@dataclass(frozen=True)
class Layout:
    """What a plan is made for, already checked by the API.

    device: where the kernels run (a CUDA device with its index, or CPU). num_heads: H. fmt:
    'bf16', 'fp8' or 'mxfp4', the cache format ``run`` will get. sm_scale: the softmax scale
    (natural-log units). kv_lens, q_lens: (batch,) int64 numpy arrays, cached tokens and query
    tokens per request (host copies of the indptrs' differences). page_size: 0 for the contiguous
    layout (``BackendPlan.run``), else the tokens per page of a paged cache (``run_paged``).
    """

    device: torch.device
    num_heads: int
    fmt: str
    sm_scale: float
    kv_lens: np.ndarray
    q_lens: np.ndarray
    page_size: int = 0

    @property
    def batch(self) -> int:
        return int(self.kv_lens.shape[0])

    @property
    def max_q_len(self) -> int:
        """The most query tokens of a request, at least 1 (every backend serves one per request)."""
        # Memoized by hand: functools.cached_property takes a lock per read, which costs more here.
        value = self.__dict__.get("_max_q_len")
        if value is None:
            value = self.__dict__["_max_q_len"] = max(1, int(self.q_lens.max(initial=0)))
        return value

    @property
    def rows_max(self) -> int:
        """Query rows (Lq * H) of the longest request: what a program's rows must cover."""
        return self.max_q_len * self.num_heads

    @property
    def total_kv(self) -> int:
        """Cached tokens of the whole batch."""
        value = self.__dict__.get("_total_kv")
        if value is None:
            value = self.__dict__["_total_kv"] = int(self.kv_lens.sum())
        return value


def current_stream(device: torch.device):
    """The raw handle of ``device``'s current stream (None for a device that is not CUDA). Triton's
    driver asks torch for it without the Stream object ``torch.cuda.current_stream`` makes."""
    if device.type != "cuda":
        return None
    import triton

    return triton.runtime.driver.active.get_current_stream(device.index)


class PageTable(NamedTuple):
    """Where a paged call's tokens are (docs/SPEC.md §4), already checked by the API: token ``t``
    of request ``b`` is row ``t % page_size`` of page ``table[b, t // page_size]`` (a block table,
    ``page_indptr`` None) or ``table[page_indptr[b] + t // page_size]`` (CSR).

    seq_lens: (batch,) int32/int64 cached tokens per request. table: the block table (batch,
    max_pages) (unit last stride) or the CSR page indices (pages used,), int32/int64. page_indptr:
    None or (batch+1,) int32/int64 prefix sums over ``table``. page_size: tokens per page (>= 1).
    All on the plan's device; the values may differ from the plan's lengths, as for the indptrs.
    """

    seq_lens: torch.Tensor
    table: torch.Tensor
    page_indptr: torch.Tensor | None
    page_size: int


class BackendPlan(abc.ABC):
    """One layout made ready to launch. ``config`` is the backend's kernel shape (for Triton a
    ``KernelConfig``); ``schedule`` the ``mixmla.schedule.Schedule`` of its work items, or None
    when the backend does not split that way. ``indptr_dtypes``: the dtypes its kernels read the
    indptrs as (the API converts the plan's own indptrs to int32 and rejects a replacement of
    another dtype, since converting it in ``run`` would allocate)."""

    config: object
    schedule: object
    indptr_dtypes: tuple = (torch.int32,)
    #: float32 values of device workspace the plan takes from its owner (``use_workspace``), who
    #: can then allocate it together with the outputs in one allocation.
    workspace_floats: int = 0

    def fresh(self) -> "BackendPlan | None":
        """Another plan of the same layout and config, without a workspace yet (``use_workspace``
        not called), sharing this one's layout-derived parts (schedule, device constants); None
        when the backend does not make plans that way (then the API calls ``Backend.plan``
        again). Must not share anything that ``use_workspace`` or ``run`` changes."""
        return None

    def use_workspace(self, buffer: torch.Tensor | None, offset: int = 0) -> None:
        """Take ``buffer[offset:offset + workspace_floats]`` (a float32 device tensor, 256-byte
        aligned there) as the plan's workspace; None when ``workspace_floats`` is 0. Called once,
        before the first run. The owner keeps the buffer from being reused by anything else while
        the plan's launches may run (the plan's lifetime, or stream order for a one-call plan)."""

    @abc.abstractmethod
    def run(self, q: torch.Tensor, cache, kv_indptr: torch.Tensor, qo_indptr: torch.Tensor, out: torch.Tensor,
            lse: torch.Tensor | None):
        """Launch the kernels: no host synchronization, no allocation, so that the call can be
        captured in a CUDA graph. Returns None, or a function of no arguments that launches the
        same kernels on the same tensors again (the caller knows they are the same: equal
        pointers and layouts) and returns True, or False when it cannot (launch hooks set, another
        current device): then the caller calls ``run``. It may also have ``with_outputs(out, lse)``
        (addresses; lse None as in this call), which does the same with the outputs elsewhere, for
        a one-call decode whose every other argument is the same (``kernels.triton.launch.Repeat``).

        q (total_q, H, 576) bf16 (stride(-1) == 1); cache: the layout's format as a
        ``mixmla.formats`` container; kv_indptr, qo_indptr (batch+1,) of ``indptr_dtypes`` on the
        device (their values may differ from the layout's lengths, within the API's contract); out
        (total_q, H, 512) contiguous, of one of the backend's ``out_dtypes``, written; lse
        (total_q, H) float32 natural log, written when given. All arguments are checked by the
        API before the call.
        """

    def run_paged(self, q: torch.Tensor, cache, pages: PageTable, qo_indptr: torch.Tensor, out: torch.Tensor,
                  lse: torch.Tensor | None):
        """``run`` for a paged cache (a plan of a layout with ``page_size`` > 0): ``cache`` holds
        the pool's pages as ``num_pages * page_size`` rows, ``pages`` says where each request's
        tokens are. Same rules otherwise (no sync, no allocation). Backends that do not read page
        tables say so in ``unsupported``. Returns what ``run`` returns."""
        raise NotImplementedError(f"{type(self).__name__} does not read paged caches")


class Backend(abc.ABC):
    """A way of running the decode kernels."""

    name: str
    #: The dtypes of ``out`` its plans write. bf16 is the result; a float32 ``out`` holds the
    #: normalized output before that last rounding, for callers that merge partial results
    #: further (``mixmla.distributed``).
    out_dtypes: tuple = (torch.bfloat16,)

    @abc.abstractmethod
    def unsupported(self, layout: Layout) -> str | None:
        """Why this backend cannot run ``layout`` (a sentence for the user), or None."""

    @abc.abstractmethod
    def plan(self, layout: Layout, config=None) -> BackendPlan:
        """Make ``layout`` ready to launch; ``config`` overrides the backend's kernel shape."""

    def preferred(self, layout: Layout) -> bool:
        """Whether backend='auto' should choose this backend over Triton for ``layout``."""
        return False


_LOADED: dict = {}


def _load(chosen: str, name: str) -> Backend:
    backend = _LOADED.get(chosen)
    if backend is None:
        module_name = f"{__package__}.{chosen}.backend"
        try:
            # sys.modules first: import_module's own lookup costs a few us, and plans ask every time.
            backend = (sys.modules.get(module_name) or importlib.import_module(module_name)).BACKEND
        except (ImportError, AttributeError) as err:
            raise ValueError(f"backend={name!r}: the {chosen} backend is not available in this installation "
                             f"({module_name}: {err}); backend='triton' serves every layout") from err
        if chosen == "triton":  # others are looked up each time (sys.modules answers), so one can be stood in
            _LOADED[chosen] = backend
    return backend


def get_backend(name: str, layout: Layout, config=None) -> Backend:
    """The backend ``name`` ('auto', 'triton' or 'gluon') for ``layout``. 'auto' is the Gluon
    (Hopper) backend where it says it is faster for the layout (``preferred``), else Triton; with
    a ``config`` (a kernel shape, which only the Triton kernels take) 'auto' is Triton.

    Raises ValueError naming the argument when the name is unknown, the backend is not part of
    this installation, or it cannot run the layout.
    """
    if not isinstance(name, str) or name not in BACKEND_CHOICES:
        raise ValueError(f"backend must be one of {BACKEND_CHOICES}, got {name!r}")
    if name == "auto":
        try:
            gluon = _load("gluon", name)
        except ValueError:  # not in this installation: Triton serves everything
            gluon = None
        use_gluon = gluon is not None and config is None and gluon.preferred(layout)
        backend = gluon if use_gluon else _load("triton", name)
    else:
        backend = _load(name, name)
    reason = backend.unsupported(layout)
    if reason is not None:
        raise ValueError(f"backend={name!r} cannot run this plan: {reason}")
    return backend
