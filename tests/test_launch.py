"""Launching the Triton kernels through their compiled handles (``kernels.triton.launch``): the
dispatcher runs once per call key, and the call key separates every pair of calls that Triton
would specialize differently."""

from __future__ import annotations

import inspect
import itertools

import numpy as np
import pytest
import torch
import triton
import triton.language as tl
from triton.backends.compiler import GPUTarget
from triton.compiler import CompiledKernel, make_backend
from triton.runtime.jit import native_specialize_impl

from mixmla import api
from mixmla.check import check_strict
from mixmla.formats import as_cache, quantize, quantize_fp8
from mixmla.kernels.triton import launch
from mixmla.reference import mla_decode_reference

from conftest import DEVICE, indptr, poisoned_out

_CUDA = make_backend(GPUTarget("cuda", 90, 32))


def _specialization(launches):
    """Per launch, what Triton's dispatcher would specialize on: each tensor's type and alignment,
    and the value of every other argument (stricter than Triton, which keeps only some ints)."""
    return [tuple(native_specialize_impl(_CUDA, a, False, True, True) if isinstance(a, torch.Tensor) else a
                  for a in one.args) for one in launches]


def _calls(fmt):
    """Calls of one plan that differ in what a caller can change: fresh tensors of the same layout,
    a misaligned or strided q, int64 indptrs, lse or not, the other fp8 encoding, strided cache rows."""
    kv_lens, heads = [70, 0, 133], 16
    gen = torch.Generator(device=DEVICE).manual_seed(5)
    kv = torch.randn(sum(kv_lens), 576, generator=gen, device=DEVICE)
    total_q = len(kv_lens)

    def q_plain():
        return torch.randn(total_q, heads, 576, generator=gen, device=DEVICE).to(torch.bfloat16)

    def q_misaligned():
        flat = torch.empty(total_q * heads * 576 + 1, dtype=torch.bfloat16, device=DEVICE)
        return flat[1:].view(total_q, heads, 576)

    def q_strided():
        return torch.randn(total_q, heads, 600, generator=gen, device=DEVICE).to(torch.bfloat16)[..., :576]

    caches = [quantize(kv, fmt), quantize(kv, fmt)]
    if fmt == "fp8":
        caches.append(quantize_fp8(kv, torch.float8_e4m3fnuz))
    if fmt == "bf16":
        caches.append(as_cache(torch.randn(sum(kv_lens), 2, 576, device=DEVICE).to(torch.bfloat16)[:, 1, :]))
    calls = []
    for make_q, cache, dtype, with_lse in itertools.product((q_plain, q_plain, q_misaligned, q_strided), caches,
                                                            (torch.int32, torch.int64), (False, True)):
        lse = torch.empty(total_q, heads, dtype=torch.float32, device=DEVICE) if with_lse else None
        calls.append((make_q(), cache, indptr(kv_lens, dtype), indptr([1] * total_q, dtype),
                      poisoned_out(total_q, heads), lse))
    return kv_lens, heads, calls


@pytest.mark.parametrize("fmt", ["bf16", "fp8", "mxfp4"])
def test_equal_call_keys_mean_equal_specializations(fmt):
    kv_lens, heads, calls = _calls(fmt)
    p = api.plan(indptr(kv_lens), num_heads=heads, fmt=fmt)
    assert not p.schedule.direct  # decode and combine
    keyed = [(launch.call_key(p._plan.constants, *c), _specialization(launch.launches(p._plan.constants, *c)))
             for c in calls]
    keys = {}
    for key, spec in keyed:
        keys.setdefault(key, []).append(spec)
    assert len(keys) < len(keyed), "some calls differ only in their data and must share a key"
    assert len(keys) > 1, "the calls must include ones Triton specializes differently"
    for key, specs in keys.items():
        assert all(s == specs[0] for s in specs), f"calls with key {key} specialize differently"


