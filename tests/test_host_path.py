"""The host path of a call: ``run`` repeats the last call's launches only for tensors identical in
address and layout (and checks everything otherwise), the device values are read through the
staging buffer intact, one-call decodes share a workspace without mixing results, and the compiled
launcher is called past ``CudaLauncher.__call__`` only where its source is the known one."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import mixmla
from mixmla import api, validate
from mixmla.check import check_strict
from mixmla.formats import quantize
from mixmla.reference import mla_decode_reference

from conftest import DEVICE, indptr, poisoned_out

KV_LENS, H = [70, 0, 133], 16


def _batch(fmt="bf16", seed=0):
    gen = torch.Generator(device=DEVICE).manual_seed(seed)
    kv = torch.randn(sum(KV_LENS), 576, generator=gen, device=DEVICE)
    q = torch.randn(len(KV_LENS), H, 576, generator=gen, device=DEVICE).to(torch.bfloat16)
    return q, quantize(kv, fmt)


def test_the_installed_triton_launcher_is_the_known_one():
    """Fails after a Triton upgrade that changed ``CudaLauncher.__call__``: then compiled launches
    go through ``__call__`` (correct, a few us slower); check what its ``launch`` takes now and
    update ``launch._KNOWN_LAUNCHER_CALL``."""
    from triton.backends.nvidia.driver import CudaLauncher

    from mixmla.kernels.triton import launch

    assert launch.launcher_call_is_known(CudaLauncher)

    class Other(CudaLauncher):
        def __call__(self, gridX, gridY, gridZ, stream, function, *args):
            self.launch(gridX, gridY, gridZ, stream, function, *args)

    assert not launch.launcher_call_is_known(Other)


def test_run_repeats_launches_only_for_identical_tensors(monkeypatch):
    q, cache = _batch()
    p = mixmla.plan(indptr(KV_LENS), num_heads=H)
    out = poisoned_out(q.shape[0], H)
    checks = []
    real = validate.check_run_inputs
    monkeypatch.setattr(validate, "check_run_inputs", lambda *a, **k: checks.append(1) or real(*a, **k))
    for _ in range(3):
        p.run(q, cache, out=out)
    assert len(checks) == 1
    p.run(q.clone(), cache, out=out)  # another address
    p.run(q, cache, out=out, return_lse=True)
    p.run(q, cache)
    p.run(q, cache, out=out, check=True)
    assert len(checks) == 5
    p.run(q, cache, out=out, check=True)  # check=True always checks
    assert len(checks) == 6
    # A call the checks reject is rejected every time, whatever ran before.
    with pytest.raises(ValueError, match="shares memory"):
        p.run(q, cache, out=cache.data.reshape(-1)[:q.shape[0] * H * 512].view(q.shape[0], H, 512))
    p.out = poisoned_out(q.shape[0], H)  # the plan's own buffer, replaced: the next run writes the new one
    p.run(q, cache)
    ref, _ = mla_decode_reference(q, cache, indptr(KV_LENS), indptr([1] * len(KV_LENS)))
    result = check_strict(p.out, ref)
    assert result, result.message


def test_a_converted_fp8_scale_is_not_repeated():
    """An fp8 scale the container converts (float64 -> float32) is a copy that lives for one call:
    such a call is not repeated from its addresses."""
    q, cache = _batch("fp8")
    p = mixmla.plan(indptr(KV_LENS), num_heads=H, fmt="fp8")
    p.run(q, (cache.data, cache.scale.double()))
    assert p._memo is None
    p.run(q, (cache.data, cache.scale))
    assert p._memo is not None


def test_staged_reads_keep_every_value(monkeypatch):
    """The device path of ``_host_values`` (here over CPU tensors, with an unpinned buffer): values
    of several dtypes and odd lengths come back exact, twice in a row through the same buffer."""
    monkeypatch.setattr(validate._STAGING, "buffer", torch.empty(1 << 12, dtype=torch.uint8))
    monkeypatch.setattr(validate._STAGING, "array", validate._STAGING.buffer.numpy())
    monkeypatch.setattr(validate._STAGING, "views", {})
    for seed in range(2):
        rng = np.random.default_rng(seed)
        tensors = [torch.from_numpy(rng.integers(-2 ** 31, 2 ** 31 - 1, 7).astype(np.int32)),
                   torch.from_numpy(rng.integers(-2 ** 62, 2 ** 62, 3)),
                   torch.tensor([math.pi * (seed + 1)], dtype=torch.float32),
                   torch.arange(5, dtype=torch.int32)]
        got = validate._staged_values(tensors)
        for t, g in zip(tensors, got):
            expected = t.numpy().astype(np.float32 if t.dtype.is_floating_point else np.int64)
            assert g.dtype == expected.dtype and np.array_equal(g, expected)


def test_one_call_decodes_share_a_workspace_and_keep_their_results():
    q, cache = _batch(seed=1)
    q2, _ = _batch(seed=2)
    kv = indptr(KV_LENS)
    a = mixmla.mla_decode(q, cache, kv)
    b, lse = mixmla.mla_decode(q2, cache, kv, return_lse=True)
    for got, query in ((a, q), (b, q2)):
        ref, _ = mla_decode_reference(query, cache, kv, indptr([1] * len(KV_LENS)))
        result = check_strict(got, ref)
        assert result, result.message
    assert a.data_ptr() != b.data_ptr() and lse.shape == (len(KV_LENS), H)
    assert len(api._ONE_CALL_WORKSPACE) >= 1


def test_a_layout_planned_again_shares_its_schedule_not_its_buffers(monkeypatch):
    from mixmla.kernels.triton import launch
    from mixmla.kernels.triton.backend import TritonBackend

    monkeypatch.setattr(api, "_LAYOUTS", {})
    planned = []
    real = TritonBackend.plan
    monkeypatch.setattr(TritonBackend, "plan", lambda self, *a, **k: planned.append(1) or real(self, *a, **k))
    q, cache = _batch(seed=3)
    kv = indptr(KV_LENS)
    a, b = mixmla.plan(kv, num_heads=H), mixmla.plan(kv, num_heads=H)
    assert len(planned) == 1 and a.schedule is b.schedule and a._plan is not b._plan
    assert a.out.data_ptr() != b.out.data_ptr()
    for p in (a, b):
        assert p._plan._key == launch.plan_key(p._plan.constants)
    out_a, lse_a = a.run(q, cache, out=poisoned_out(q.shape[0], H), return_lse=True)
    out_b, lse_b = b.run(q, cache, out=poisoned_out(q.shape[0], H), return_lse=True)
    assert torch.equal(out_a, out_b) and torch.equal(lse_a, lse_b)
    mixmla.plan(indptr([70, 1, 133]), num_heads=H)  # other lengths: planned
    assert len(planned) == 2


def test_a_layout_seen_before_is_planned_by_the_backend_chosen_now(monkeypatch):
    """The layout cache keeps a plan of the backend chosen when it was made; a call for which
    another backend is chosen (here a stand-in that 'auto' prefers) gets that backend's plan."""
    from conftest import stand_in_gluon_backend
    from mixmla.kernels.backend import Backend, BackendPlan

    class Plan(BackendPlan):
        config = schedule = None

        def run(self, q, cache, kv_indptr, qo_indptr, out, lse):
            out.fill_(1.0)

    class Preferred(Backend):
        name = "gluon"

        def unsupported(self, layout):
            return None

        def preferred(self, layout):
            return True

        def plan(self, layout, config=None):
            return Plan()

    q, cache = _batch(seed=4)
    kv = indptr(KV_LENS)
    assert mixmla.plan(kv, num_heads=H).backend == "triton"
    stand_in_gluon_backend(monkeypatch, Preferred())
    assert mixmla.plan(kv, num_heads=H).backend == "gluon"
    assert bool((mixmla.mla_decode(q, cache, kv) == 1.0).all())


