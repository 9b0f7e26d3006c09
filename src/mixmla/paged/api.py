"""Decode over paged caches: the block-table form (FlashMLA, vLLM) and the CSR form (FlashInfer,
SGLang), one call or planned (docs/SPEC.md §4).

The pool is page-major, ``(pages, P, width)``, and a page table says which pages each request owns
(``PageTable``). The planned form reads the lengths once on the host at plan time and keeps the
caller's table tensors by reference, so a serving loop rewrites them in place (a new token, a new
page) and replays ``run``: it reads no value on the host and allocates nothing, so it can be
captured in a CUDA graph. The kernels take every bound from the tables on the device, so a plan
stays correct as the lengths change; only its balance is that of the lengths it was made for.
"""

from __future__ import annotations

import numpy as np
import torch

from .. import validate
from ..api import (DecodePlan, _call_identity, _one_call_plan, _one_call_results, _plan_device, _planned, _readable,
                   _request_range)
from ..kernels.backend import PageTable
from . import validate as pvalidate


class PagedDecodePlan(DecodePlan):
    """A decode schedule for one batch of requests over a paged pool, its workspace allocated.

    Made by ``plan_paged`` or ``plan_paged_csr``. ``run(q, cache, out=None, return_lse=False)``
    launches the kernels with no host synchronization and no allocation (CUDA-graph capturable).

    Attributes as ``DecodePlan``'s (device, num_heads, fmt, total_q, batch, max_q_len, sm_scale,
    backend, config, schedule, qo_indptr, out, lse; total_kv: the cached tokens at plan time),
    plus page_size (tokens per page) and pages: the ``PageTable`` of the caller's tensors, read by
    every ``run`` (rewrite them in place between runs; same shapes).
    """

    def __init__(self, pages: PageTable, qo_indptr=None, num_heads: int = 16, fmt: str = "bf16",
                 sm_scale: float | None = None, config=None, backend: str = "auto",
                 _checked: pvalidate.PagedInputs | None = None):
        if _checked is None:
            validate.check_num_heads(num_heads)
            if fmt not in validate.FORMATS:
                raise ValueError(f"fmt must be one of {validate.FORMATS}, got {fmt!r}")
            scale = validate.check_sm_scale(sm_scale)
            if qo_indptr is not None:
                validate.check_indptr("qo_indptr", qo_indptr, device=pages.seq_lens.device,
                                      batch=pages.seq_lens.shape[0], check_values=False)
            total_q = None
            kv_lens, qo_host = pvalidate.check_values(pages, None, qo_indptr, total_q, None)
        else:
            scale, kv_lens, qo_host = _checked.sm_scale, _checked.kv_lens, _checked.qo_ptr
        self._setup(pages.seq_lens.device, kv_lens, qo_host, num_heads, fmt, scale, config, backend,
                    page_size=pages.page_size)
        _check_table_dtypes(pages, self.backend, self.indptr_dtypes)
        self.page_size = pages.page_size
        self.pages = pages
        self.total_kv = int(kv_lens.sum())
        self.kv_indptr = None
        self.qo_indptr = self._device_int32(qo_indptr, qo_host)

    def rebind(self, pages: PageTable) -> None:
        """Read another page table of the same kind, batch and page size from now on (tensors of
        a dtype the kernels read, on the plan's device): metadata only, no sync, so an engine that
        hands over new table tensors each step keeps one plan (and its captured graphs: a graph
        captured before keeps reading the tensors it was captured with)."""
        old = self.pages
        if (pages.page_indptr is None) != (old.page_indptr is None) or pages.page_size != old.page_size:
            raise ValueError("pages: a plan keeps its table form (block table or CSR) and page size")
        if pages.seq_lens.shape != old.seq_lens.shape or (old.page_indptr is not None
                                                         and pages.page_indptr.shape != old.page_indptr.shape):
            raise ValueError(f"pages: the plan was made for batch {self.batch}, got seq_lens of shape "
                             f"{tuple(pages.seq_lens.shape)}")
        for name, t in (("seq_lens", pages.seq_lens), ("page table", pages.table), ("kv_indptr", pages.page_indptr)):
            if t is not None and (t.dtype not in self.indptr_dtypes or not validate._same_device(t.device, self.device)):
                raise ValueError(f"pages: {name} must be {self.indptr_dtypes} on {self.device}, got {t.dtype} on "
                                 f"{t.device}")
        if old.page_indptr is None:
            pvalidate.block_table_pages(pages.table, pages.seq_lens, pages.page_size, self.device)
        else:
            pvalidate.csr_pages(pages.page_indptr, pages.table, pages.seq_lens, pages.page_size, self.device)
        self.pages = pages

    def run(self, q: torch.Tensor, cache, out: torch.Tensor | None = None, return_lse: bool = False,
            check: bool = False, lse: torch.Tensor | None = None):
        """Decode attention for the planned batch over the pool ``cache``.

        q: (total_q, H, 576) bf16 on the plan's device (stride(-1) == 1). cache: the pool in the
        plan's format with the plan's page size (see ``mixmla.formats.as_paged_cache``). out:
        optional contiguous (total_q, H, 512) bf16 (default: the plan's own ``self.out``). Returns
        out, or ``(out, lse)`` with lse (total_q, H) float32, natural log (``-inf`` where a query
        sees no cached token), written into ``lse`` when given (contiguous (total_q, H) float32,
        implies return_lse), else into the plan's own ``self.lse``.

        Every call checks the metadata (no sync); the values of the page table, the plan's
        qo_indptr and the fp8 scale are the caller's promise, checked only with ``check=True`` (one
        host read, a sync; RuntimeError inside a CUDA graph capture) with the rules of
        ``mixmla.paged.validate``. Even unchecked, the kernels never read outside the pool: a
        length past its request's pages is cut to them and a page entry outside the pool reads
        nothing (the output is then wrong, not a crash).
        """
        target = self.out if out is None else out
        lse_out = (self.lse if lse is None else lse) if return_lse or lse is not None else None
        pages = self.pages
        # As in DecodePlan.run: a call with the last call's pointers and layouts repeats its launches.
        identity = _call_identity(q, cache, target, lse_out, lse is None, self.qo_indptr, pages.seq_lens,
                                  pages.table, pages.page_indptr)
        if not check and self._repeated(identity):
            return (target, lse_out) if lse_out is not None else target
        paged = pvalidate.check_run_inputs(self, q, cache, out)
        if lse is not None:
            if not isinstance(lse, torch.Tensor) or lse.dtype != torch.float32 or \
                    tuple(lse.shape) != (self.total_q, self.num_heads) or not lse.is_contiguous() or \
                    not validate._same_device(lse.device, self.device):
                raise ValueError(f"lse must be a contiguous ({self.total_q}, {self.num_heads}) float32 tensor on "
                                 f"{self.device}, got {getattr(lse, 'dtype', type(lse).__name__)} "
                                 f"{tuple(getattr(lse, 'shape', ()))}")
            return_lse = True
        if check:
            if q.device.type == "cuda" and torch.cuda.is_current_stream_capturing():
                raise RuntimeError("PagedDecodePlan.run(check=True) reads the page table on the host, which a CUDA "
                                   "graph capture does not allow; check once before capturing")
            pvalidate.check_values(self.pages, paged.num_pages, self.qo_indptr, self.total_q, self.max_q_len, paged)
        out = self.out if out is None else out
        lse = (self.lse if lse is None else lse) if return_lse else None
        self._remember(identity, self._plan.run_paged(q, paged.rows, pages, self.qo_indptr, out, lse), paged, cache)
        return (out, lse) if return_lse else out

    def __repr__(self) -> str:
        return super().__repr__().replace("DecodePlan(", f"PagedDecodePlan(page_size={self.page_size}, ", 1)