def _triton_specialization(launches):
    """Per launch, what Triton's dispatcher specializes on: tensors' type and alignment, integers'
    type and divisibility (1 becomes a constant), floats' type, and constexprs' values."""
    specs = []
    for one in launches:
        params = list(inspect.signature(one.kernel.fn).parameters.values())
        spec = []
        for p, a in zip(params, one.args):
            if p.annotation is tl.constexpr:
                spec.append(("constexpr", a))
            elif isinstance(a, (torch.Tensor, int, float)):
                spec.append(native_specialize_impl(_CUDA, a, False, True, True))
            else:
                spec.append(a)
        specs.append((tuple(spec), tuple(sorted(one.options.items()))))
    return specs


@pytest.mark.parametrize("fmt", ["bf16", "mxfp4"])
def test_equal_plan_and_call_keys_mean_equal_specializations_across_plans(fmt):
    """The compiled kernels are shared by every plan: two (plan, call) pairs with equal keys must
    be specialized alike by Triton, and plans of similar layouts must share keys (or nothing is
    shared)."""
    kv_lens, heads, calls = _calls(fmt)
    rng = np.random.default_rng(3)
    layouts = [(kv_lens, None, heads), ([71, 0, 130], None, heads), (kv_lens, None, 32), (kv_lens, [1, 2, 1], heads)]
    layouts += [(list(rng.integers(0, int(rng.choice([64, 600, 6000])), 3)), None, heads) for _ in range(60)]
    plans = []
    for kv, q_lens, h in layouts:
        plans.append(api.plan(indptr(kv), None if q_lens is None else indptr(q_lens), num_heads=h, fmt=fmt))
    assert len({launch.plan_key(p._plan.constants) for p in plans}) < len(plans)
    assert any(p.schedule.direct for p in plans) and not all(p.schedule.direct for p in plans)
    seen = {}
    for p in plans:
        for c in calls[::3]:
            q, cache, kv_indptr, qo_indptr, out, lse = c
            if q.shape[1] != p.num_heads or (p.total_q != q.shape[0]):
                continue
            key = (launch.plan_key(p._plan.constants), launch.call_key(p._plan.constants, *c))
            spec = _triton_specialization(launch.launches(p._plan.constants, *c))
            assert seen.setdefault(key, spec) == spec, f"plan {p} and call key {key[1]} specialize differently"
    assert len(seen) > 1


def test_paged_call_keys_hold_the_gathered_loop():
    """A paged call's LOOP_STAGES and WINDOW depend on the plan's grid (``paging.loop_stages``,
    ``paging.windowed_gather``), which ``plan_key`` does not hold: two direct plans of equal plan
    keys, one of fewer programs than SMs (132 on CPU) and one of more, launch different kernels and
    must have different call keys; calls of one plan keep theirs."""
    from mixmla.paged import plan_paged, scatter_to_pages

    seen = {}
    for batch_size in (100, 100, 140):
        kv_lens = [20] * batch_size
        gen = torch.Generator().manual_seed(batch_size)
        cache = quantize(torch.randn(sum(kv_lens), 576, generator=gen).to(DEVICE), "bf16")
        paged = scatter_to_pages(cache, indptr(kv_lens), 1, generator=gen)
        p = plan_paged(paged.block_table, paged.seq_lens, 1, num_heads=16)
        assert p.schedule.direct and p.schedule.num_work == batch_size
        q = torch.randn(batch_size, 16, 576, generator=gen).to(DEVICE, torch.bfloat16)
        call = (q, paged.cache.rows, None, indptr([1] * batch_size), poisoned_out(batch_size, 16), None, p.pages)
        key = (launch.plan_key(p._plan.constants), launch.call_key(p._plan.constants, *call))
        decode = launch.launches(p._plan.constants, *call)[0]
        values = dict(zip(decode.kernel.arg_names, decode.args))
        seen.setdefault(batch_size, []).append((key, _triton_specialization([decode]),
                                                values["LOOP_STAGES"], values["WINDOW"]))
    (small, again), (large,) = seen[100], seen[140]
    assert small[0] == again[0] and small[1] == again[1]
    assert small[0][0] == large[0][0], "the plans must share a plan key for the call key to matter"
    assert (small[2], small[3]) == (5, True) and (large[2], large[3]) == (None, False)
    assert small[1] != large[1] and small[0][1] != large[0][1]