def test_remembered_indptr_values_still_get_every_rule():
    """Values that passed the order rules before still meet the rules that depend on the call."""
    q, cache = _batch(seed=5)
    kv = indptr(KV_LENS)
    wide = mixmla.plan(kv, indptr([2, 1, 1]), num_heads=H)  # [0, 2, 3, 4] passes here
    assert wide.max_q_len == 2
    p = mixmla.plan(kv, num_heads=H)
    with pytest.raises(ValueError, match=r"request 0 has 2 query tokens, but at most 1 per request"):
        p.run(q, cache, qo_indptr=indptr([2, 1, 0]), check=True)
    with pytest.raises(ValueError, match=r"must end at total_q"):
        mixmla.mla_decode(q, cache, kv, indptr([2, 1, 1]))
    with pytest.raises(ValueError, match=r"beyond the cache's 100 rows"):
        mixmla.mla_decode(q, (cache.data[:100]), kv)
    with pytest.raises(ValueError, match=r"must be non-decreasing"):
        mixmla.plan(torch.tensor([0, 70, 69, 203], dtype=torch.int32, device=DEVICE), num_heads=H)


class _CountAllocations(torch.utils._python_dispatch.TorchDispatchMode):
    """Counts the aten operations that allocate a tensor (device memory on a GPU)."""

    ALLOCATING = {"empty", "empty_strided", "_to_copy", "cat", "arange", "clone", "zeros", "full", "new_empty"}

    def __init__(self):
        super().__init__()
        self.allocations = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.overloadpacket.__name__ in self.ALLOCATING:
            self.allocations += 1
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("fmt", ["bf16", "fp8"])
def test_plans_and_one_call_decodes_allocate_only_what_they_return(fmt, monkeypatch):
    """A plan makes one allocation (output, lse and workspace together); a one-call decode of a
    layout seen before allocates only its results; neither converts the int32 indptrs."""
    from mixmla.kernels.triton import launch

    q, _ = _batch(fmt, seed=6)
    cache = quantize(torch.randn(1000, 576, device=DEVICE), fmt)
    if fmt == "fp8":
        cache = (cache.data, cache.scale)
    kv = indptr([300, 0, 700])  # split into several chunks: a workspace
    qo = indptr([1, 1, 1])
    p = mixmla.plan(kv, qo, num_heads=H, fmt=fmt)
    assert not p.schedule.direct
    monkeypatch.setattr(launch, "run", lambda one: None)  # what is counted is the host side
    calls = {"plan": (lambda: mixmla.plan(kv, qo, num_heads=H, fmt=fmt), 1),
             "mla_decode": (lambda: mixmla.mla_decode(q, cache, kv, qo), 1),
             "mla_decode with lse": (lambda: mixmla.mla_decode(q, cache, kv, qo, return_lse=True), 2),
             "run": (lambda: p.run(q, cache), 0)}
    for name, (call, most) in calls.items():
        call()
        with _CountAllocations() as counted:
            call()
        assert counted.allocations <= most, (name, counted.allocations)