def plan_paged(block_table: torch.Tensor, seq_lens: torch.Tensor, page_size: int,
               qo_indptr: torch.Tensor | None = None, num_heads: int = 16, fmt: str = "bf16",
               sm_scale: float | None = None, config=None, backend: str = "auto") -> PagedDecodePlan:
    """Plan paged decode in the block-table form (reads seq_lens and qo_indptr on the host once).

    block_table: (batch, max_pages) int32/int64: token ``t`` of request ``b`` is row ``t %
    page_size`` of page ``block_table[b, t // page_size]``. seq_lens: (batch,) int32/int64 cached
    tokens per request (<= max_pages * page_size). Both on the device the plan runs on, kept by
    reference. page_size: tokens per page of the pool ``run`` gets. qo_indptr: (batch+1,) query
    tokens per request as prefix sums (None: one each). num_heads, fmt, sm_scale, config,
    backend: as for ``mixmla.plan`` ('auto' runs paged caches on the Triton kernels; 'gluon'
    takes the Hopper kernel, which reads pages of a power-of-two number of tokens).
    """
    pages = pvalidate.block_table_pages(block_table, seq_lens, page_size)
    return PagedDecodePlan(pages, qo_indptr, num_heads, fmt, sm_scale, config, backend)


def plan_paged_csr(kv_indptr: torch.Tensor, kv_indices: torch.Tensor, kv_len: torch.Tensor, page_size: int,
                   qo_indptr: torch.Tensor | None = None, num_heads: int = 16, fmt: str = "bf16",
                   sm_scale: float | None = None, config=None, backend: str = "auto") -> PagedDecodePlan:
    """Plan paged decode in the CSR form (FlashInfer's and SGLang's; page_size 1 is SGLang's).

    kv_indptr: (batch+1,) prefix sums over pages; kv_indices: the page indices, request ``b``'s
    being ``kv_indices[kv_indptr[b]:kv_indptr[b+1]]``; kv_len: (batch,) cached tokens per request
    (<= its pages * page_size). All int32/int64 on the plan's device, kept by reference. The rest
    as for ``plan_paged``.
    """
    pages = pvalidate.csr_pages(kv_indptr, kv_indices, kv_len, page_size)
    return PagedDecodePlan(pages, qo_indptr, num_heads, fmt, sm_scale, config, backend)


