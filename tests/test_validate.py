"""Every bad input gets a clear error before anything is launched (issue 5, part 1).

Each case builds a small valid problem, breaks one rule, and calls the public entry point
(``mixmla.api.mla_decode``, ``plan``, ``DecodePlan.run``, ``custom_kernel``, the quantizers). The
test asserts the exception type, that the message names the argument, and that no Triton kernel
was launched (the ``no_launch`` fixture makes any launch fail the test). The same cases also run
against ``mixmla.validate.check_decode_inputs`` directly. Runs on CPU and, where there is one, on
the GPU (the "other device" for mixed-device cases is ``meta`` on CPU, ``cpu`` on the GPU).
"""

from __future__ import annotations

import collections
import math

import pytest
import torch

from mixmla import validate
from mixmla.formats import quantize_fp8, quantize_mxfp4
from mixmla.formats import quantize as quantize_any

from conftest import indptr

H = 16
KV_LENS = (5, 3)  # two requests; total_kv = 8
Q_LENS = (1, 2)  # total_q = 3


# ----------------------------------------------------------------------------------------------
# fixtures


@pytest.fixture(params=["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def device(request):
    return torch.device(request.param)


@pytest.fixture
def plan_device(device):
    """``device`` where a plan can be made: CPU plans need the Triton interpreter, which a test
    run on a CUDA machine does not use (it compiles for the GPU)."""
    from mixmla import interpreter

    if device.type == "cpu" and not interpreter.active():
        pytest.skip("CPU plans need TRITON_INTERPRET=1; this run compiles kernels for the GPU")
    return device


@pytest.fixture
def other_device(device):
    """A device different from ``device`` on which tensors can still be created."""
    return torch.device("meta") if device.type == "cpu" else torch.device("cpu")


def refuse_launches(monkeypatch):
    """From now on, fail the test if any Triton kernel is launched (dispatched, compiled or
    interpreted) or any backend plan is run."""
    import triton.runtime.jit as jit

    import mixmla.kernels.triton.backend  # noqa: F401  (so that its plan class is patched too)
    from mixmla.kernels.backend import BackendPlan

    def refuse(*args, **kwargs):
        raise AssertionError("a kernel was launched although the inputs are invalid")

    monkeypatch.setattr(jit.JITFunction, "run", refuse)
    for cls in _backend_plan_classes(BackendPlan):
        monkeypatch.setattr(cls, "run", refuse)
    from mixmla.kernels.triton import launch

    monkeypatch.setattr(launch, "launch_compiled", refuse)  # plans launch through compiled kernels after a first call
    try:
        import triton.runtime.interpreter as interp

        monkeypatch.setattr(interp.InterpretedFunction, "run", refuse)
    except (ImportError, AttributeError):
        pass


def _backend_plan_classes(base):
    """Every loaded subclass of ``base`` (the Triton plan, and the Gluon one where it is loaded)."""
    found = []
    for cls in base.__subclasses__():
        found += [cls, *_backend_plan_classes(cls)]
    return found


@pytest.fixture
def no_launch(monkeypatch):
    """Fail the test if any kernel is launched."""
    refuse_launches(monkeypatch)


def _api():
    from mixmla import api

    return api


def _cache(fmt, rows, device):
    x = torch.randn(rows, 1, 576, device=device)
    if fmt == "bf16":
        return x.to(torch.bfloat16)
    if fmt == "fp8":
        c = quantize_fp8(x)
        return (c.data.reshape(rows, 1, 576), c.scale)
    c = quantize_mxfp4(x)
    return (c.data.reshape(rows, 1, 288), c.scales)


def good_args(device, fmt="bf16"):
    """A valid ``mla_decode`` call: keyword arguments."""
    total_q, total_kv = sum(Q_LENS), sum(KV_LENS)
    return dict(
        q=torch.randn(total_q, H, 576, device=device).to(torch.bfloat16),
        cache=_cache(fmt, total_kv, device),
        kv_indptr=indptr(KV_LENS, device=device),
        qo_indptr=indptr(Q_LENS, device=device),
        sm_scale=None,
        out=None,
    )


# ----------------------------------------------------------------------------------------------
# the rules: (id, format, mutate(args, device, other_device), exception type, regex naming the argument)


def _set(**kw):
    def mutate(a, dev, other):
        a.update({k: (v(a, dev, other) if callable(v) else v) for k, v in kw.items()})

    return mutate


def _fp8_with_scale(scale_fn):
    def make(a, dev, other):
        data, _ = a["cache"]
        return (data, scale_fn(dev, other))

    return make


def _mx_with_scales(scales_fn):
    def make(a, dev, other):
        data, scales = a["cache"]
        return (data, scales_fn(scales, dev, other))

    return make


def _q_last_dim_strided(a, dev, other):
    base = torch.randn(576, sum(Q_LENS), H, device=dev).to(torch.bfloat16)
    return base.permute(1, 2, 0)  # shape (total_q, H, 576), stride(-1) != 1


def _cache_last_dim_strided(a, dev, other):
    base = torch.randn(576, sum(KV_LENS), device=dev).to(torch.bfloat16)
    return base.t()  # (total_kv, 576), stride(-1) == total_kv


def _ptr(values, dtype=torch.int32):
    return lambda a, dev, other: torch.tensor(values, dtype=dtype, device=dev)


CASES = [
    # q
    ("q-not-tensor", "bf16", _set(q=lambda a, d, o: a["q"].tolist()), TypeError, r"\bq\b"),
    ("q-dtype-fp16", "bf16", _set(q=lambda a, d, o: a["q"].half()), TypeError, r"\bq\b.*bfloat16"),
    ("q-dtype-fp32", "bf16", _set(q=lambda a, d, o: a["q"].float()), TypeError, r"\bq\b"),
    ("q-rank-2", "bf16", _set(q=lambda a, d, o: a["q"][:, 0, :]), ValueError, r"\bq\b.*3-D"),
    ("q-rank-4", "bf16", _set(q=lambda a, d, o: a["q"][None]), ValueError, r"\bq\b"),
    ("q-width-512", "bf16", _set(q=lambda a, d, o: a["q"][:, :, :512]), ValueError, r"\bq\b.*576"),
    ("q-heads-8", "bf16", _set(q=lambda a, d, o: a["q"][:, :8]), ValueError, r"\bq\b.*heads"),
    ("q-heads-24", "bf16", _set(q=lambda a, d, o: torch.cat([a["q"], a["q"][:, :8]], 1)), ValueError, r"heads"),
    ("q-last-dim-strided", "bf16", _set(q=_q_last_dim_strided), ValueError, r"\bq\b.*stride"),
    # cache (container rules, re-raised with the argument name)
    ("cache-not-tensor", "bf16", _set(cache={"bf16": None}), TypeError, r"cache"),
    ("cache-dtype-fp16", "bf16", _set(cache=lambda a, d, o: a["cache"].half()), TypeError, r"cache.*bfloat16"),
    ("cache-width-512", "bf16", _set(cache=lambda a, d, o: a["cache"][..., :512]), ValueError, r"cache.*576"),
    ("cache-two-kv-heads", "bf16",
     _set(cache=lambda a, d, o: a["cache"].expand(-1, 2, -1)), ValueError, r"cache.*KV head"),
    ("cache-last-dim-strided", "bf16", _set(cache=_cache_last_dim_strided), ValueError, r"cache.*contiguous"),
    ("fp8-without-scale", "fp8", _set(cache=lambda a, d, o: a["cache"][0]), TypeError, r"cache.*scale"),
    ("fp8-scale-empty", "fp8",
     _set(cache=_fp8_with_scale(lambda d, o: torch.empty(0, device=d))), ValueError, r"cache.*scale"),
    ("fp8-scale-two-values", "fp8",
     _set(cache=_fp8_with_scale(lambda d, o: torch.ones(2, device=d))), ValueError, r"cache.*scale"),
    ("fp8-scale-int", "fp8",
     _set(cache=_fp8_with_scale(lambda d, o: torch.ones(1, dtype=torch.int32, device=d))), TypeError, r"scale"),
    ("fp8-scale-nan", "fp8",
     _set(cache=_fp8_with_scale(lambda d, o: torch.full((1,), math.nan, device=d))), ValueError, r"cache.*scale"),
    ("fp8-scale-inf", "fp8",
     _set(cache=_fp8_with_scale(lambda d, o: torch.full((1,), math.inf, device=d))), ValueError, r"cache.*scale"),
    ("fp8-scale-zero", "fp8",
     _set(cache=_fp8_with_scale(lambda d, o: torch.zeros(1, device=d))), ValueError, r"cache.*scale"),
    ("fp8-scale-negative", "fp8",
     _set(cache=_fp8_with_scale(lambda d, o: -torch.ones(1, device=d))), ValueError, r"cache.*scale"),
    ("fp8-scale-other-device", "fp8",
     _set(cache=_fp8_with_scale(lambda d, o: torch.ones(1, device=o))), ValueError, r"cache.*scale"),
    ("fp8-data-width-288", "fp8",
     _set(cache=lambda a, d, o: (a["cache"][0][..., :288], a["cache"][1])), ValueError, r"cache.*576"),
    ("mxfp4-data-width-576", "mxfp4",
     _set(cache=lambda a, d, o: (torch.zeros(8, 1, 576, dtype=torch.uint8, device=d), a["cache"][1])),
     ValueError, r"cache.*288"),
    ("mxfp4-data-int8", "mxfp4",
     _set(cache=lambda a, d, o: (a["cache"][0].view(torch.int8), a["cache"][1])), TypeError, r"cache.*uint8"),
    ("mxfp4-scales-17-cols", "mxfp4",
     _set(cache=_mx_with_scales(lambda s, d, o: s[:, :17])), ValueError, r"cache.*scales"),
    ("mxfp4-scales-too-few-rows", "mxfp4",
     _set(cache=_mx_with_scales(lambda s, d, o: s[:7])), ValueError, r"cache.*scales"),
    ("mxfp4-scales-float", "mxfp4",
     _set(cache=_mx_with_scales(lambda s, d, o: s.float())), TypeError, r"cache.*scales"),
    ("mxfp4-scales-1d", "mxfp4",
     _set(cache=_mx_with_scales(lambda s, d, o: s.reshape(-1))), ValueError, r"cache.*scales"),
    ("mxfp4-scales-other-device", "mxfp4",
     _set(cache=_mx_with_scales(lambda s, d, o: s.to(o))), ValueError, r"cache.*scales"),
    # devices
    ("cache-other-device", "bf16", _set(cache=lambda a, d, o: a["cache"].to(o)), ValueError, r"cache.*device|cache is on"),
    ("kv_indptr-other-device", "bf16",
     _set(kv_indptr=lambda a, d, o: a["kv_indptr"].to(o)), ValueError, r"kv_indptr.*on"),
    ("qo_indptr-other-device", "bf16",
     _set(qo_indptr=lambda a, d, o: a["qo_indptr"].to(o)), ValueError, r"qo_indptr.*on"),
    # kv_indptr
    ("kv_indptr-list", "bf16", _set(kv_indptr=[0, 5, 8]), TypeError, r"kv_indptr"),
    ("kv_indptr-float", "bf16", _set(kv_indptr=_ptr([0, 5, 8], torch.float32)), TypeError, r"kv_indptr.*int32"),
    ("kv_indptr-int16", "bf16", _set(kv_indptr=_ptr([0, 5, 8], torch.int16)), TypeError, r"kv_indptr.*int16"),
    ("kv_indptr-2d", "bf16", _set(kv_indptr=_ptr([[0, 5, 8]])), ValueError, r"kv_indptr.*1-D"),
    ("kv_indptr-one-entry", "bf16", _set(kv_indptr=_ptr([0])), ValueError, r"kv_indptr.*2 entries"),
    ("kv_indptr-strided", "bf16",
     _set(kv_indptr=lambda a, d, o: torch.tensor([0, 9, 5, 9, 8], dtype=torch.int32, device=d)[::2]),
     ValueError, r"kv_indptr.*stride"),
    ("kv_indptr-not-from-0", "bf16", _set(kv_indptr=_ptr([1, 5, 8])), ValueError, r"kv_indptr.*start at 0"),
    ("kv_indptr-decreasing", "bf16", _set(kv_indptr=_ptr([0, 6, 5])), ValueError, r"kv_indptr.*non-decreasing"),
    ("kv_indptr-beyond-cache", "bf16", _set(kv_indptr=_ptr([0, 5, 9])), ValueError, r"kv_indptr.*cache"),
    ("kv_indptr-beyond-mxfp4-cache", "mxfp4", _set(kv_indptr=_ptr([0, 5, 9], torch.int64)), ValueError,
     r"kv_indptr.*cache"),
    # qo_indptr
    ("qo_indptr-float", "bf16", _set(qo_indptr=_ptr([0, 1, 3], torch.float64)), TypeError, r"qo_indptr"),
    ("qo_indptr-batch-differs", "bf16", _set(qo_indptr=_ptr([0, 1, 2, 3])), ValueError, r"qo_indptr.*batch"),
    ("qo_indptr-last-not-total_q", "bf16", _set(qo_indptr=_ptr([0, 1, 2])), ValueError, r"qo_indptr.*total_q"),
    ("qo_indptr-decreasing", "bf16",
     _set(qo_indptr=_ptr([0, 4, 3])), ValueError, r"qo_indptr.*non-decreasing"),
    ("qo_indptr-not-from-0", "bf16", _set(qo_indptr=_ptr([1, 2, 3])), ValueError, r"qo_indptr.*start at 0"),
    ("qo_indptr-none-but-total_q-differs", "bf16", _set(qo_indptr=None), ValueError, r"qo_indptr"),
    # sm_scale
    ("sm_scale-nan", "bf16", _set(sm_scale=math.nan), ValueError, r"sm_scale"),
    ("sm_scale-inf", "bf16", _set(sm_scale=math.inf), ValueError, r"sm_scale"),
    ("sm_scale-negative", "bf16", _set(sm_scale=-0.1), ValueError, r"sm_scale"),
    ("sm_scale-tensor", "bf16", _set(sm_scale=lambda a, d, o: torch.tensor(0.04, device=d)), TypeError, r"sm_scale"),
    ("sm_scale-string", "bf16", _set(sm_scale="0.04"), TypeError, r"sm_scale"),
    # out
    ("out-not-tensor", "bf16", _set(out=[0.0]), TypeError, r"\bout\b"),
    ("out-dtype-fp16", "bf16",
     _set(out=lambda a, d, o: torch.empty(3, H, 512, dtype=torch.float16, device=d)), TypeError,
     r"\bout\b.*bfloat16"),
    ("out-shape-576", "bf16",
     _set(out=lambda a, d, o: torch.empty(3, H, 576, dtype=torch.bfloat16, device=d)), ValueError, r"\bout\b.*shape"),
    ("out-shape-rows", "bf16",
     _set(out=lambda a, d, o: torch.empty(2, H, 512, dtype=torch.bfloat16, device=d)), ValueError, r"\bout\b.*shape"),
    ("out-non-contiguous", "bf16",
     _set(out=lambda a, d, o: torch.empty(H, 3, 512, dtype=torch.bfloat16, device=d).transpose(0, 1)),
     ValueError, r"\bout\b.*contiguous"),
    ("out-other-device", "bf16",
     _set(out=lambda a, d, o: torch.empty(3, H, 512, dtype=torch.bfloat16, device=o)), ValueError, r"\bout\b.*on"),
    ("out-aliases-q", "bf16",
     _set(out=lambda a, d, o: a["q"].view(-1)[: 3 * H * 512].view(3, H, 512)), ValueError, r"\bout\b.*memory"),
]
CASE_IDS = [c[0] for c in CASES]
assert len(CASES) >= 20 and len(set(CASE_IDS)) == len(CASE_IDS)


def _broken(case, device, other_device):
    _, fmt, mutate, _, _ = case
    args = good_args(device, fmt)
    mutate(args, device, other_device)
    return args


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_mla_decode_rejects(case, device, other_device, no_launch):
    args = _broken(case, device, other_device)
    _, _, _, exc, pattern = case
    with pytest.raises(exc, match=pattern):
        _api().mla_decode(args["q"], args["cache"], args["kv_indptr"], qo_indptr=args["qo_indptr"],
                          sm_scale=args["sm_scale"], out=args["out"])


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_check_decode_inputs_rejects(case, device, other_device):
    args = _broken(case, device, other_device)
    _, _, _, exc, pattern = case
    with pytest.raises(exc, match=pattern):
        validate.check_decode_inputs(**args)


# ----------------------------------------------------------------------------------------------
# valid inputs pass (and are not over-restricted)


@pytest.mark.parametrize("fmt", ["bf16", "fp8", "mxfp4"])
def test_valid_inputs_pass(fmt, device):
    args = good_args(device, fmt)
    info = validate.check_decode_inputs(**args)
    assert info.batch == 2 and info.total_q == 3 and info.num_heads == H
    assert info.kv_ptr.tolist() == [0, 5, 8] and info.qo_ptr.tolist() == [0, 1, 3]
    assert info.cache.format == fmt
    assert math.isclose(info.sm_scale, 1 / math.sqrt(576))


def test_accepted_variants(device):
    """int64 indptrs, strided rows of q and the cache, a cache larger than needed, Lq > Lk,
    empty requests, qo_indptr None with one query per request, containers, an explicit out."""
    total_q, total_kv = 3, 8
    q_big = torch.randn(total_q, 2 * H, 640, device=device).to(torch.bfloat16)
    q = q_big[:, ::2, :576]  # strided heads and rows, unit last stride
    kv_big = torch.randn(total_kv + 4, 1, 600, device=device).to(torch.bfloat16)
    cache = kv_big[:, :, :576]  # strided rows, 4 spare rows
    kv = torch.tensor([0, 0, 2], dtype=torch.int64, device=device)  # request 0 empty; Lq=2 > Lk=2? equal
    qo = torch.tensor([0, 1, 3], dtype=torch.int64, device=device)
    out = torch.empty(total_q, H, 512, dtype=torch.bfloat16, device=device)
    info = validate.check_decode_inputs(q, cache, kv, qo, sm_scale=0.1, out=out)
    assert info.kv_ptr.tolist() == [0, 0, 2]
    # Lq = 3 > Lk = 1 is allowed (some queries see nothing and output zeros)
    validate.check_decode_inputs(q, cache, torch.tensor([0, 1], dtype=torch.int32, device=device),
                                 torch.tensor([0, 3], dtype=torch.int32, device=device))
    # one query per request without qo_indptr; all requests empty; an empty cache
    empty = torch.empty(0, 1, 576, dtype=torch.bfloat16, device=device)
    info = validate.check_decode_inputs(q, empty, torch.zeros(4, dtype=torch.int32, device=device))
    assert info.qo_ptr.tolist() == [0, 1, 2, 3]
    # float4 / e8m0 dtypes and containers
    mx = quantize_mxfp4(torch.randn(total_kv, 576, device=device))
    for data in [mx.data] + ([mx.data.view(torch.float4_e2m1fn_x2)] if hasattr(torch, "float4_e2m1fn_x2") else []):
        scales = mx.scales.view(torch.float8_e8m0fnu) if hasattr(torch, "float8_e8m0fnu") else mx.scales
        validate.check_decode_inputs(q, (data, scales), kv, qo)
    validate.check_decode_inputs(q, mx, kv, qo)
    # H = 32, 64, 128
    for heads in (32, 64, 128):
        validate.check_decode_inputs(torch.zeros(3, heads, 576, dtype=torch.bfloat16, device=device),
                                     cache, kv, qo)


def test_structural_checks_do_not_read_values(device):
    """check_values=False (what DecodePlan.run relies on) never reads tensor contents: it accepts
    indptr values that only the value checks would reject."""
    args = good_args(device, "fp8")
    args["kv_indptr"] = torch.tensor([3, 1, 99], dtype=torch.int32, device=device)
    args["cache"] = (args["cache"][0], torch.full((1,), math.nan, device=device))
    info = validate.check_decode_inputs(**args, check_values=False)
    assert info.kv_ptr is None and info.qo_ptr is None


# ----------------------------------------------------------------------------------------------
# plan(), DecodePlan.run(), custom_kernel(), the quantizers


PLAN_CASES = [
    ("num_heads-unsupported", dict(num_heads=24), ValueError, r"num_heads"),
    ("num_heads-str", dict(num_heads="16"), TypeError, r"num_heads"),
    ("fmt-unknown", dict(fmt="int4"), ValueError, r"fmt"),
    ("sm_scale-nan", dict(sm_scale=math.nan), ValueError, r"sm_scale"),
    ("kv_indptr-float", dict(kv_indptr=[0.0, 5.0, 8.0]), TypeError, r"kv_indptr"),
    ("kv_indptr-decreasing", dict(kv_indptr=[0, 6, 5]), ValueError, r"kv_indptr"),
    ("kv_indptr-not-from-0", dict(kv_indptr=[2, 6, 8]), ValueError, r"kv_indptr"),
    ("qo_indptr-batch-differs", dict(qo_indptr=[0, 1, 2, 3]), ValueError, r"qo_indptr"),
    ("qo_indptr-decreasing", dict(qo_indptr=[0, 2, 1]), ValueError, r"qo_indptr"),
]


@pytest.mark.parametrize("case", PLAN_CASES, ids=[c[0] for c in PLAN_CASES])
def test_plan_rejects(case, device, no_launch):
    _, change, exc, pattern = case
    kw = dict(kv_indptr=[0, 5, 8], qo_indptr=[0, 1, 3], num_heads=H, fmt="bf16", sm_scale=None)
    kw.update(change)
    for key in ("kv_indptr", "qo_indptr"):
        vals = kw[key]
        dtype = torch.float32 if isinstance(vals[0], float) else torch.int32
        kw[key] = torch.tensor(vals, dtype=dtype, device=device)
    with pytest.raises(exc, match=pattern):
        _api().plan(kw["kv_indptr"], kw["qo_indptr"], num_heads=kw["num_heads"], fmt=kw["fmt"],
                    sm_scale=kw["sm_scale"], device=device)
    with pytest.raises(exc, match=pattern):
        validate.check_plan_inputs(**kw)


RUN_CASES = [
    ("q-heads-differ", lambda a, d, o: dict(q=torch.cat([a["q"], a["q"]], 1)), ValueError, r"\bq\b"),
    ("q-rows-differ", lambda a, d, o: dict(q=a["q"][:2]), ValueError, r"\bq\b.*total_q"),
    ("q-dtype", lambda a, d, o: dict(q=a["q"].float()), TypeError, r"\bq\b"),
    ("q-other-device", lambda a, d, o: dict(q=a["q"].to(o)), ValueError, r"\bq\b.*on"),
    ("cache-format-differs", lambda a, d, o: dict(cache=_cache("fp8", 8, d)), ValueError, r"cache.*format"),
    ("cache-too-few-rows", lambda a, d, o: dict(cache=a["cache"][:7]), ValueError, r"cache.*rows"),
    ("cache-dtype", lambda a, d, o: dict(cache=a["cache"].half()), TypeError, r"cache"),
    ("cache-other-device", lambda a, d, o: dict(cache=a["cache"].to(o)), ValueError, r"cache"),
    ("out-shape", lambda a, d, o: dict(out=torch.empty(3, H, 576, dtype=torch.bfloat16, device=d)), ValueError,
     r"\bout\b"),
    ("out-dtype", lambda a, d, o: dict(out=torch.empty(3, H, 512, dtype=torch.float16, device=d)), TypeError,
     r"\bout\b"),
]


@pytest.mark.parametrize("case", RUN_CASES, ids=[c[0] for c in RUN_CASES])
def test_run_rejects(case, plan_device, device, other_device, no_launch):
    _, change, exc, pattern = case
    args = good_args(device, "bf16")
    p = _api().plan(args["kv_indptr"], args["qo_indptr"], num_heads=H, fmt="bf16", device=device)
    kw = dict(q=args["q"], cache=args["cache"], out=None)
    kw.update(change(args, device, other_device))
    with pytest.raises(exc, match=pattern):
        p.run(kw["q"], kw["cache"], out=kw["out"])
    with pytest.raises(exc, match=pattern):
        validate.check_run_inputs(p, kw["q"], kw["cache"], kw["out"])


def test_check_run_inputs_reads_no_values(plan_device, device, monkeypatch):
    """run's checks use metadata only: reading any tensor value (a host sync on a GPU) fails."""
    args = good_args(device, "fp8")
    p = _api().plan(args["kv_indptr"], args["qo_indptr"], num_heads=H, fmt="fp8", device=device)
    out = torch.empty(3, H, 512, dtype=torch.bfloat16, device=device)

    def refuse(*a, **k):
        raise AssertionError("check_run_inputs read a tensor value")

    for name in ("item", "tolist", "__bool__", "__int__", "__float__", "__index__", "cpu", "numpy"):
        monkeypatch.setattr(torch.Tensor, name, refuse)
    validate.check_run_inputs(p, args["q"], args["cache"], out)


def test_check_run_inputs_replacement_indptrs(plan_device, device, other_device):
    """Replacement indptrs for one run (custom_kernel with fresh tensors) are checked structurally."""
    args = good_args(device, "bf16")
    p = _api().plan(args["kv_indptr"], args["qo_indptr"], num_heads=H, fmt="bf16", device=device)
    ok = torch.tensor([0, 2, 8], dtype=torch.int32, device=device)
    validate.check_run_inputs(p, args["q"], args["cache"], None, kv_indptr=ok, qo_indptr=args["qo_indptr"])
    bad = [
        (dict(kv_indptr=torch.tensor([0, 2, 5, 8], dtype=torch.int32, device=device)), ValueError, r"kv_indptr.*batch"),
        (dict(qo_indptr=ok.float()), TypeError, r"qo_indptr"),
        (dict(kv_indptr=ok.to(other_device)), ValueError, r"kv_indptr.*on"),
    ]
    for kw, exc, pattern in bad:
        with pytest.raises(exc, match=pattern):
            validate.check_run_inputs(p, args["q"], args["cache"], None, **kw)


CUSTOM_CASES = [
    ("data-not-tuple", lambda d: {"q": d[0]}, "auto", TypeError, r"data"),
    ("data-wrong-length", lambda d: d[:4], "auto", TypeError, r"data"),
    ("kv_data-not-dict", lambda d: (d[0], d[1]["bf16"], d[2], d[3], d[4]), "auto", TypeError, r"kv_data"),
    ("kv_data-missing-format", lambda d: (d[0], {"bf16": d[1]["bf16"]}, d[2], d[3], d[4]), "mxfp4", ValueError,
     r"kv_data"),
    ("fmt-unknown", lambda d: d, "int4", ValueError, r"fmt"),
    ("q-dtype", lambda d: (d[0].float(),) + tuple(d[1:]), "bf16", TypeError, r"\bq\b"),
    ("fp8-scale-zero", lambda d: _with_fp8_scale(d, 0.0), "fp8", ValueError, r"cache: fp8 scale.*> 0, got 0.0"),
    ("fp8-scale-nan", lambda d: _with_fp8_scale(d, math.nan), "fp8", ValueError, r"cache: fp8 scale.*got nan"),
]


def _with_fp8_scale(data, value):
    q, kv_data, qo, kv, config = data
    fp8, scale = kv_data["fp8"]
    return (q, dict(kv_data, fp8=(fp8, torch.full_like(scale, value))), qo, kv, config)


@pytest.mark.parametrize("case", CUSTOM_CASES, ids=[c[0] for c in CUSTOM_CASES])
def test_custom_kernel_rejects(case, plan_device, device, no_launch):
    from mixmla.inputs import generate_input

    _, change, fmt, exc, pattern = case
    data = generate_input(2, 1, 5, seed=1, device=device)
    with pytest.raises(exc, match=pattern):
        _api().custom_kernel(change(data), fmt=fmt)


# ----------------------------------------------------------------------------------------------
# the paths that reuse a plan check each call's own values (issue 11): custom_kernel's later calls
# of a shape, and DecodePlan.run(check=True)

# The rules that hold for one call's tensors, whatever plan serves it: every case of CASES but the
# softmax scale (a plan's, for run) and qo_indptr=None (run then uses the plan's own).
CALL_CASES = [c for c in CASES if not c[0].startswith("sm_scale") and c[0] != "qo_indptr-none-but-total_q-differs"]
OUT_CASE_IDS = {c[0] for c in CASES if c[0].startswith("out-")}


def _benchmark_tuple(a, fmt):
    """``a`` (mla_decode's arguments) as custom_kernel's data, with the config of the shape."""
    config = {"batch_size": len(KV_LENS), "q_seq_len": max(Q_LENS), "kv_seq_len": max(KV_LENS),
              "sm_scale": a["sm_scale"]}
    return (a["q"], {fmt: a["cache"]}, a["qo_indptr"], a["kv_indptr"], config)


@pytest.fixture
def empty_plan_cache(monkeypatch):
    """custom_kernel's plan cache, empty for this test, and its graph cache too: on a GPU a call
    whose tensors land at an earlier test's addresses would otherwise replay that test's graph
    (as documented) and look up no plan."""
    from mixmla.graphs import GraphCache
    monkeypatch.setattr(_api(), "_PLAN_CACHE", collections.OrderedDict())
    monkeypatch.setattr(_api(), "_GRAPHS", GraphCache(capacity=16))
    return _api()._PLAN_CACHE


@pytest.mark.parametrize("case", [c for c in CASES if c[0] not in OUT_CASE_IDS],
                         ids=[c[0] for c in CASES if c[0] not in OUT_CASE_IDS])
def test_custom_kernel_checks_a_later_call_of_a_shape(case, plan_device, device, other_device, monkeypatch,
                                                      empty_plan_cache):
    """A valid call of a shape caches its plan; a later call of that shape with one rule broken is
    rejected as mla_decode rejects it, before its plan runs."""
    from mixmla.kernels.triton.backend import TritonPlan

    _, fmt, _, exc, pattern = case
    monkeypatch.setattr(TritonPlan, "run", lambda self, *args: None)  # the valid call plans, launches nothing
    _api().custom_kernel(_benchmark_tuple(good_args(device, fmt), fmt), fmt=fmt)
    assert len(empty_plan_cache) == 1
    refuse_launches(monkeypatch)
    with pytest.raises(exc, match=pattern):
        _api().custom_kernel(_benchmark_tuple(_broken(case, device, other_device), fmt), fmt=fmt)


def test_custom_kernel_rejects_kv_indptr_beyond_its_cache_after_a_larger_batch(plan_device, device, monkeypatch,
                                                                            empty_plan_cache):
    """The plan of a batch of 8 cached tokens serves a later batch of the same config with a
    cache of 6 rows; that batch's kv_indptr ending at 7 is beyond its own cache (not the first's)."""
    from mixmla.kernels.triton.backend import TritonPlan

    monkeypatch.setattr(TritonPlan, "run", lambda self, *args: None)
    _api().custom_kernel(_benchmark_tuple(good_args(device), "bf16"), fmt="bf16")
    refuse_launches(monkeypatch)
    later = good_args(device)
    later.update(cache=later["cache"][:6], kv_indptr=indptr([5, 2], device=device))
    with pytest.raises(ValueError, match=r"kv_indptr ends at 7, beyond the cache's 6 rows"):
        _api().custom_kernel(_benchmark_tuple(later, "bf16"), fmt="bf16")


def test_a_rejected_custom_kernel_call_does_not_poison_the_plan_cache(plan_device, device, empty_plan_cache):
    """A call rejected for its kv_indptr leaves nothing in the plan cache, so the next, valid call
    of the same shape gets its own plan and the right output."""
    from mixmla.check import check_strict
    from mixmla.reference import mla_decode_reference

    bad = good_args(device)
    bad["kv_indptr"] = indptr([5, 4], device=device)  # ends at 9; the cache has 8 rows
    with pytest.raises(ValueError, match=r"kv_indptr ends at 9, beyond the cache's 8 rows"):
        _api().custom_kernel(_benchmark_tuple(bad, "bf16"), fmt="bf16")
    assert len(empty_plan_cache) == 0
    good = good_args(device)
    out = _api().custom_kernel(_benchmark_tuple(good, "bf16"), fmt="bf16", use_graphs=False)
    ref, _ = mla_decode_reference(good["q"], good["cache"], good["kv_indptr"], good["qo_indptr"])
    result = check_strict(out, ref)
    assert result, result.message


@pytest.mark.parametrize("case", CALL_CASES, ids=[c[0] for c in CALL_CASES])
def test_run_check_rejects_what_mla_decode_rejects(case, plan_device, device, other_device, no_launch):
    """run(check=True) with one call's tensors broken (q, cache, out, replacement indptrs): the
    error mla_decode gives, before anything runs."""
    _, fmt, _, exc, pattern = case
    good = good_args(device, fmt)
    p = _api().plan(good["kv_indptr"], good["qo_indptr"], num_heads=H, fmt=fmt, device=device)
    a = _broken(case, device, other_device)
    with pytest.raises(exc, match=pattern):
        p.run(a["q"], a["cache"], out=a["out"], kv_indptr=a["kv_indptr"], qo_indptr=a["qo_indptr"], check=True)


def _rewrite(name, lens):
    """Write ``lens``' prefix sums into the plan's own indptr ``name`` (kept by reference), as a
    serving loop does between graph replays; run then gets no replacement."""
    def change(p, a):
        getattr(p, name).copy_(indptr(lens, device=a["q"].device))
        return {}

    return change


def _replace(name, lens):
    return lambda p, a: {name: indptr(lens, device=a["q"].device)}


RUN_VALUE_CASES = [
    # (id, change(plan, args) -> run's replacement indptrs, regex)
    ("kv_indptr-past-the-cache-end", _replace("kv_indptr", [5, 4]), r"kv_indptr ends at 9, beyond the cache's 8 rows"),
    ("planned-kv_indptr-grown-in-place", _rewrite("kv_indptr", [6, 3]),
     r"kv_indptr ends at 9, beyond the cache's 8 rows"),
    ("more-query-tokens-than-planned", _replace("qo_indptr", [0, 3]),
     r"qo_indptr: request 1 has 3 query tokens.*at most 2"),
    ("planned-qo_indptr-changed-in-place", _rewrite("qo_indptr", [3, 0]),
     r"qo_indptr: request 0 has 3 query tokens.*at most 2"),
]


@pytest.mark.parametrize("case", RUN_VALUE_CASES, ids=[c[0] for c in RUN_VALUE_CASES])
def test_run_check_rejects_values_the_plan_cannot_serve(case, plan_device, device, no_launch):
    """Values only a host read can see: indptrs past the cache's end or giving a request more
    query tokens than the plan covers, whether passed to run or written into the plan's own."""
    _, change, pattern = case
    a = good_args(device)
    p = _api().plan(indptr(KV_LENS, device=device), indptr(Q_LENS, device=device), num_heads=H, fmt="bf16",
                    device=device)
    kw = change(p, a)
    with pytest.raises(ValueError, match=pattern):
        p.run(a["q"], a["cache"], check=True, **kw)


def test_run_reads_values_only_when_asked(plan_device, device, monkeypatch):
    """run() never reads a tensor's values on the host (that would sync); run(check=True) reads
    them in one transfer of the indptrs and the fp8 scale together."""
    from mixmla.kernels.triton.backend import TritonPlan

    a = good_args(device, "fp8")
    p = _api().plan(a["kv_indptr"], a["qo_indptr"], num_heads=H, fmt="fp8", device=device)
    monkeypatch.setattr(TritonPlan, "run", lambda self, *args: None)
    reads = []
    real = validate._host_values
    monkeypatch.setattr(validate, "_host_values", lambda tensors: reads.append(len(tensors)) or real(tensors))
    kv = indptr([2, 6], device=device)
    p.run(a["q"], a["cache"], kv_indptr=kv)
    p.run(a["q"], a["cache"])
    assert reads == []
    p.run(a["q"], a["cache"], kv_indptr=kv, check=True)
    assert reads == [3]


def test_run_check_accepts_a_smaller_cache_and_matches_run(plan_device, device):
    """A valid replacement kv_indptr that reads fewer rows than the plan was made with, over a cache
    of just those rows: accepted with and without the check, with the same bits, and right."""
    from mixmla.check import check_strict
    from mixmla.reference import mla_decode_reference

    a = good_args(device, "fp8")
    p = _api().plan(a["kv_indptr"], a["qo_indptr"], num_heads=H, fmt="fp8", device=device)
    data, scale = a["cache"]
    cache, kv = (data[:6], scale), indptr([2, 4], device=device)
    checked = p.run(a["q"], cache, out=torch.full_like(p.out, math.nan), kv_indptr=kv, check=True).clone()
    unchecked = p.run(a["q"], cache, out=torch.full_like(p.out, math.nan), kv_indptr=kv)
    assert torch.equal(checked.view(torch.int16), unchecked.view(torch.int16))
    ref, _ = mla_decode_reference(a["q"], cache, kv, a["qo_indptr"])
    result = check_strict(checked, ref)
    assert result, result.message


QUANTIZER_CASES = [
    ("fp8-x-int", lambda d: quantize_fp8(torch.ones(2, 576, dtype=torch.int32, device=d)), TypeError, r"\bx\b"),
    ("fp8-x-nan", lambda d: quantize_fp8(torch.full((2, 576), math.nan, device=d)), ValueError, r"\bx\b.*NaN"),
    ("fp8-x-inf", lambda d: quantize_fp8(torch.full((2, 576), math.inf, device=d)), ValueError, r"\bx\b"),
    ("fp8-dtype", lambda d: quantize_fp8(torch.ones(2, 576, device=d), dtype=torch.float16), TypeError, r"dtype"),
    ("fp8-x-width", lambda d: quantize_fp8(torch.ones(2, 512, device=d)), ValueError, r"576"),
    ("mxfp4-x-int", lambda d: quantize_mxfp4(torch.ones(2, 576, dtype=torch.uint8, device=d)), TypeError, r"\bx\b"),
    ("mxfp4-x-width", lambda d: quantize_mxfp4(torch.ones(2, 512, device=d)), ValueError, r"\bx\b.*576"),
    ("mxfp4-x-two-heads", lambda d: quantize_mxfp4(torch.ones(2, 2, 576, device=d)), ValueError, r"\bx\b"),
    ("mxfp4-x-nan", lambda d: quantize_mxfp4(torch.full((2, 576), math.nan, device=d)), ValueError,
     r"\bx\b.*NaN or Inf"),
    ("mxfp4-x-inf", lambda d: quantize_mxfp4(_one_value(math.inf, d)), ValueError, r"\bx\b.*NaN or Inf"),
    ("mxfp4-x-minus-inf-mse", lambda d: quantize_mxfp4(_one_value(-math.inf, d), scale_rule="mse"), ValueError,
     r"\bx\b.*NaN or Inf"),
    ("mxfp4-x-one-nan-bf16", lambda d: quantize_mxfp4(_one_value(math.nan, d).bfloat16()), ValueError,
     r"\bx\b.*NaN or Inf"),
    ("format-unknown", lambda d: quantize_any(torch.ones(2, 576, device=d), "int4"), ValueError, r"format"),
]


def _one_value(value, device):
    """A (3, 1, 576) normal cache with one element set to ``value``."""
    x = torch.randn(3, 1, 576, device=device)
    x[1, 0, 300] = value
    return x


@pytest.mark.parametrize("case", QUANTIZER_CASES, ids=[c[0] for c in QUANTIZER_CASES])
def test_quantizers_reject(case, device):
    _, call, exc, pattern = case
    with pytest.raises(exc, match=pattern):
        call(device)