def test_plans_of_known_chunk_counts_keep_their_own_scale_and_lengths(monkeypatch):
    """Layouts of other lengths or scales with the chunk counts of one seen before share its work
    arrays (``_schedule_on_device``), never its scale: each plan launches what plan_key says and
    decodes as the reference does at its own scale."""
    from mixmla.kernels.triton import launch

    monkeypatch.setattr(api, "_LAYOUTS", {})
    q, cache = _batch(seed=7)
    plans = {}
    for lens, scale in (([70, 0, 133], None), ([71, 0, 132], None), ([70, 0, 133], 0.01)):
        p = mixmla.plan(indptr(lens), num_heads=H, sm_scale=scale)
        assert p._plan._key == launch.plan_key(p._plan.constants)
        assert p._plan.constants.sm_scale == p.sm_scale
        out = p.run(q, cache, out=poisoned_out(q.shape[0], H))
        ref, _ = mla_decode_reference(q, cache, indptr(lens), indptr([1] * len(lens)), p.sm_scale)
        result = check_strict(out, ref)
        assert result, result.message
        plans[tuple(lens), scale] = p
    a, b, c = plans.values()
    assert a.schedule is b.schedule and a._plan._work is b._plan._work  # the counts' arrays, shared
    assert c.sm_scale != a.sm_scale and c._plan.constants.sm_scale == c.sm_scale
    # A direct schedule's launch constants are shared by the plans of its counts, with their scale.
    d1 = mixmla.plan(indptr([3, 5, 2]), num_heads=H)
    d2 = mixmla.plan(indptr([3, 5, 2]), num_heads=H, sm_scale=0.02)
    assert d1.schedule.direct and d2.schedule.direct
    assert d1._plan.constants.sm_scale == d1.sm_scale and d2._plan.constants.sm_scale == 0.02


