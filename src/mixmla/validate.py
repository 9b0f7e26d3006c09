"""Argument checks run before any kernel launch.

Every public entry point (``mla_decode``, ``plan``, ``DecodePlan.run``, ``custom_kernel``) calls one
of the functions here first. Each rule raises ``TypeError`` (wrong kind of object or dtype) or
``ValueError`` (wrong shape, stride, device or value) with a message that names the argument, says
what was expected and what was given. Nothing is launched when a check fails.

Two levels, because some rules need the *values* of device tensors:

* **structural** checks (type, dtype, rank, width, strides, devices, head count, sizes known from
  shapes, plan consistency) read only tensor metadata: no host/device synchronisation, no
  allocation. ``check_run_inputs`` does only these, so ``DecodePlan.run`` stays sync-free and
  CUDA-graph capturable by default.
* **value** checks (indptr starts at 0, is non-decreasing, ends within the cache; ``qo_indptr``
  ends at ``total_q`` and, for a plan, gives no request more query tokens than the plan covers;
  the fp8 scale is finite and positive) copy the indptrs and the fp8 scale to the host in **one**
  transfer (a sync on a GPU). ``check_decode_inputs(..., check_values=True)`` (``mla_decode`` and
  every eager ``custom_kernel`` call), ``check_run_values`` (``DecodePlan.run(check=True)``) and
  ``check_plan_inputs`` / ``check_indptr(..., check_values=True)`` do them; they return the host
  values so that no second copy is needed.

Rules that the cache containers (``mixmla.formats``) already enforce (cache dtype, width 576/288,
one KV head, fp8 scale with exactly one float value on the cache's device, MXFP4 scales at least
``(N, 18)`` uint8/e8m0 on the cache's device, unit stride in the last dim) are not repeated: their
errors are re-raised with the argument name ``cache`` in front.
"""

from __future__ import annotations

import math
import numbers
import threading
from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np
import torch

from .formats import FORMATS, HEAD_DIM, VALUE_DIM, Fp8Cache, Mxfp4Cache, as_cache

#: Query head counts the kernels are built for (DeepSeek's 128 heads over TP = 8, 4, 2, 1).
SUPPORTED_NUM_HEADS = (16, 32, 64, 128)
#: Integer dtypes accepted for ``kv_indptr`` and ``qo_indptr``.
INDPTR_DTYPES = (torch.int32, torch.int64)
#: dtypes of ``out``: bf16 (the result) or float32 (the result before its last rounding).
OUT_DTYPES = (torch.bfloat16, torch.float32)

__all__ = [
    "SUPPORTED_NUM_HEADS",
    "INDPTR_DTYPES",
    "OUT_DTYPES",
    "DecodeInputs",
    "check_decode_inputs",
    "check_run_inputs",
    "check_run_values",
    "call_values",
    "check_indptr",
    "check_plan_inputs",
    "check_cache",
    "check_q",
    "check_out",
    "check_sm_scale",
    "check_num_heads",
    "check_benchmark_data",
]


@dataclass(frozen=True)
class DecodeInputs:
    """What ``check_decode_inputs`` learned, so callers need not recompute it.

    cache: the cache wrapped in its container (``Bf16Cache``/``Fp8Cache``/``Mxfp4Cache``).
    batch: number of requests (``len(kv_indptr) - 1``).
    total_q: query rows (``q.shape[0]``). num_heads: ``q.shape[1]``.
    sm_scale: the softmax scale as a Python float (1/sqrt(576) when the caller gave None).
    kv_ptr, qo_ptr: host copies (int64 numpy arrays, length batch+1) of the indptrs when the
    values were checked, else None. ``qo_ptr`` is ``[0, 1, ..., batch]`` when ``qo_indptr`` is None.
    values: what the value checks read (``call_values``), else None.
    """

    cache: object
    batch: int
    total_q: int
    num_heads: int
    sm_scale: float
    kv_ptr: Optional[np.ndarray]
    qo_ptr: Optional[np.ndarray]
    values: Optional[list] = None


# ----------------------------------------------------------------------------------------------
# small helpers


def _names(dtypes) -> str:
    return " or ".join(str(d) for d in dtypes)


def _shape(t) -> str:
    return str(tuple(t.shape))


