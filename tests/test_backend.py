"""The backend seam: ``backend=`` on ``plan``, ``mla_decode`` and ``custom_kernel`` picks the
implementation behind ``mixmla.kernels.backend.Backend``; 'auto' is the Triton backend, an unknown
or absent backend is a clear ValueError before anything is launched, and a backend registered as
``mixmla.kernels.<name>.backend`` receives exactly what the interface documents."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
import torch

from mixmla import api
from mixmla.kernels.triton.configs import KernelConfig
from mixmla.check import check_strict
from mixmla.formats import Fp8Cache, quantize
from mixmla.inputs import generate_input
from mixmla.kernels.backend import Backend, BackendPlan, Layout
from mixmla.reference import mla_decode_reference

from conftest import DEVICE, indptr, poisoned_out, stand_in_gluon_backend

GLUON_PRESENT = importlib.util.find_spec("mixmla.kernels.gluon") is not None and \
    importlib.util.find_spec("mixmla.kernels.gluon.backend") is not None


def _problem(fmt="fp8", kv_lens=(40, 0, 75), heads=16, seed=3):
    gen = torch.Generator(device=DEVICE).manual_seed(seed)
    q = torch.randn(len(kv_lens), heads, 576, generator=gen, device=DEVICE).to(torch.bfloat16)
    cache = quantize(torch.randn(sum(kv_lens), 576, generator=gen, device=DEVICE), fmt)
    return q, cache, indptr(kv_lens)


def test_auto_is_the_triton_backend_and_gives_its_bits():
    q, cache, kv_indptr = _problem()
    auto = api.plan(kv_indptr, num_heads=16, fmt="fp8")
    triton = api.plan(kv_indptr, num_heads=16, fmt="fp8", backend="triton")
    assert auto.backend == triton.backend == "triton"
    a = auto.run(q, cache, out=poisoned_out(3, 16))
    b = triton.run(q, cache, out=poisoned_out(3, 16))
    assert torch.equal(a.view(torch.int16), b.view(torch.int16))
    ref, _ = mla_decode_reference(q, cache, kv_indptr)
    assert check_strict(a, ref).passed


@pytest.mark.parametrize("name", ["cuda", "Triton", "", None])
def test_unknown_backend_is_a_value_error(name):
    q, cache, kv_indptr = _problem()
    with pytest.raises(ValueError, match="backend must be one of"):
        api.plan(kv_indptr, num_heads=16, fmt="fp8", backend=name)
    with pytest.raises(ValueError, match="backend must be one of"):
        api.mla_decode(q, cache, kv_indptr, backend=name)


@pytest.mark.skipif(GLUON_PRESENT, reason="this installation has the Gluon backend")
def test_gluon_until_it_exists_is_a_clear_error():
    q, cache, kv_indptr = _problem()
    for call in (lambda: api.plan(kv_indptr, num_heads=16, fmt="fp8", backend="gluon"),
                 lambda: api.mla_decode(q, cache, kv_indptr, backend="gluon"),
                 lambda: api.custom_kernel(generate_input(2, 1, 16, seed=1, device=DEVICE), "fp8", backend="gluon")):
        with pytest.raises(ValueError, match=r"backend='gluon'.*not available.*backend='triton'"):
            call()


class _RecordingPlan(BackendPlan):
    def __init__(self, layout, config):
        self.layout, self.config, self.schedule, self.calls = layout, config, None, []

    def run(self, q, cache, kv_indptr, qo_indptr, out, lse):
        self.calls.append((q, cache, kv_indptr, qo_indptr, out, lse))
        out.fill_(1.0)
        if lse is not None:
            lse.fill_(2.0)


class _RecordingBackend(Backend):
    name = "gluon"

    def __init__(self):
        self.plans = []

    def unsupported(self, layout):
        return "needs fp8" if layout.fmt != "fp8" else None

    def plan(self, layout, config=None):
        self.plans.append(_RecordingPlan(layout, config))
        return self.plans[-1]


@pytest.fixture
def recording_backend(monkeypatch):
    backend = _RecordingBackend()
    stand_in_gluon_backend(monkeypatch, backend)
    return backend


def test_a_registered_backend_gets_the_layout_and_the_documented_run_arguments(recording_backend):
    q, cache, kv_indptr = _problem()
    data, scale = cache.data, cache.scale
    qo_indptr = indptr([1, 1, 1], torch.int64)
    config = object()
    p = api.plan(kv_indptr, qo_indptr, num_heads=16, fmt="fp8", sm_scale=0.5, backend="gluon", config=config)
    (bp,) = recording_backend.plans
    layout = bp.layout
    assert isinstance(layout, Layout) and p.backend == "gluon" and p.config is config
    assert (layout.num_heads, layout.fmt, layout.sm_scale, layout.batch) == (16, "fp8", 0.5, 3)
    assert layout.kv_lens.tolist() == [40, 0, 75] and layout.q_lens.tolist() == [1, 1, 1]
    assert layout.kv_lens.dtype == np.int64 and layout.device.type == DEVICE.type
    out, lse = p.run(q, (data, scale), return_lse=True)
    (rq, rcache, rkv, rqo, rout, rlse), = bp.calls
    assert rq is q and isinstance(rcache, Fp8Cache) and rcache.data is data
    assert rkv is kv_indptr and rqo.dtype == torch.int32 and rqo.tolist() == [0, 1, 2, 3]
    assert rout is out is p.out and rlse is lse is p.lse
    assert bool((out == 1.0).all()) and bool((lse == 2.0).all())


def test_auto_with_a_config_is_triton_where_gluon_is_preferred(recording_backend, monkeypatch):
    """A config is a Triton kernel shape: 'auto' must not hand it to the Hopper backend, which
    takes none, even where that backend is preferred."""
    monkeypatch.setattr(recording_backend, "preferred", lambda layout: True, raising=False)
    _, _, kv_indptr = _problem()
    assert api.plan(kv_indptr, num_heads=16, fmt="fp8").backend == "gluon"
    config = KernelConfig(block_t=32)
    p = api.plan(kv_indptr, num_heads=16, fmt="fp8", config=config)
    assert p.backend == "triton" and p.config == config


def test_a_backend_that_cannot_run_the_layout_says_why(recording_backend):
    _, _, kv_indptr = _problem()
    with pytest.raises(ValueError, match="needs fp8"):
        api.plan(kv_indptr, num_heads=16, fmt="bf16", backend="gluon")


def test_gluon_says_why_it_cannot_run_a_layout():
    """backend='gluon' on a layout the Hopper kernel does not serve: a ValueError with the reason,
    before anything runs; each rule of ``layout_unsupported`` separately."""
    from mixmla.kernels.gluon.launch import MAX_BATCH, layout_unsupported
    q, cache, kv_indptr = _problem()
    if DEVICE.type == "cpu":
        with pytest.raises(ValueError, match="backend='gluon' cannot run this plan: runs on CUDA devices only"):
            api.plan(kv_indptr, num_heads=16, fmt="fp8", backend="gluon")
    assert layout_unsupported(None, "fp8", 16, 16, 4) == "runs on CUDA devices only"
    assert "sm_90" in layout_unsupported((8, 0), "fp8", 16, 16, 4)
    assert "sm_100" in layout_unsupported((10, 0), "mxfp4", 16, 16, 4)
    assert "bf16" in layout_unsupported((9, 0), "bf16", 16, 16, 4)
    assert "32 heads" in layout_unsupported((9, 0), "fp8", 32, 32, 4)
    assert "32 query rows" in layout_unsupported((9, 0), "fp8", 16, 32, 4)
    assert str(MAX_BATCH) in layout_unsupported((9, 0), "mxfp4", 16, 16, MAX_BATCH + 1)
    for fmt in ("fp8", "mxfp4"):
        assert layout_unsupported((9, 0), fmt, 16, 16, MAX_BATCH) is None


def test_a_replacement_indptr_must_have_a_dtype_the_backend_reads(recording_backend):
    """A backend reads the indptrs as its ``indptr_dtypes`` (by default int32 only, as the Hopper
    kernel does); run converts nothing (that would allocate), so a replacement of another dtype is
    a TypeError before the backend runs. Triton reads int32 and int64."""
    q, cache, kv_indptr = _problem()
    p = api.plan(kv_indptr, num_heads=16, fmt="fp8", backend="gluon")
    (bp,) = recording_backend.plans
    assert p.indptr_dtypes == (torch.int32,)
    for name in ("kv_indptr", "qo_indptr"):
        wide = (kv_indptr if name == "kv_indptr" else indptr([1, 1, 1])).to(torch.int64)
        with pytest.raises(TypeError, match=rf"{name} must have dtype torch.int32 \(what the gluon kernels read\)"):
            p.run(q, cache, **{name: wide})
    assert bp.calls == []
    p.run(q, cache, kv_indptr=kv_indptr.clone())
    assert len(bp.calls) == 1
    triton = api.plan(kv_indptr, num_heads=16, fmt="fp8", backend="triton")
    assert set(triton.indptr_dtypes) == {torch.int32, torch.int64}


def test_auto_format_prefers_what_the_hopper_kernel_serves(monkeypatch):
    """From AUTO_HOPPER_MIN_TOKENS 'auto' takes fp8, then MXFP4, where the Hopper kernel serves them;
    otherwise bf16 first. (Which formats the kernel serves is its own check, stubbed here.)"""
    from mixmla import api
    served = set()
    monkeypatch.setattr(api, "_hopper_serves", lambda fmt, kv, q: fmt in served)
    everything = dict.fromkeys(("bf16", "fp8", "mxfp4"))
    q = torch.zeros(1)
    assert api.choose_format(everything, q) == "bf16"
    served.update({"fp8", "mxfp4"})
    assert api.choose_format(everything, q) == "fp8"
    assert api.choose_format({"bf16": None, "mxfp4": None}, q) == "mxfp4"
    assert api.choose_format(everything) == "bf16"  # no query: nothing to check the kernel against
    served.discard("fp8")
    assert api.choose_format(everything, q) == "mxfp4"


def test_auto_format_follows_the_device(monkeypatch):
    """On a device with its own measured order (AUTO_HOPPER_ORDER_BY_DEVICE) 'auto' takes that order's
    first served format; on any other device, and for a query not on a GPU, AUTO_HOPPER_ORDER's."""
    from mixmla import api
    monkeypatch.setattr(api, "_hopper_serves", lambda fmt, kv, q: fmt in ("fp8", "mxfp4"))
    names = {}
    monkeypatch.setattr(api, "_device_name", lambda device: names[device.index])
    names.update({0: "NVIDIA H100 80GB HBM3", 1: "NVIDIA H200"})
    everything = dict.fromkeys(("bf16", "fp8", "mxfp4"))

    class OnDevice:  # a query on CUDA device ``index`` (only its device is read here)
        def __init__(self, index):
            self.device = torch.device("cuda", index)

    assert api.AUTO_HOPPER_ORDER_BY_DEVICE["NVIDIA H100 80GB HBM3"] == ("mxfp4", "fp8")
    assert api.choose_format(everything, OnDevice(0)) == "mxfp4"
    assert api.choose_format({"bf16": None, "fp8": None}, OnDevice(0)) == "fp8"
    assert api.choose_format(everything, OnDevice(1)) == "fp8"
    assert api.choose_format(everything, torch.zeros(1)) == "fp8"