def _count(monkeypatch, module, name) -> list:
    """Calls of ``module.name`` from now on, one entry each."""
    calls, real = [], getattr(module, name)
    monkeypatch.setattr(module, name, lambda *a, **k: calls.append(1) or real(*a, **k))
    return calls


def _assert_decodes(got, q, cache, kv, qo=None, lse=None):
    ref, ref_lse = mla_decode_reference(q, cache, kv, indptr([1] * (kv.shape[0] - 1)) if qo is None else qo)
    result = check_strict(got, ref)
    assert result, result.message
    if lse is not None:
        assert torch.allclose(lse, ref_lse.float(), rtol=1e-4, atol=1e-4)


def test_repeated_one_call_decodes_read_the_values_and_skip_the_other_checks(monkeypatch):
    q, cache = _batch(seed=8)
    kv = indptr(KV_LENS)
    checks = _count(monkeypatch, validate, "check_decode_inputs")
    reads = _count(monkeypatch, validate, "_host_values")
    first = mixmla.mla_decode(q, cache, kv)
    again = [mixmla.mla_decode(q, cache, kv) for _ in range(2)]
    assert len(checks) == 1 and len(reads) == 3  # every call reads the values, once
    for out in again:
        assert torch.equal(out, first) and out.data_ptr() != first.data_ptr()
    _assert_decodes(first, q, cache, kv)



class _Repeat:
    """A backend's repeat that records ``with_outputs`` calls and launches nothing."""

    def __init__(self):
        self.calls = []

    def __call__(self):
        return True

    def with_outputs(self, out, lse):
        self.calls.append((out, lse))
        return True


class _Ready:
    """A one-call backend plan that records its runs and returns a fresh ``_Repeat`` each time."""

    indptr_dtypes = (torch.int32, )

    def __init__(self):
        self.runs = []

    def run(self, *args):
        self.runs.append(args)
        return _Repeat()


def test_a_repeated_one_call_decode_launches_again_with_its_own_outputs():
    """``_one_call`` given the last call's repeat: where every address the launches read besides
    the caller's tensors is the same (the container's views, the device indptrs) and the plan is
    the same, the repeat runs with this call's new outputs instead of a new launch; another
    cache address, indptr or plan launches anew."""
    q, cache = _batch(seed=13)
    kv = indptr(KV_LENS)
    host = kv.cpu().numpy().astype(np.int64)
    ready = _Ready()
    call = (q.device, q, cache, kv, None, host, None, None)
    out, first = api._one_call(ready, *call, True)
    assert len(ready.runs) == 1 and first is not None and first.ready is ready
    (o, lse), again = api._one_call(ready, *call, True, first)
    assert again is first and len(ready.runs) == 1
    assert first.launches.calls == [(o.data_ptr(), lse.data_ptr())] and o.data_ptr() != out[0].data_ptr()
    _, third = api._one_call(ready, *call[:-1], o, False, first)  # the caller's out, no lse
    assert first.launches.calls[-1] == (o.data_ptr(), None) and third is first
    moved = type(cache)(cache.data.clone())
    _, fourth = api._one_call(ready, q.device, q, moved, kv, None, host, None, None, True, first)
    assert len(ready.runs) == 2 and fourth is not first
    api._one_call(ready, q.device, q, cache, kv.clone(), None, host, None, None, True, first)
    other = _Ready()
    api._one_call(other, *call, True, first)
    assert len(ready.runs) == 3 and len(other.runs) == 1 and len(first.launches.calls) == 2