class _FakeDispatcher:
    """Stands in for a @jit kernel: ``kernel[grid](*args, **options)`` records the call and
    returns a compiled kernel whose launcher records its launches."""

    def __init__(self):
        self.dispatched, self.launched = [], []

    def __getitem__(self, grid):
        def dispatch(*args, **options):
            self.dispatched.append(args)
            compiled = CompiledKernel.__new__(CompiledKernel)
            compiled._run = lambda *a: self.launched.append(a)
            compiled.module, compiled.function, compiled.packed_metadata = object(), "function", "metadata"
            return compiled

        return dispatch


def test_compiled_launches_dispatch_once_per_key_and_device():
    kernels = [_FakeDispatcher(), _FakeDispatcher()]
    launches = [launch.Launch(k, (3, 2), ("a", 1), {"num_warps": 4}) for k in kernels]
    device = [0]
    compiled = launch.CompiledLaunches(current_device=lambda: device[0], current_stream=lambda d: 100 + d)
    first = compiled.launch(launches, "key")
    assert [len(k.dispatched) for k in kernels] == [1, 1] and [len(k.launched) for k in kernels] == [0, 0]
    # The first call's repeat already goes through the compiled launchers.
    assert first() is True
    assert [len(k.dispatched) for k in kernels] == [1, 1] and [len(k.launched) for k in kernels] == [1, 1]
    compiled.launch(launches, "key")
    compiled.launch(launches, "key")
    assert [len(k.dispatched) for k in kernels] == [1, 1]
    assert [len(k.launched) for k in kernels] == [3, 3]
    grid_x, grid_y, grid_z, stream, function, metadata, _, enter, leave, *args = kernels[0].launched[0]
    assert (grid_x, grid_y, grid_z, stream, function, metadata, enter, leave, args) == \
        (3, 2, 1, 100, "function", "metadata", None, None, ["a", 1])
    compiled.launch(launches, "other key")
    device[0] = 1
    compiled.launch(launches, "key")
    assert [len(k.dispatched) for k in kernels] == [3, 3]



def test_a_repeat_launches_again_with_the_same_or_other_outputs():
    """``CompiledLaunches.launch``'s ``Repeat``: ``repeat()`` launches the kernels with the same
    arguments on the current stream; ``with_outputs(out, lse)`` with the arguments at each launch's
    ``outputs`` positions replaced (the lse position by the output when lse is None), the rest as
    bound; neither runs when the current device is another."""
    kernels = [_FakeDispatcher(), _FakeDispatcher()]
    x = torch.empty(3)
    launches = [launch.Launch(kernels[0], (2,), (x, 10, 20, 7, 30), {}, (1, 4)),
                launch.Launch(kernels[1], (1,), (40, 7, 50), {}, (0, 2))]
    device, stream = [0], [5]
    compiled = launch.CompiledLaunches(current_device=lambda: device[0], current_stream=lambda d: stream[0])
    first = compiled.launch(launches, "key")  # compiled by the dispatcher, which launched them
    assert [len(k.dispatched) for k in kernels] == [1, 1] and not any(k.launched for k in kernels)
    assert first()
    repeat = compiled.launch(launches, "key")
    assert [len(k.dispatched) for k in kernels] == [1, 1] and [len(k.launched) for k in kernels] == [2, 2]
    args = [list(k.launched[-1][9:]) for k in kernels]  # after grid, stream, function, metadata, placeholders
    assert args == [[x.data_ptr(), 10, 20, 7, 30], [40, 7, 50]]
    stream[0] = 6
    assert repeat() and [k.launched[-1][3] for k in kernels] == [6, 6]
    assert [list(k.launched[-1][9:]) for k in kernels] == args
    assert repeat.with_outputs(111, 222)
    assert [list(k.launched[-1][9:]) for k in kernels] == [[x.data_ptr(), 111, 20, 7, 222], [111, 7, 222]]
    assert repeat.with_outputs(333, None)
    assert [list(k.launched[-1][9:]) for k in kernels] == [[x.data_ptr(), 333, 20, 7, 333], [333, 7, 333]]
    count = [len(k.launched) for k in kernels]
    device[0] = 1
    assert not repeat() and not repeat.with_outputs(1, 2)
    assert [len(k.launched) for k in kernels] == count