def test_auto_format_below_the_hopper_threshold_follows_the_device(monkeypatch):
    """Below AUTO_HOPPER_MIN_TOKENS a device with a rule in AUTO_FORMAT_ORDER_BY_DEVICE takes that
    rule's order from its number of cached tokens (the rows of any format present), and
    AUTO_FORMAT_ORDER below it; other devices and CPU queries keep AUTO_FORMAT_ORDER."""
    from mixmla import api
    monkeypatch.setattr(api, "_hopper_serves", lambda fmt, kv, q: False)
    names = {0: "NVIDIA H100 80GB HBM3", 1: "NVIDIA H200"}
    monkeypatch.setattr(api, "_device_name", lambda device: names[device.index])

    class OnDevice:
        def __init__(self, index):
            self.device = torch.device("cuda", index)

    tokens, order = api.AUTO_FORMAT_ORDER_BY_DEVICE["NVIDIA H100 80GB HBM3"]
    assert tokens < api.AUTO_HOPPER_MIN_TOKENS and order[0] == "fp8"

    def caches(rows):  # the three formats as custom_kernel's data holds them, no values needed
        return {"bf16": torch.empty(rows, 0), "fp8": (torch.empty(rows, 0), torch.ones(1)),
                "mxfp4": (torch.empty(rows, 0), torch.empty(rows, 0))}

    assert api.choose_format(caches(tokens), OnDevice(0)) == "fp8"
    assert api.choose_format(caches(tokens - 1), OnDevice(0)) == "bf16"
    assert api.choose_format({"bf16": torch.empty(tokens, 0), "mxfp4": caches(tokens)["mxfp4"]}, OnDevice(0)) == "bf16"
    assert api.choose_format(caches(tokens), OnDevice(1)) == "bf16"
    assert api.choose_format(caches(tokens), torch.zeros(1)) == "bf16"


def test_auto_format_on_cpu_tensors_is_bf16():
    from mixmla import api
    from mixmla.inputs import generate_input
    data = generate_input(2, 1, 64, seed=1)
    assert api.choose_format(data[1], data[0]) == "bf16"