def test_repeated_one_call_decodes_see_new_values_at_the_same_addresses():
    """A repeated one-call decode (same tensors, same indptr values) reads what the tensors hold
    now: q and the cache rewritten in place between calls give each call's own result."""
    q, cache = _batch(seed=14)
    kv = indptr(KV_LENS)
    results = []
    for step in range(3):
        if step:
            q.copy_(torch.randn(q.shape, device=DEVICE).to(torch.bfloat16))
            cache.data.copy_(torch.randn(cache.data.shape, device=DEVICE).to(torch.bfloat16))
        out = mixmla.mla_decode(q, cache, kv)
        _assert_decodes(out, q, cache, kv)
        results.append(out)
    assert not torch.equal(results[0], results[1]) and not torch.equal(results[1], results[2])


@pytest.mark.parametrize("with_qo", [False, True])
def test_indptr_values_changed_in_place_are_checked_and_decoded(with_qo, monkeypatch):
    q, cache = _batch(seed=9)
    kv = indptr(KV_LENS, dtype=torch.int64)
    qo = indptr([1, 1, 1]) if with_qo else None
    reads = _count(monkeypatch, validate, "_host_values")
    mixmla.mla_decode(q, cache, kv, qo)
    kv.copy_(indptr([100, 3, 100], dtype=torch.int64))  # other valid lengths, the same tensor
    _assert_decodes(mixmla.mla_decode(q, cache, kv, qo), q, cache, kv, qo)
    assert len(reads) == 2  # a changed value is checked from the read that found it
    for bad, message in (([0, 70, 69, 203], "must be non-decreasing"), ([0, 70, 70, 204], "beyond the cache's 203")):
        kv.copy_(torch.tensor(bad))
        with pytest.raises(ValueError, match=message):
            mixmla.mla_decode(q, cache, kv, qo)
        with pytest.raises(ValueError, match=message):  # and again: nothing of a failed call is kept
            mixmla.mla_decode(q, cache, kv, qo)
    kv.copy_(indptr(KV_LENS, dtype=torch.int64))
    _assert_decodes(mixmla.mla_decode(q, cache, kv, qo), q, cache, kv, qo)
    if with_qo:
        qo.copy_(indptr([2, 1, 0]))  # two query tokens for the first request
        out, lse = mixmla.mla_decode(q, cache, kv, qo, return_lse=True)
        _assert_decodes(out, q, cache, kv, qo, lse)
        mixmla.mla_decode(q, cache, kv, qo, return_lse=True)
        qo.copy_(indptr([2, 1, 1]))
        with pytest.raises(ValueError, match="must end at total_q"):
            mixmla.mla_decode(q, cache, kv, qo, return_lse=True)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_an_fp8_scale_changed_in_place_is_read_and_checked(dtype):
    """The scale's value is read on every call, also where the container converts it (float64 to
    float32: a copy each call)."""
    q, fp8 = _batch("fp8", seed=10)
    kv = indptr(KV_LENS)
    scale = fp8.scale.to(dtype)
    cache = (fp8.data, scale)
    first = mixmla.mla_decode(q, cache, kv)
    assert torch.equal(mixmla.mla_decode(q, cache, kv), first)
    scale.mul_(2)
    got = mixmla.mla_decode(q, cache, kv)
    assert not torch.equal(got, first)
    _assert_decodes(got, q, cache, kv)
    _assert_decodes(mixmla.mla_decode(q, cache, kv), q, cache, kv)
    for bad in (0.0, float("nan"), float("inf"), -1.0):
        scale.fill_(bad)
        with pytest.raises(ValueError, match="fp8 scale must be finite and > 0"):
            mixmla.mla_decode(q, cache, kv)


def test_other_arguments_run_every_check(monkeypatch):
    q, cache = _batch(seed=11)
    kv = indptr(KV_LENS)
    checks = _count(monkeypatch, validate, "check_decode_inputs")
    first = mixmla.mla_decode(q, cache, kv)
    out = poisoned_out(q.shape[0], H)
    calls = [lambda: mixmla.mla_decode(q, cache, kv, out=out),
             lambda: mixmla.mla_decode(q, cache, kv, out=poisoned_out(q.shape[0], H)),
             lambda: mixmla.mla_decode(q, cache, kv, return_lse=True),
             lambda: mixmla.mla_decode(q.clone(), cache, kv),
             lambda: mixmla.mla_decode(q, cache, kv, indptr([1, 1, 1])),
             lambda: mixmla.mla_decode(q, cache, kv, sm_scale=0.05),
             lambda: mixmla.mla_decode(q, cache.data, kv),  # the same tensor, another form
             lambda: mixmla.mla_decode(q, cache, kv, backend="triton")]
    for i, call in enumerate(calls):
        result = call()
        assert len(checks) == i + 2, i
        got = result[0] if isinstance(result, tuple) else result
        if i != 5:
            assert torch.equal(got, first), i
    assert torch.equal(out, first)
    mixmla.mla_decode(q, cache, kv, backend="triton")  # the last call, again: no checks
    assert len(checks) == len(calls) + 1
    # An out that overlaps the cache is rejected, however like the last call the others are.
    with pytest.raises(ValueError, match="shares memory"):
        mixmla.mla_decode(q, cache, kv, out=cache.data.reshape(-1)[:q.shape[0] * H * 512].view(q.shape[0], H, 512),
                          backend="triton")