def _check_table_dtypes(pages: PageTable, backend: str, dtypes: tuple) -> None:
    """The page table's tensors must be of ``dtypes``, what the chosen backend's kernels read."""
    for name, t in (("seq_lens" if pages.page_indptr is None else "kv_len", pages.seq_lens),
                    ("page table", pages.table), ("kv_indptr", pages.page_indptr)):
        if t is not None and t.dtype not in dtypes:
            raise TypeError(f"{name} has dtype {t.dtype}, but the {backend} kernels read {dtypes}")


def _decode(q, cache, pages_of, qo_indptr, sm_scale, out, return_lse, config, backend):
    """A one-call paged decode: check everything (values included), plan, run. As ``mla_decode``:
    no ``PagedDecodePlan`` is made, the layout's backend plan runs on the one-call workspace
    (``_planned``, ``for_one_call``), and only the results returned are allocated."""
    q = validate.check_q(q)
    paged = pvalidate.check_cache(cache, None, q.device)
    pages = pages_of(paged.page_size, q.device)
    checked = pvalidate.checked_decode_inputs(q, paged, pages, qo_indptr, sm_scale, out)
    device = _plan_device(q.device)
    planned = _planned(device, checked.num_heads, paged.format, checked.sm_scale, checked.kv_lens, checked.qo_ptr,
                       paged.page_size, config, backend)
    ready = _one_call_plan(planned, device, out)
    dtypes = ready.indptr_dtypes
    _check_table_dtypes(pages, planned.backend.name, dtypes)
    out, lse = _one_call_results(checked.total_q, checked.num_heads, device, out, return_lse)
    qo = _request_range(device, pages.seq_lens.shape[0]) if qo_indptr is None else \
        _readable(qo_indptr, checked.qo_ptr, device, dtypes)
    ready.run_paged(q, paged.rows, pages, qo, out, lse)
    return (out, lse) if return_lse else out


def mla_decode_paged(q: torch.Tensor, cache, block_table: torch.Tensor, seq_lens: torch.Tensor, *,
                     qo_indptr: torch.Tensor | None = None, sm_scale: float | None = None,
                     out: torch.Tensor | None = None, return_lse: bool = False, config=None, backend: str = "auto"):
    """MLA decode attention over a paged pool, block-table form, in one call (checks every value:
    one host read; for serving loops use ``plan_paged``).

    q: (total_q, H, 576) bf16, H in {16, 32, 64, 128}. cache: the pool, page-major (bf16 (pages, P,
    576) or (pages, P, 1, 576); (fp8 (pages, P, 576), scale); (MXFP4 bytes (pages, P, 288), E8M0
    scales (pages, P, >=18)); or a ``PagedCache``); P is read from its shape. block_table (batch,
    max_pages), seq_lens (batch,): int32/int64 (``plan_paged``). qo_indptr: (batch+1,) (None: one
    query token per request); with Lq > 1 query tokens, token i sees positions 0 .. Lk-Lq+i, as
    ``mla_decode``. sm_scale: default 1/sqrt(576). out: optional contiguous (total_q, H, 512) bf16.
    Returns out and, with ``return_lse``, lse (total_q, H) float32 natural log. Bad input (a page
    entry a request uses outside the pool, a length beyond the table's capacity, ...) is a
    ValueError naming the argument before anything runs.
    """
    return _decode(q, cache, lambda P, dev: pvalidate.block_table_pages(block_table, seq_lens, P, dev), qo_indptr,
                   sm_scale, out, return_lse, config, backend)


def mla_decode_paged_csr(q: torch.Tensor, cache, kv_indptr: torch.Tensor, kv_indices: torch.Tensor,
                         kv_len: torch.Tensor, *, qo_indptr: torch.Tensor | None = None,
                         sm_scale: float | None = None, out: torch.Tensor | None = None, return_lse: bool = False,
                         config=None, backend: str = "auto"):
    """``mla_decode_paged`` in the CSR form: kv_indptr (batch+1,) over pages, kv_indices (pages
    used,), kv_len (batch,) cached tokens (``plan_paged_csr``). Page size 1 is SGLang's layout."""
    return _decode(q, cache, lambda P, dev: pvalidate.csr_pages(kv_indptr, kv_indices, kv_len, P, dev), qo_indptr,
                   sm_scale, out, return_lse, config, backend)


__all__ = ["PagedDecodePlan", "plan_paged", "plan_paged_csr", "mla_decode_paged", "mla_decode_paged_csr"]