def _same_device(a: torch.device, b: torch.device) -> bool:
    """Device equality where ``cuda`` (no index) matches ``cuda:<current>``."""
    if a == b:
        return True
    a, b = torch.device(a), torch.device(b)
    if a.type != b.type:
        return False
    if a.index is None or b.index is None:
        if a.type == "cuda":
            cur = torch.cuda.current_device() if torch.cuda.is_available() else 0
            return (cur if a.index is None else a.index) == (cur if b.index is None else b.index)
        return True
    return a.index == b.index


def _byte_span(t: torch.Tensor):
    """[start, end) byte range a strided tensor can touch, or None if empty/unknown."""
    if t.numel() == 0 or t.device.type == "meta":
        return None
    try:
        start = t.data_ptr()
    except RuntimeError:  # tensors without storage
        return None
    extent = sum((size - 1) * stride for size, stride in zip(t.shape, t.stride())) + 1
    return start, start + extent * t.element_size()


def _overlaps(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.device != b.device:
        return False
    # Tensors whose storages do not intersect cannot overlap; only otherwise are the spans computed.
    storage_a, storage_b = a.untyped_storage(), b.untyped_storage()
    pa, pb = storage_a.data_ptr(), storage_b.data_ptr()
    if pa + storage_a.nbytes() <= pb or pb + storage_b.nbytes() <= pa:
        return False
    return _spans_overlap(a, b)


def _spans_overlap(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether the byte ranges two tensors can touch intersect."""
    sa, sb = _byte_span(a), _byte_span(b)
    return sa is not None and sb is not None and sa[0] < sb[1] and sb[0] < sa[1]


def _overlaps_any(out: torch.Tensor, inputs: Sequence[torch.Tensor]) -> bool:
    """``_overlaps(out, t)`` for any ``t`` of ``inputs``, with out's storage read once."""
    storage = out.untyped_storage()
    lo = storage.data_ptr()
    hi = lo + storage.nbytes()
    device = out.device
    for t in inputs:
        if t.device != device:
            continue
        other = t.untyped_storage()
        start = other.data_ptr()
        if start + other.nbytes() <= lo or hi <= start:
            continue  # disjoint storages (the common case) cannot overlap
        if _spans_overlap(out, t):
            return True
    return False


def _cache_tensors(cache) -> list:
    if isinstance(cache, Fp8Cache):
        return [cache.data, cache.scale]
    if isinstance(cache, Mxfp4Cache):
        return [cache.data, cache.scales]
    return [cache.data]


class _Staging(threading.local):
    """A pinned host buffer per thread that the device values are copied into: a copy into
    pinned memory is one DMA with no staging through pageable memory, and reusing the buffer
    saves a host allocation per read. Per thread, so that concurrent reads do not share it."""

    buffer: Optional[torch.Tensor] = None  # uint8, pinned
    array: Optional[np.ndarray] = None  # the numpy view of ``buffer``
    views: Optional[dict] = None  # ((numel, dtype) per tensor) -> ``_staging_slots`` of ``buffer``


_STAGING = _Staging()


#: Reads of more bytes than this (a whole page table, on an error path) get a buffer of their own
#: rather than keeping a large pinned one alive.
_STAGING_KEPT_BYTES = 1 << 20


def _staging(nbytes: int) -> _Staging:
    s = _STAGING if nbytes <= _STAGING_KEPT_BYTES else _Staging()
    if s.buffer is None or s.buffer.numel() < nbytes:
        s.buffer = torch.empty(max(4096, 1 << (nbytes - 1).bit_length()), dtype=torch.uint8, pin_memory=True)
        s.array = s.buffer.numpy()
        s.views = {}
    return s


def _host_values(tensors: Sequence[torch.Tensor]) -> list:
    """Copy several small tensors to the host with one wait (one sync on a GPU).

    Returns one flat numpy array per tensor: int64 for integer tensors, float32 for float tensors.
    On a GPU each tensor is copied as it is (no conversion or concatenation on the device, which
    would cost kernel launches and allocations) into a reused pinned buffer: every copy but the
    last is asynchronous, and the last one waits for the stream, which ran them all in order.
    """
    if not tensors:
        return []
    flat = [t if t.dim() == 1 else t.reshape(-1) for t in tensors]
    if all([t.is_cpu for t in flat]):  # nothing to transfer (a list: cheaper than a generator here)
        return [t.float().numpy() if t.dtype.is_floating_point else t.numpy().astype(np.int64) for t in flat]
    return _staged_values([t if t.dtype in _NUMPY_DTYPES else t.to(torch.float32 if t.dtype.is_floating_point
                                                                   else torch.int64) for t in flat])


def _staged_values(flat: list) -> list:
    """``_host_values`` of 1-D tensors of ``_NUMPY_DTYPES`` through the staging buffer."""
    shapes = tuple([(t.shape[0], t.dtype) for t in flat])
    s = _STAGING
    slots = s.views.get(shapes) if s.views is not None else None
    if slots is None:
        s, slots = _staging_slots(shapes)
    last = len(flat) - 1
    if last:
        # Asynchronous copies are ordered on the stream of their source's device; with tensors of
        # several devices every copy waits.
        device = flat[0].device
        non_blocking = all([t.device == device for t in flat])
        for i in range(last):
            slots[i][0].copy_(flat[i], non_blocking=non_blocking)
    slots[last][0].copy_(flat[last])  # the one that waits, for every copy before it too
    # Copies: the buffer is reused.
    return [raw.copy() if raw.dtype == np.float32 else raw.astype(np.int64) for _, raw in slots]


def _staging_slots(shapes: tuple) -> tuple:
    """``(staging, [(typed tensor view, numpy view)] per tensor)`` for tensors of ``shapes``
    ((numel, dtype) each) laid out in one staging buffer, 8-byte aligned so that any dtype can
    view its slice; remembered per ``shapes`` while the thread's buffer stays the same."""
    offsets, end = [], 0
    for numel, dtype in shapes:
        offsets.append(end)
        end += -(-numel * dtype.itemsize // 8) * 8
    s = _staging(end)
    slots = []
    for (numel, dtype), off in zip(shapes, offsets):
        nbytes = numel * dtype.itemsize
        slots.append((s.buffer[off:off + nbytes].view(dtype), s.array[off:off + nbytes].view(_NUMPY_DTYPES[dtype])))
    if s is _STAGING:
        if len(s.views) > 64:
            s.views.clear()
        s.views[shapes] = slots
    return s, slots


#: What a device tensor's values are read as; other dtypes are converted on the device first.
_NUMPY_DTYPES = {torch.int32: np.int32, torch.int64: np.int64, torch.float32: np.float32}


# ----------------------------------------------------------------------------------------------
# single-argument checks (structural: metadata only, never synchronise)


def check_num_heads(num_heads, supported: Sequence[int] = SUPPORTED_NUM_HEADS, name: str = "num_heads") -> int:
    """``num_heads`` (int, query heads H) must be one of ``supported``."""
    if type(num_heads) is not int and (isinstance(num_heads, bool) or not isinstance(num_heads, numbers.Integral)):
        raise TypeError(f"{name} must be an int, one of {tuple(supported)}; got {type(num_heads).__name__}")
    if int(num_heads) not in tuple(supported):
        raise ValueError(f"{name}: unsupported number of query heads; expected one of {tuple(supported)}, "
                         f"got {int(num_heads)}")
    return int(num_heads)


def check_sm_scale(sm_scale) -> float:
    """Softmax scale: None (meaning 1/sqrt(576)) or a finite positive real number (not a tensor).

    Returns the scale as a Python float. Scores are ``q . k * sm_scale`` (natural-log units).
    """
    if sm_scale is None:
        return 1.0 / math.sqrt(HEAD_DIM)
    if isinstance(sm_scale, bool) or not isinstance(sm_scale, numbers.Real):
        raise TypeError(f"sm_scale must be a Python float (or None for 1/sqrt({HEAD_DIM})), "
                        f"got {type(sm_scale).__name__}")
    value = float(sm_scale)
    if not math.isfinite(value) or value <= 0.0:
        raise ValueError(f"sm_scale must be finite and > 0, got {value!r}")
    return value


def check_q(q, num_heads_supported: Optional[Sequence[int]] = SUPPORTED_NUM_HEADS) -> torch.Tensor:
    """Query: (total_q, H, 576) bfloat16, unit stride in the last dim (other strides free), H in
    ``num_heads_supported`` (not checked when None)."""
    if not isinstance(q, torch.Tensor):
        raise TypeError(f"q must be a torch.Tensor of shape (total_q, H, {HEAD_DIM}), got {type(q).__name__}")
    if q.dtype != torch.bfloat16:
        raise TypeError(f"q must have dtype torch.bfloat16, got {q.dtype}")
    if q.dim() != 3:
        raise ValueError(f"q must be 3-D (total_q, H, {HEAD_DIM}), got {q.dim()}-D shape {_shape(q)}")
    if q.shape[2] != HEAD_DIM:
        raise ValueError(f"q must have last dim {HEAD_DIM} (512 latent + 64 rope), got shape {_shape(q)}")
    if num_heads_supported is not None:
        check_num_heads(q.shape[1], num_heads_supported, name="q.shape[1] (number of query heads)")
    if q.stride(2) != 1 and q.shape[2] > 1:
        raise ValueError(f"q must be contiguous along its last dim (stride(-1) == 1), got strides {q.stride()}")
    return q


def check_cache(cache, device: Optional[torch.device] = None, name: str = "cache"):
    """Wrap ``cache`` into its container (see ``mixmla.formats.as_cache``) and check its device.

    Accepts ``Bf16Cache``/``Fp8Cache``/``Mxfp4Cache``, a bf16 (N, 1, 576) or (N, 576) tensor,
    ``(fp8 data, scale)`` or ``(fp4 bytes (N, 1, 288), e8m0 scales (>=N, >=18))``. The containers'
    own errors are re-raised with ``name`` in front. Rows may be strided (any ``stride(0)``).
    """
    try:
        wrapped = as_cache(cache)
    except (TypeError, ValueError) as err:
        raise type(err)(f"{name}: {err}") from err
    if device is not None and not _same_device(wrapped.device, device):
        raise ValueError(f"{name} is on {wrapped.device} but q is on {device}; all tensors must share one device")
    return wrapped


def check_out(out, total_q: int, num_heads: int, device: torch.device, inputs: Sequence[torch.Tensor] = ()) -> None:
    """Output buffer: contiguous (total_q, H, 512) bfloat16 (or float32, the unrounded output, which
    ``mixmla.api`` accepts for the backends that write it) on ``device``, not sharing memory with
    any tensor of ``inputs`` (q and the cache)."""
    if out is None:
        return
    if not isinstance(out, torch.Tensor):
        raise TypeError(f"out must be a torch.Tensor or None, got {type(out).__name__}")
    if out.dtype not in OUT_DTYPES:
        raise TypeError(f"out must have dtype torch.bfloat16 (or torch.float32, unrounded), got {out.dtype}")
    expected = (total_q, num_heads, VALUE_DIM)
    if tuple(out.shape) != expected:
        raise ValueError(f"out must have shape (total_q, H, {VALUE_DIM}) = {expected}, got {_shape(out)}")
    if not out.is_contiguous():
        raise ValueError(f"out must be contiguous, got strides {out.stride()} for shape {_shape(out)}")
    if not _same_device(out.device, device):
        raise ValueError(f"out is on {out.device} but q is on {device}; all tensors must share one device")
    if _overlaps_any(out, inputs):
        raise ValueError("out shares memory with an input (q or the cache); pass a separate buffer")


def check_indptr(
    name: str,
    t,
    *,
    device: Optional[torch.device] = None,
    batch: Optional[int] = None,
    max_last: Optional[int] = None,
    last: Optional[int] = None,
    check_values: bool = True,
    max_len: Optional[int] = None,
    dtypes: Sequence[torch.dtype] = INDPTR_DTYPES,
    dtype_reason: str = "",
) -> Optional[np.ndarray]:
    """Check one prefix-sum array (``kv_indptr`` or ``qo_indptr``).

    Structural (no sync): ``t`` is a 1-D tensor of one of ``dtypes`` (default int32/int64;
    ``dtype_reason`` says why in the message when fewer are allowed) with unit stride and at least
    2 entries (batch >= 1); on ``device`` when given; ``batch + 1`` entries when ``batch`` is given.
    Values (only with ``check_values``; one host copy, a sync on a GPU): ``t[0] == 0``,
    non-decreasing, ``t[-1] <= max_last`` (the cache rows) and ``t[-1] == last`` (total_q) when
    given, and every segment ``t[i+1]-t[i] <= max_len`` (query tokens per request) when given.
    Returns the values as an int64 numpy array when checked, else None.
    """
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a 1-D {_names(dtypes).replace('torch.', '')} torch.Tensor, got "
                        f"{type(t).__name__}")
    if t.dtype not in dtypes:
        raise TypeError(f"{name} must have dtype {_names(dtypes)}{dtype_reason}, got {t.dtype}")
    if t.dim() != 1:
        raise ValueError(f"{name} must be 1-D (batch+1,), got {t.dim()}-D shape {_shape(t)}")
    if t.shape[0] < 2:
        raise ValueError(f"{name} must have at least 2 entries (batch >= 1), got shape {_shape(t)}")
    if batch is not None and t.shape[0] != batch + 1:
        raise ValueError(f"{name} must have batch+1 = {batch + 1} entries (kv_indptr and qo_indptr describe "
                         f"the same requests), got {t.shape[0]}")
    if t.stride(0) != 1:
        raise ValueError(f"{name} must be contiguous (stride 1), got stride {t.stride(0)}")
    if device is not None and not _same_device(t.device, device):
        raise ValueError(f"{name} is on {t.device} but q is on {device}; all tensors must share one device")
    if not check_values:
        return None
    return _check_indptr_values(name, _host_values([t])[0], max_last, last, max_len)


#: Host values (the bytes of int64 arrays) of recent indptrs that start at 0 and are non-decreasing -> their
#: longest segment: a serving loop checks the same indptrs for every layer, and these two rules
#: depend on the values alone. Only short arrays, whose checks cost more than their hash.
_ORDERED: dict = {}
_ORDERED_SIZE = 64
_ORDERED_MAX_ENTRIES = 1025


def _check_indptr_values(name: str, vals: np.ndarray, max_last=None, last=None, max_len=None) -> np.ndarray:
    """The value rules of ``check_indptr`` on host values ``vals`` (int64); returns them."""
    key = vals.tobytes() if vals.shape[0] <= _ORDERED_MAX_ENTRIES and vals.dtype == np.int64 else None
    longest = _ORDERED.get(key) if key is not None else None
    if longest is None:
        if vals[0] != 0:
            raise ValueError(f"{name} must start at 0, got {name}[0] = {vals[0]}")
        lens = vals[1:] - vals[:-1]
        if int(lens.min(initial=0)) < 0:
            i = int(np.argmax(lens < 0))
            raise ValueError(f"{name} must be non-decreasing, got {name}[{i}] = {vals[i]} > "
                             f"{name}[{i + 1}] = {vals[i + 1]}")
        longest = int(lens.max(initial=0))
        if key is not None:
            _ORDERED[key] = longest
            if len(_ORDERED) > _ORDERED_SIZE:
                _ORDERED.pop(next(iter(_ORDERED)), None)
    if max_last is not None and vals[-1] > max_last:
        raise ValueError(f"{name} ends at {vals[-1]}, beyond the cache's {max_last} rows "
                         f"(expected {name}[-1] <= {max_last})")
    if last is not None and vals[-1] != last:
        raise ValueError(f"{name} must end at total_q = q.shape[0] = {last}, got {name}[-1] = {vals[-1]}")
    if max_len is not None and longest > max_len:
        lens = vals[1:] - vals[:-1]
        i = int(np.argmax(lens))
        raise ValueError(f"{name}: request {i} has {int(lens[i])} query tokens, but at most {max_len} per request "
                         f"are served (a plan covers as many as its longest request had when it was made)")
    return vals


def call_values(kv_indptr: torch.Tensor, qo_indptr: Optional[torch.Tensor], kv_cache) -> list:
    """The host values the value checks of one call read, in one transfer: kv_indptr, qo_indptr
    (when not None) and the scale of an fp8 ``kv_cache`` (a container; its ``host_scale`` when it
    has one), as ``_host_values`` returns them (int64 and float32 numpy arrays)."""
    tensors = [kv_indptr] if qo_indptr is None else [kv_indptr, qo_indptr]
    if isinstance(kv_cache, Fp8Cache):
        if kv_cache.host_scale is not None:
            return _host_values(tensors) + [np.array([kv_cache.host_scale], dtype=np.float32)]
        tensors.append(kv_cache.scale)
    return _host_values(tensors)


def _check_call_values(kv_indptr: torch.Tensor, qo_indptr: Optional[torch.Tensor], kv_cache, total_q: int,
                       max_q_len: Optional[int], host: Optional[list] = None) -> tuple:
    """The value rules of one call, on ``host`` (``call_values``, read here when None): kv_indptr
    within the cache, qo_indptr ending at ``total_q`` (``[0, 1, .., batch]`` when None) with at
    most ``max_q_len`` query tokens per request, the fp8 scale finite and > 0.
    Returns ``(kv_ptr, qo_ptr)`` as int64 numpy arrays."""
    if host is None:
        host = call_values(kv_indptr, qo_indptr, kv_cache)
    fp8 = isinstance(kv_cache, Fp8Cache)
    kv_ptr = _check_indptr_values("kv_indptr", host[0], max_last=kv_cache.num_tokens)
    if qo_indptr is not None:
        qo_ptr = _check_indptr_values("qo_indptr", host[1], last=total_q, max_len=max_q_len)
    else:
        qo_ptr = np.arange(kv_ptr.shape[0], dtype=np.int64)
    if fp8:
        value = float(host[-1][0])
        if not math.isfinite(value) or value <= 0.0:
            raise ValueError(f"cache: fp8 scale must be finite and > 0, got {value!r}")
    return kv_ptr, qo_ptr


# ----------------------------------------------------------------------------------------------
# entry-point checks


def check_decode_inputs(
    q,
    cache,
    kv_indptr,
    qo_indptr=None,
    sm_scale=None,
    out=None,
    num_heads_supported: Sequence[int] = SUPPORTED_NUM_HEADS,
    *,
    check_values: bool = True,
    max_q_len: Optional[int] = None,
    host: Optional[list] = None,
) -> DecodeInputs:
    """All checks for ``mla_decode``; raises before anything is launched.

    q: (total_q, H, 576) bf16, stride(-1) == 1. cache: any format (see ``check_cache``), N rows on
    q's device. kv_indptr: (batch+1,) int32/int64 on q's device or on the host, prefix sums of
    cache rows per request. qo_indptr: same for q's rows (on kv_indptr's device), or None (one
    query per request, total_q == batch).
    sm_scale: None or finite float > 0. out: None or contiguous (total_q, H, 512) bf16 or float32
    on q's device.
    num_heads_supported: allowed H. check_values: also check the indptr values and the fp8 scale
    value (one host transfer; a sync on a GPU). max_q_len: optional limit on rows per request in q.
    host: those values already read (``call_values`` of these tensors), checked instead of read again.

    ``Lq > Lk`` is allowed: queries that see no cache row give zeros (docs/SPEC.md).
    Returns ``DecodeInputs`` (the wrapped cache and host copies of the indptrs when checked).
    """
    q = check_q(q, num_heads_supported)
    device = q.device
    total_q, num_heads = q.shape[0], q.shape[1]
    kv_cache = check_cache(cache, device)
    scale = check_sm_scale(sm_scale)

    # The indptrs may be on the host (read there without a sync), both of them.
    on_host = isinstance(kv_indptr, torch.Tensor) and kv_indptr.device.type == "cpu"
    check_indptr("kv_indptr", kv_indptr, device=None if on_host else device, check_values=False)
    batch = kv_indptr.shape[0] - 1
    if qo_indptr is not None:
        check_indptr("qo_indptr", qo_indptr, device=None if on_host else device, batch=batch, check_values=False)
        if on_host and qo_indptr.device != kv_indptr.device:
            raise ValueError(f"qo_indptr is on {qo_indptr.device} but kv_indptr is on {kv_indptr.device}; the "
                             f"indptrs share one device: q's or the host's")
    elif total_q != batch:
        raise ValueError(f"qo_indptr is None, which means one query row per request (batch = {batch} from "
                         f"kv_indptr), but q has total_q = {total_q} rows; pass qo_indptr")
    if out is not None:  # none: nothing to check, not even the inputs list to build
        check_out(out, total_q, num_heads, device, inputs=[q, *_cache_tensors(kv_cache)])

    kv_ptr = qo_ptr = None
    if check_values:
        if host is None:
            host = call_values(kv_indptr, qo_indptr, kv_cache)
        kv_ptr, qo_ptr = _check_call_values(kv_indptr, qo_indptr, kv_cache, total_q, max_q_len, host)
    return DecodeInputs(kv_cache, batch, total_q, num_heads, scale, kv_ptr, qo_ptr, host if check_values else None)


def check_plan_inputs(
    kv_indptr,
    qo_indptr=None,
    num_heads: int = 16,
    fmt: str = "bf16",
    sm_scale=None,
    device=None,
    num_heads_supported: Sequence[int] = SUPPORTED_NUM_HEADS,
    *,
    max_q_len: Optional[int] = None,
    host: Optional[list] = None,
) -> tuple:
    """All checks for ``plan`` (which may synchronise): indptrs structure and values, head count,
    format name, softmax scale, device. The indptrs may live on any device (the plan copies them);
    they must share one device with each other. host: the indptrs' values already read
    (``_host_values([kv_indptr, qo_indptr])``, without qo_indptr when None), checked instead of
    read again.

    Returns ``(kv_ptr, qo_ptr, sm_scale)``: host int64 numpy arrays (``qo_ptr = [0..batch]`` when
    ``qo_indptr`` is None) and the scale as a float. The cache size is unknown here, so
    ``kv_indptr[-1] <= cache rows`` is left to ``check_run_inputs`` (against the plan's
    ``total_kv`` = ``kv_ptr[-1]``) and ``check_run_values``.
    """
    check_num_heads(num_heads, num_heads_supported)
    if fmt not in FORMATS:
        raise ValueError(f"fmt must be one of {FORMATS}, got {fmt!r}")
    scale = check_sm_scale(sm_scale)
    if device is not None:
        try:
            torch.device(device)
        except (TypeError, RuntimeError) as err:
            raise ValueError(f"device must be a torch.device or device string, got {device!r}") from err
    check_indptr("kv_indptr", kv_indptr, check_values=False)
    batch = kv_indptr.shape[0] - 1
    if qo_indptr is not None:
        check_indptr("qo_indptr", qo_indptr, batch=batch, check_values=False)
        if qo_indptr.device != kv_indptr.device:
            raise ValueError(f"qo_indptr is on {qo_indptr.device} but kv_indptr is on {kv_indptr.device}")
    if host is None:
        host = _host_values([kv_indptr] if qo_indptr is None else [kv_indptr, qo_indptr])
    kv_ptr = _check_indptr_values("kv_indptr", host[0])
    if qo_indptr is not None:
        qo_ptr = _check_indptr_values("qo_indptr", host[1], max_len=max_q_len)
    else:
        qo_ptr = np.arange(batch + 1, dtype=np.int64)
    return kv_ptr, qo_ptr, scale


def check_run_inputs(plan, q, cache, out=None, kv_indptr=None, qo_indptr=None):
    """Structural checks for ``DecodePlan.run``: metadata only, no sync, no allocation.

    Compares q and the cache against what the plan was made for. ``plan`` must expose
    ``device`` (torch.device), ``num_heads`` (H), ``total_q`` (``qo_indptr[-1]``), ``fmt``
    ('bf16'/'fp8'/'mxfp4'), ``total_kv`` (its own ``kv_indptr[-1]`` at plan time) and ``batch``;
    ``indptr_dtypes`` (the dtypes its kernels read indptrs as) when it has fewer than int32/int64.
    q: (total_q, H, 576) bf16 on the plan's device; cache: the plan's format, with at least
    ``total_kv`` rows when the plan's own kv_indptr is used (a replacement kv_indptr says itself
    how many rows it reads, which only its values tell: ``check_run_values``); out: None or
    contiguous (total_q, H, 512) bf16 or float32 on that device. kv_indptr, qo_indptr: optional replacement
    indptrs for this run (same batch, on the plan's device, of a dtype the plan reads).
    Nothing here reads a value: the indptr values (the replacements', or the plan's own, which may
    have been rewritten in place since) and the fp8 scale are ``check_run_values``' business.
    Returns the wrapped cache.
    """
    try:
        device, num_heads, total_q, fmt, total_kv = plan.device, plan.num_heads, plan.total_q, plan.fmt, plan.total_kv
        batch = plan.batch
    except AttributeError as err:
        raise AttributeError(f"validate.check_run_inputs needs the plan's device, num_heads, total_q, fmt, "
                             f"total_kv and batch: {err}") from None

    q = check_q(q, num_heads_supported=None)
    if not _same_device(q.device, device):
        raise ValueError(f"q is on {q.device} but the plan was made for {device}")
    if q.shape[1] != num_heads:
        raise ValueError(f"q has {q.shape[1]} heads (shape {_shape(q)}) but the plan was made for "
                         f"num_heads = {num_heads}")
    if q.shape[0] != total_q:
        raise ValueError(f"q must have total_q = {total_q} rows (the plan's qo_indptr[-1]), got shape {_shape(q)}")
    kv_cache = check_cache(cache, q.device)
    if kv_cache.format != fmt:
        raise ValueError(f"cache: the plan was made for format {fmt!r}, got a {kv_cache.format!r} cache")
    if kv_indptr is None and kv_cache.num_tokens < total_kv:
        raise ValueError(f"cache has {kv_cache.num_tokens} rows but the plan's kv_indptr ends at {total_kv} "
                         f"(expected at least {total_kv} rows)")
    if out is not None:
        check_out(out, total_q, num_heads, q.device, inputs=[q, *_cache_tensors(kv_cache)])
    if kv_indptr is not None or qo_indptr is not None:
        dtypes = tuple(getattr(plan, "indptr_dtypes", INDPTR_DTYPES))
        reason = "" if set(dtypes) == set(INDPTR_DTYPES) else f" (what the {getattr(plan, 'backend', '')} kernels read)"
        for name, t in (("kv_indptr", kv_indptr), ("qo_indptr", qo_indptr)):
            if t is not None:
                check_indptr(name, t, device=q.device, batch=batch, check_values=False, dtypes=dtypes,
                             dtype_reason=reason)
    return kv_cache


def check_run_values(plan, cache, kv_indptr: torch.Tensor, qo_indptr: torch.Tensor) -> tuple:
    """The value checks of ``DecodePlan.run(check=True)``, after ``check_run_inputs``.

    cache: the wrapped cache ``check_run_inputs`` returned; kv_indptr, qo_indptr: the (batch+1,)
    device tensors this run uses (the replacements, or the plan's own). One host transfer of both
    and the fp8 scale (a sync on a GPU, so not allowed while a CUDA graph is being captured:
    RuntimeError), then: kv_indptr starts at 0, is non-decreasing and ends within the cache's rows;
    qo_indptr starts at 0, is non-decreasing, ends at ``plan.total_q`` and gives no request more
    than ``plan.max_q_len`` query tokens; the fp8 scale is finite and > 0.
    Returns ``(kv_ptr, qo_ptr)``, the host values (int64 numpy arrays).
    """
    if kv_indptr.device.type == "cuda" and torch.cuda.is_current_stream_capturing():
        raise RuntimeError("DecodePlan.run(check=True) reads the indptrs on the host, which a CUDA graph "
                           "capture does not allow; capture run() without check (check it once before capturing)")
    return _check_call_values(kv_indptr, qo_indptr, cache, plan.total_q, plan.max_q_len)


def check_benchmark_data(data, fmt: str = "auto") -> None:
    """Structure of the benchmark tuple for ``custom_kernel``: ``(q, kv_data, qo_indptr, kv_indptr,
    config)`` with ``kv_data`` a dict holding the requested format ('bf16', 'fp8', 'mxfp4', or any
    of them for ``fmt='auto'``) and ``config`` a dict. The tensors themselves are checked by
    ``check_decode_inputs`` when ``mla_decode`` runs.
    """
    if fmt != "auto" and fmt not in FORMATS:
        raise ValueError(f"fmt must be 'auto' or one of {FORMATS}, got {fmt!r}")
    if not isinstance(data, (tuple, list)) or len(data) != 5:
        got = f"{type(data).__name__} of length {len(data)}" if isinstance(data, (tuple, list)) else type(data).__name__
        raise TypeError(f"data must be the tuple (q, kv_data, qo_indptr, kv_indptr, config), got {got}")
    _, kv_data, _, _, config = data
    if not isinstance(kv_data, dict):
        raise TypeError(f"data[1] (kv_data) must be a dict {{'bf16': ..., 'fp8': ..., 'mxfp4': ...}}, "
                        f"got {type(kv_data).__name__}")
    wanted = FORMATS if fmt == "auto" else (fmt,)
    if not any(k in kv_data for k in wanted):
        raise ValueError(f"data[1] (kv_data) must hold {'one of ' if fmt == 'auto' else ''}{wanted}, "
                         f"got keys {sorted(kv_data)}")
    if not isinstance(config, dict):
        raise TypeError(f"data[4] (config) must be a dict, got {type(config).__name__}")
