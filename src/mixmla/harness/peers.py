"""The implementations timed side by side: ours and the peers a user would pick instead.

Each implementation says whether it can run here (:meth:`Impl.unavailable`, e.g. "not installed")
and, per case and cache format, prepares (untimed) two callables:

- ``call()``: what a user calls per decode step; timed for *call latency*. For us that is the
  whole ``custom_kernel(data, fmt)`` (paged: ``plan_paged(...).run``); for peers the per-step
  call after their one-time setup (FlashInfer's ``plan``, FlashMLA's metadata, the paged view), as
  a serving loop would do it.
- ``gpu()``: the device work, captured in a CUDA graph for *GPU time* (for us ``DecodePlan.run``
  into a preallocated output).

Both return the output (total_q, H, 512) bf16. Setup that cannot do a case raises
:class:`Unsupported` with the reason.

- ``mixmla``: this project (``bf16``, ``fp8``, ``mxfp4`` and ``auto`` = what ``custom_kernel``
  picks).
- ``torch``: the plain PyTorch a user writes first: dequantize the cache to bf16, then batched
  matmul, float32 softmax, matmul (padded ``bmm`` for uniform batches, a per-request loop for
  ragged ones). All three formats.
- ``flashinfer``: ``flashinfer.mla.BatchMLAPagedAttentionWrapper(workspace, backend="fa3")``, page
  size 1, bf16 and fp8 (``float8_e4m3fn``) caches, as docs/DEVELOPING.md describes; on a paged
  case (``mixmla bench --paged``) the same shuffled pool as mixmla's paged path.
- ``flashmla``: DeepSeek's ``flash_mla_with_kvcache``, bf16, page size 64. Not on PyPI (it needs
  a CUDA build with CUTLASS headers), so it is usually reported as not installed.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from typing import Callable

from ..formats import FORMATS, HEAD_DIM, VALUE_DIM

__all__ = ["Unsupported", "Prepared", "Impl", "Mixmla", "TorchBaseline", "FlashInfer", "FlashMLA",
           "IMPLS", "PEER_NAMES", "make_impl"]


class Unsupported(Exception):
    """This implementation cannot run this case (the message says why)."""


@dataclass
class Prepared:
    """call / gpu: see the module doc. out: the buffer ``gpu()`` writes, if preallocated (the
    harness poisons it with NaN before checking). fmt: the cache format read, None if unknown
    (then the output is checked against every format's reference)."""

    call: Callable
    gpu: Callable
    out: object | None
    fmt: str | None
    note: str = ""


class Impl:
    """Base class. name: short id; formats: the paths it offers."""

    name = ""
    formats: tuple[str, ...] = ()

    def unavailable(self) -> str | None:
        """None when usable here, else the reason (e.g. ``"not installed: ..."``)."""
        return None

    def prepare(self, case, fmt: str) -> Prepared:
        raise NotImplementedError


def _lengths(indptr) -> list[int]:
    ptr = [int(v) for v in indptr.tolist()]
    return [b - a for a, b in zip(ptr, ptr[1:])]


def _out_like(case):
    import torch

    return torch.empty(case.total_q, case.num_heads, VALUE_DIM, dtype=torch.bfloat16, device=case.q.device)


# ----------------------------------------------------------------------------------------------
class Mixmla(Impl):
    """This project: ``mixmla.api.custom_kernel(data, fmt)`` (call latency) and
    ``mixmla.api.plan(...).run`` into a preallocated output (GPU time).

    Path ``auto`` times ``custom_kernel(data)``; its GPU time is that of the plan for the format
    ``mixmla.api.choose_format`` says it picks, and its output is checked against that format's
    reference. (Without ``choose_format`` the whole call is graph-captured and the output is
    checked against every format's reference.)"""

    name = "mixmla"
    formats = ("bf16", "fp8", "mxfp4", "auto")

    def prepare(self, case, fmt: str) -> Prepared:
        from .. import api

        data = case.data
        q, kv_data, qo_indptr, kv_indptr, _ = data
        if case.page_size:
            return self._prepare_paged(case, fmt)
        note = ""
        if fmt == "auto":
            call = lambda: api.custom_kernel(data)  # noqa: E731
            choose = getattr(api, "choose_format", None)
            if choose is None:
                return Prepared(call, call, None, None)
            fmt = choose(kv_data, q)
            note = f"auto picks {fmt}"
        else:
            call = lambda: api.custom_kernel(data, fmt=fmt)  # noqa: E731
        plan = api.plan(kv_indptr, qo_indptr, num_heads=case.num_heads, fmt=fmt, sm_scale=case.sm_scale,
                        device=q.device)
        note = "; ".join(filter(None, (note, f"{plan.backend} backend")))
        cache, out = case.cache(fmt), _out_like(case)
        return Prepared(call, lambda: plan.run(q, cache, out=out), out, fmt, note)

    @staticmethod
    def _prepare_paged(case, fmt: str) -> Prepared:
        """The paged path on the case's cache in shuffled pages: ``plan_paged`` once, then its
        ``run`` per call (latency: what a serving loop calls per step, as FlashInfer's ``run``
        after its ``plan``) and into a preallocated output (GPU time). The one-call
        ``mla_decode_paged``, which checks the page table's values on the host every call, is
        timed by ``bench/host_cost.py --paged``."""
        from .. import paged as paged_api

        if fmt == "auto":
            raise Unsupported("auto is custom_kernel, the contiguous benchmark entry point")
        q, _, qo_indptr, _, _ = case.data
        pb = case.paged(fmt)
        qo = None if case.total_q == pb.seq_lens.shape[0] else qo_indptr
        plan = paged_api.plan_paged(pb.block_table, pb.seq_lens, case.page_size, qo, case.num_heads, fmt,
                                    case.sm_scale)
        out = _out_like(case)

        return Prepared(lambda: plan.run(q, pb.cache), lambda: plan.run(q, pb.cache, out=out), out, fmt,
                        f"paged, page {case.page_size}, pages shuffled; {plan.backend} backend")


# ----------------------------------------------------------------------------------------------
class TorchBaseline(Impl):
    """Dequantize, then matmul + softmax + matmul in plain PyTorch (bf16 operands, float32 softmax)."""

    name = "torch"
    formats = FORMATS

    def prepare(self, case, fmt: str) -> Prepared:
        import torch

        from ..formats import dequantize

        if case.page_size:
            raise Unsupported("the plain PyTorch baseline reads the contiguous layout only")
        q, _, qo_indptr, kv_indptr, _ = case.data
        cache, scale, H = case.cache(fmt), case.sm_scale, case.num_heads
        q_lens, kv_lens = _lengths(qo_indptr), _lengths(kv_indptr)
        B = len(kv_lens)
        if len(set(q_lens)) == 1 and len(set(kv_lens)) == 1:
            lq, lk = q_lens[0], kv_lens[0]
            # Query i of a request sees rows 0 .. lk - lq + i.
            hidden = torch.arange(lk, device=q.device)[None, :] > (lk - lq + torch.arange(lq, device=q.device))[:, None]
            mask = hidden[None, :, None, :] if lq > 1 else None  # (1, Lq, 1, Lk)

            def call():
                k = dequantize(cache, torch.bfloat16).view(B, lk, HEAD_DIM)
                s = torch.bmm(q.view(B, lq * H, HEAD_DIM), k.transpose(1, 2)).float() * scale
                if mask is not None:
                    s = s.view(B, lq, H, lk).masked_fill(mask, float("-inf")).view(B, lq * H, lk)
                p = torch.softmax(s, dim=-1).nan_to_num_(0.0).to(torch.bfloat16)
                return torch.bmm(p, k[:, :, :VALUE_DIM]).view(B * lq, H, VALUE_DIM)

            return Prepared(call, call, None, fmt, "padded bmm")

        q_ptr, kv_ptr = [int(v) for v in qo_indptr.tolist()], [int(v) for v in kv_indptr.tolist()]

        def call_loop():
            k_all = dequantize(cache, torch.bfloat16)
            out = torch.zeros(case.total_q, H, VALUE_DIM, dtype=torch.bfloat16, device=q.device)
            for b in range(B):
                q0, q1, k0, k1 = q_ptr[b], q_ptr[b + 1], kv_ptr[b], kv_ptr[b + 1]
                lq, lk = q1 - q0, k1 - k0
                if lq == 0 or lk == 0:
                    continue
                k = k_all[k0:k1]
                s = torch.einsum("qhd,kd->qhk", q[q0:q1], k).float() * scale
                hidden = torch.arange(lk, device=q.device)[None, :] > (lk - lq + torch.arange(lq, device=q.device))[:, None]
                s = s.masked_fill(hidden[:, None, :], float("-inf"))
                p = torch.softmax(s, dim=-1).nan_to_num_(0.0).to(torch.bfloat16)
                out[q0:q1] = torch.einsum("qhk,kd->qhd", p, k[:, :VALUE_DIM])
            return out

        return Prepared(call_loop, call_loop, None, fmt, "per-request loop")


# ----------------------------------------------------------------------------------------------
class FlashInfer(Impl):
    """FlashInfer's MLA decode (fa3 backend, page size 1) on our layout."""

    name = "flashinfer"
    formats = ("bf16", "fp8")
    WORKSPACE_BYTES = 128 << 20

    def __init__(self):
        self._workspace = {}

    def unavailable(self) -> str | None:
        if importlib.util.find_spec("flashinfer") is None:
            return "not installed (pip: flashinfer-python; docs/DEVELOPING.md lists a wheel set for machines without network)"
        return None

    def prepare(self, case, fmt: str) -> Prepared:
        import flashinfer
        import torch

        q, _, qo_indptr, kv_indptr, _ = case.data
        if case.total_kv == 0:
            raise Unsupported("empty cache")
        cache = case.cache(fmt)
        device = q.device
        ws = self._workspace.get(device)
        if ws is None:
            ws = self._workspace[device] = torch.empty(self.WORKSPACE_BYTES, dtype=torch.int8, device=device)
        wrapper = flashinfer.mla.BatchMLAPagedAttentionWrapper(ws, backend="fa3")
        qo32 = qo_indptr.to(torch.int32)
        if case.page_size:  # the same shuffled pool mixmla's paged path reads
            pb = case.paged(fmt)
            page, page_indptr, kv_indices, kv_len = case.page_size, pb.kv_indptr, pb.kv_indices, pb.seq_lens
            c = pb.cache.rows.data.view(pb.cache.num_pages, page, HEAD_DIM)
        else:  # mixmla's contiguous rows as pages of one token, in order
            page, page_indptr = 1, kv_indptr.to(torch.int32)
            kv_len = (page_indptr[1:] - page_indptr[:-1]).contiguous()
            kv_indices = torch.arange(case.total_kv, dtype=torch.int32, device=device)
            c = cache.data.view(case.total_kv, 1, HEAD_DIM)
        causal = max(_lengths(qo_indptr)) > 1
        wrapper.plan(qo32, page_indptr, kv_indices, kv_len, case.num_heads, VALUE_DIM, HEAD_DIM - VALUE_DIM, page,
                     causal, case.sm_scale, torch.bfloat16, cache.data.dtype)
        kwargs = {}
        if fmt == "fp8":
            s = float(cache.scale.item())
            kwargs = {"ckv_scale": s, "kpe_scale": s}
        out = _out_like(case)
        q_nope, q_pe = q[..., :VALUE_DIM], q[..., VALUE_DIM:]
        ckv, kpe = c[..., :VALUE_DIM], c[..., VALUE_DIM:]

        def call():
            return wrapper.run(q_nope, q_pe, ckv, kpe, out=out, **kwargs)

        layout = f"page {page}" + (", pages shuffled" if case.page_size else "")
        return Prepared(call, call, out, fmt, "fa3, " + layout + (", causal" if causal else ""))


# ----------------------------------------------------------------------------------------------
class FlashMLA(Impl):
    """DeepSeek FlashMLA dense decode, bf16 cache in pages of 64 tokens."""

    name = "flashmla"
    formats = ("bf16",)
    PAGE = 64

    def unavailable(self) -> str | None:
        if importlib.util.find_spec("flash_mla") is None:
            return "not installed (not on PyPI: needs a CUDA build of github.com/deepseek-ai/FlashMLA)"
        return None

    def prepare(self, case, fmt: str) -> Prepared:
        import torch
        from flash_mla import flash_mla_with_kvcache, get_mla_metadata

        q, _, qo_indptr, kv_indptr, _ = case.data
        q_lens, kv_lens = _lengths(qo_indptr), _lengths(kv_indptr)
        if len(set(q_lens)) != 1 or q_lens[0] == 0:
            raise Unsupported("needs the same number of query tokens in every request")
        if case.page_size:
            raise Unsupported("paged mode: FlashMLA is timed in the contiguous run (its own pages of 64)")
        B, lq, H, P = len(kv_lens), q_lens[0], case.num_heads, self.PAGE
        device = q.device
        rows = case.cache("bf16").data  # (total_kv, 576)
        kv_ptr = [int(v) for v in kv_indptr.tolist()]
        pages_per_req = [max(1, -(-n // P)) for n in kv_lens]
        max_pages = max(pages_per_req)
        aligned = all(p % P == 0 for p in kv_ptr) and case.total_kv % P == 0 and case.total_kv > 0
        if aligned:  # the cache already is a page table: view it, no copy
            k_cache = rows.view(case.total_kv // P, P, 1, HEAD_DIM)
            first = [p // P for p in kv_ptr[:-1]]
        else:  # copy (untimed) into pages of 64
            k_cache = torch.zeros(sum(pages_per_req), P, 1, HEAD_DIM, dtype=torch.bfloat16, device=device)
            flat = k_cache.view(-1, HEAD_DIM)
            first, page = [], 0
            for b, n in enumerate(kv_lens):
                flat[page * P: page * P + n] = rows[kv_ptr[b]: kv_ptr[b] + n]
                first.append(page)
                page += pages_per_req[b]
        block_table = torch.tensor([[f + j for j in range(max_pages)] for f in first], dtype=torch.int32,
                                   device=device)
        cache_seqlens = torch.tensor(kv_lens, dtype=torch.int32, device=device)
        # Old FlashMLA returns (tile_scheduler_metadata, num_splits); new returns (FlashMLASchedMeta, None).
        meta, splits = get_mla_metadata(cache_seqlens, lq * H, 1)
        q4 = q.view(B, lq, H, HEAD_DIM)

        def call():
            out, _ = flash_mla_with_kvcache(q4, k_cache, block_table, cache_seqlens, VALUE_DIM, meta, splits,
                                            softmax_scale=case.sm_scale, causal=lq > 1)
            return out.view(B * lq, H, VALUE_DIM)

        call()  # the new interface builds its schedule on the first call
        return Prepared(call, call, None, "bf16", "page 64" + ("" if aligned else ", paged copy"))


IMPLS: dict[str, type[Impl]] = {"mixmla": Mixmla, "torch": TorchBaseline, "flashinfer": FlashInfer,
                                "flashmla": FlashMLA}
PEER_NAMES = ("torch", "flashinfer", "flashmla")


def make_impl(name: str) -> Impl:
    """A fresh implementation object by name (one of :data:`IMPLS`)."""
    if name not in IMPLS:
        raise ValueError(f"unknown implementation {name!r}; expected one of {', '.join(IMPLS)}")
    return IMPLS[name]()