def test_a_repeated_one_call_decode_takes_the_workspace_of_the_current_stream(monkeypatch):
    q, _ = _batch(seed=12)
    cache = quantize(torch.randn(1000, 576, device=DEVICE), "bf16")
    kv = indptr([300, 0, 700])  # several chunks: a workspace
    first = mixmla.mla_decode(q, cache, kv)
    device = q.device
    entry = api._LAST_DECODE[2]
    assert not entry.template.schedule.direct
    checks = _count(monkeypatch, validate, "check_decode_inputs")
    stream = api.current_stream(device)
    monkeypatch.setattr(api, "current_stream", lambda d: ("another stream", stream))
    assert torch.equal(mixmla.mla_decode(q, cache, kv), first)
    assert len(checks) == 0
    assert entry.one_call[0] is api._ONE_CALL_WORKSPACE[device, ("another stream", stream)]


def test_repeated_plans_read_the_values_and_own_their_buffers(monkeypatch):
    q, cache = _batch(seed=13)
    kv = indptr(KV_LENS)
    checks = _count(monkeypatch, validate, "check_plan_inputs")
    reads = _count(monkeypatch, validate, "_host_values")
    a, b = mixmla.plan(kv, num_heads=H), mixmla.plan(kv, num_heads=H)
    assert len(checks) == 1 and len(reads) == 2
    assert a.schedule is b.schedule and a._plan is not b._plan and a.out.data_ptr() != b.out.data_ptr()
    assert (a.total_kv, a.total_q, a.batch, a.max_q_len, a.sm_scale, a.backend) == \
        (b.total_kv, b.total_q, b.batch, b.max_q_len, b.sm_scale, b.backend)
    assert b.kv_indptr is kv
    out_a = a.run(q, cache, out=poisoned_out(q.shape[0], H))
    assert torch.equal(b.run(q, cache, out=poisoned_out(q.shape[0], H)), out_a)
    _assert_decodes(out_a, q, cache, kv)
    kv.copy_(indptr([100, 3, 100]))
    c = mixmla.plan(kv, num_heads=H)
    assert len(checks) == 2 and len(reads) == 3 and c.total_kv == 203 and c.schedule is not a.schedule
    _assert_decodes(c.run(q, cache), q, cache, kv)
    kv.copy_(torch.tensor([0, 70, 69, 203]))
    with pytest.raises(ValueError, match="must be non-decreasing"):
        mixmla.plan(kv, num_heads=H)
    kv.copy_(torch.tensor([1, 70, 70, 203]))
    with pytest.raises(ValueError, match="must start at 0"):
        mixmla.plan(kv, num_heads=H)
    # Other arguments, or a qo_indptr changed in place, run every check.
    kv.copy_(indptr(KV_LENS))
    qo = indptr([1, 1, 1])
    mixmla.plan(kv, qo, num_heads=H)
    mixmla.plan(kv, qo, num_heads=H, sm_scale=0.05)
    mixmla.plan(kv, qo, num_heads=32)
    assert len(checks) == 7
    qo.copy_(indptr([2, 1, 0]))
    assert mixmla.plan(kv, qo, num_heads=32).max_q_len == 2
    qo.copy_(torch.tensor([0, 2, 1, 3]))
    with pytest.raises(ValueError, match="qo_indptr must be non-decreasing"):
        mixmla.plan(kv, qo, num_heads=32)