def test_a_bound_launch_holds_addresses_for_tensors_and_every_other_argument_as_given():
    """``bound_launch`` turns every tensor (a subclass too) into its address and passes the rest
    (plain scalars, and values of other types) as they are, after the launcher's own arguments."""
    compiled = CompiledKernel.__new__(CompiledKernel)
    compiled._run = lambda *a: None
    compiled.function, compiled.packed_metadata = "function", "metadata"
    x, w = torch.empty(4), torch.nn.Parameter(torch.empty(2))
    args = (x, 1, 0.5, True, None, np.int64(3), "s", w)
    fn, gx, gy, gz, rest = launch.bound_launch(compiled, (3, 2), args)
    assert fn is compiled._run and (gx, gy, gz) == (3, 2, 1)
    assert rest == ("function", "metadata", None, None, None, x.data_ptr(), 1, 0.5, True, None, np.int64(3), "s",
                    w.data_ptr())
    assert not any(isinstance(a, torch.Tensor) for a in rest)


def test_a_launch_hook_sends_every_launch_through_the_dispatcher():
    kernel = _FakeDispatcher()
    launches = [launch.Launch(kernel, (1,), (), {})]
    compiled = launch.CompiledLaunches(current_device=lambda: 0, current_stream=lambda d: 0)
    hook = lambda metadata: None  # noqa: E731
    triton.knobs.runtime.launch_enter_hook.add(hook)
    try:
        for _ in range(3):
            compiled.launch(launches, "key")
    finally:
        triton.knobs.runtime.launch_enter_hook.remove(hook)
    assert len(kernel.dispatched) == 3 and not kernel.launched
    compiled.launch(launches, "key")
    assert len(kernel.dispatched) == 4 and not kernel.launched  # the hooked launches were not kept
    compiled.launch(launches, "key")
    assert len(kernel.launched) == 1


@pytest.mark.gpu
@pytest.mark.parametrize("fmt", ["bf16", "fp8", "mxfp4"])
def test_compiled_launches_give_the_dispatchers_bits(fmt):
    """On the GPU: every call of the _calls matrix through one plan (dispatcher for the first call
    of each key, compiled launchers afterwards) passes the strict check, and a repeated call gives
    the same bits as the first."""
    kv_lens, heads, calls = _calls(fmt)
    p = api.plan(indptr(kv_lens), num_heads=heads, fmt=fmt)
    first = {}
    for q, cache, kv_indptr, qo_indptr, out, lse in calls:
        q.copy_(torch.randn(q.shape, device=DEVICE).to(torch.bfloat16))
        got = p.run(q, cache, out=out, return_lse=lse is not None, kv_indptr=kv_indptr, qo_indptr=qo_indptr)
        got = got[0] if isinstance(got, tuple) else got
        ref, _ = mla_decode_reference(q, cache, kv_indptr, qo_indptr)
        assert check_strict(got, ref).passed, check_strict(got, ref)
        key = launch.call_key(p._plan.constants, q, as_cache(cache), kv_indptr, qo_indptr, out, lse)
        again = p.run(q, cache, out=poisoned_out(q.shape[0], heads), kv_indptr=kv_indptr, qo_indptr=qo_indptr)
        assert torch.equal(again.view(torch.int16), got.view(torch.int16))
        first.setdefault(key, got)
    assert len(first) > 1