@pytest.mark.parametrize("fmt", ["bf16", "fp8", "mxfp4"])
def test_host_indptrs_decode_as_device_indptrs(fmt):
    """Indptrs on the host (on the GPU: CPU tensors beside a CUDA q) give the bits of the same
    indptrs on q's device, also after their values change in place between calls."""
    q, cache = _batch(fmt, seed=20)
    if fmt == "fp8":  # a scale given as a number, known on the host
        cache = mixmla.Fp8Cache(cache.data, float(cache.scale.item()))
    qo_lens = [1, 1, 1]
    want = mixmla.mla_decode(q, cache, indptr(KV_LENS), indptr(qo_lens))
    kv_host, qo_host = indptr(KV_LENS, device="cpu"), indptr(qo_lens, device="cpu")
    for _ in range(2):  # the second call is the remembered layout's
        assert torch.equal(mixmla.mla_decode(q, cache, kv_host, qo_host), want)
    kv_host.copy_(indptr([70, 60, 73], device="cpu"))
    got = mixmla.mla_decode(q, cache, kv_host, qo_host)
    _assert_decodes(got, q, cache, kv_host.to(q.device), indptr(qo_lens))
    assert torch.equal(got, mixmla.mla_decode(q, cache, indptr([70, 60, 73]), indptr(qo_lens)))
    p = mixmla.plan(kv_host, qo_host, num_heads=H, fmt=fmt, device=q.device)
    assert p.kv_indptr.device == q.device and torch.equal(p.run(q, cache), got)


def test_an_fp8_scale_given_as_a_number_is_checked_without_a_read(monkeypatch):
    """``Fp8Cache(data, number)``: the call's checks take the number instead of reading the scale
    tensor, and still reject a bad one."""
    q, fp8 = _batch("fp8", seed=21)
    read = []
    real = validate._host_values
    monkeypatch.setattr(validate, "_host_values", lambda tensors: read.extend(tensors) or real(tensors))
    cache = mixmla.Fp8Cache(fp8.data, 0.03125)
    assert cache.host_scale == 0.03125 and cache.scale.device == fp8.data.device
    _assert_decodes(mixmla.mla_decode(q, cache, indptr(KV_LENS, device="cpu")), q, cache, indptr(KV_LENS))
    assert read and not any(t is cache.scale for t in read)
    for bad in (0.0, float("nan"), -1.0):
        with pytest.raises(ValueError, match="fp8 scale must be finite and > 0"):
            mixmla.mla_decode(q, mixmla.Fp8Cache(fp8.data, bad), indptr(KV_LENS, device="cpu"))


@pytest.mark.gpu
@pytest.mark.parametrize("fmt", ["bf16", "fp8"])
def test_host_indptrs_do_not_wait_for_queued_kernels(fmt):
    """With host indptrs (and an fp8 scale given as a number) ``mla_decode`` returns while a kernel
    queued before it still runs; with device indptrs its read waits for that kernel. Repeated
    calls with the same host values share one device copy of them."""
    q, cache = _batch(fmt, seed=22)
    if fmt == "fp8":
        cache = mixmla.Fp8Cache(cache.data, float(cache.scale.item()))
    kv_host = indptr(KV_LENS, device="cpu")
    want = mixmla.mla_decode(q, cache, indptr(KV_LENS))
    mixmla.mla_decode(q, cache, kv_host)  # compiled and planned: what follows is the host path
    torch.cuda.synchronize()
    copies = len(api._HOST_COPIES)

    def queued_then(call):
        torch.cuda._sleep(200_000_000)  # about 0.1 s of one SM's clock
        queued = torch.cuda.Event()
        queued.record()
        out = call()
        busy = not queued.query()
        torch.cuda.synchronize()
        return busy, out

    busy, got = queued_then(lambda: mixmla.mla_decode(q, cache, kv_host))
    assert busy and torch.equal(got, want)
    assert len(api._HOST_COPIES) == copies
    kv_device = indptr(KV_LENS)
    busy, got = queued_then(lambda: mixmla.mla_decode(q, cache, kv_device))
    assert not busy and torch.equal(got, want)
