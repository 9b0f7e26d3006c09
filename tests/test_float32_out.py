"""A float32 ``out``: the decode's normalized output before its rounding to bf16, which callers that
merge partial results (``mixmla.distributed``) need unrounded.

The float32 output rounded the way the kernels round is their bf16 output, bit for bit: on a GPU
to nearest even (``cvt.rn``, as the compiled code shows), in Triton 3.6's interpreter by
truncation (its float32 -> bf16 cast drops the low bits). Only the Triton backend writes float32;
a plan of another backend refuses it before launching, and ``mla_decode``'s 'auto' takes Triton.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from mixmla import api, interpreter
from mixmla.check import check_strict
from mixmla.kernels.backend import Backend, BackendPlan
from mixmla.reference import mla_decode_reference

from conftest import DEVICE, FORMATS, poisoned_out, stand_in_gluon_backend
from dcp_workers import case_inputs


def _kernel_rounding(x: torch.Tensor) -> torch.Tensor:
    """float32 -> bf16 as the kernels round here (module doc)."""
    if interpreter.active():
        return (x.view(torch.int32) >> 16).to(torch.int16).view(torch.bfloat16)
    return x.to(torch.bfloat16)


def _inputs(fmt, kv_lens=(0, 1, 70, 200), heads=16, seed=4):
    q, cache, kv_indptr = case_inputs(dict(kv_lens=list(kv_lens), fmt=fmt, heads=heads, seed=seed, form="container"))
    cache = type(cache)(*(t.to(DEVICE) for t in vars(cache).values()))  # the container's fields, in order
    return q.to(DEVICE), cache, kv_indptr.to(DEVICE)


@pytest.mark.parametrize("fmt", FORMATS)
def test_float32_out_is_the_bf16_out_before_its_rounding(fmt):
    """Requests of 1 and 70 tokens (one chunk: the decode kernel writes out) and 200 (chunks: the
    combine kernel writes it), and an empty one; mla_decode and DecodePlan.run."""
    q, cache, kv_indptr = _inputs(fmt)
    out16, lse16 = api.mla_decode(q, cache, kv_indptr, out=poisoned_out(4, 16), return_lse=True)
    out32 = torch.full((4, 16, 512), float("nan"), device=DEVICE)
    got, lse32 = api.mla_decode(q, cache, kv_indptr, out=out32, return_lse=True)
    assert got is out32 and not torch.isnan(out32).any()
    assert torch.equal(_kernel_rounding(out32).view(torch.int16), out16.view(torch.int16))
    assert torch.equal(lse32.view(torch.int32), lse16.view(torch.int32))
    # Unrounded: most values of the averages over 70 and 200 tokens are not bf16 numbers.
    assert float((out32[2:] != out32[2:].to(torch.bfloat16).float()).float().mean()) > 0.9
    ref, _ = mla_decode_reference(q, cache, kv_indptr)
    assert check_strict(out32, ref).passed and bool((out32[0] == 0).all())
    p = api.plan(kv_indptr, num_heads=16, fmt=fmt)
    again = p.run(q, cache, out=torch.full_like(out32, float("nan")))
    assert torch.equal(again, out32)
    assert p.schedule.num_work > len(kv_indptr) - 1  # the 200-token request went through the combine


class _Bf16OnlyPlan(BackendPlan):
    config = schedule = None

    def __init__(self):
        self.calls = 0

    def run(self, q, cache, kv_indptr, qo_indptr, out, lse):
        self.calls += 1
        out.fill_(1.0)


class _Bf16OnlyBackend(Backend):
    """Stands in for the Gluon backend: writes bf16 only, and 'auto' would prefer it."""

    name = "gluon"

    def __init__(self):
        self.plans = []

    def unsupported(self, layout):
        return None

    def plan(self, layout, config=None):
        self.plans.append(_Bf16OnlyPlan())
        return self.plans[-1]

    def preferred(self, layout):
        return True


@pytest.fixture
def bf16_only_backend(monkeypatch):
    backend = _Bf16OnlyBackend()
    stand_in_gluon_backend(monkeypatch, backend)
    return backend


def test_a_backend_that_writes_bf16_refuses_a_float32_out(bf16_only_backend):
    q, cache, kv_indptr = _inputs("bf16", kv_lens=(5, 9, 3))
    p = api.plan(kv_indptr, num_heads=16, fmt="bf16")
    assert p.backend == "gluon"
    with pytest.raises(ValueError, match=r"out: the gluon backend writes torch.bfloat16, got torch.float32; "
                                         r"plan with backend='triton'"):
        p.run(q, cache, out=torch.empty(3, 16, 512, device=DEVICE))
    with pytest.raises(ValueError, match=r"out: the gluon backend writes torch.bfloat16"):
        api.mla_decode(q, cache, kv_indptr, out=torch.empty(3, 16, 512, device=DEVICE), backend="gluon")
    assert all(bp.calls == 0 for bp in bf16_only_backend.plans)  # refused before launching
    # 'auto' would take the stand-in; for a float32 out it takes the backend that writes one.
    out = api.mla_decode(q, cache, kv_indptr, out=torch.empty(3, 16, 512, device=DEVICE))
    assert len(bf16_only_backend.plans) == 2 and not bool((out == 1).all())  # no plan of the stand-in
    ref, _ = mla_decode_reference(q, cache, kv_indptr)
    assert check_strict(out, ref).passed


_COMPILE = """
import json, re, sys, torch
from mixmla.kernels.triton import compile as tc
rows = []
for split in (False, True):
    plan, launches = tc.plan_launches(tc.example_layout("mxfp4", 16, 1, split=split), write_lse=True)
    for one in launches:
        for dtype in (torch.bfloat16, torch.float32):
            args = [torch.empty(a.shape, dtype=dtype) if isinstance(a, torch.Tensor) and a.dtype == torch.bfloat16
                    and a.dim() == 3 and a.shape[-1] == 512 else a for a in one.args]
            k = tc.compile_launch(one._replace(args=tuple(args)))
            ptx = k.asm["ptx"]
            rows.append(dict(kernel=one.kernel.fn.__name__, split=split, out=str(dtype),
                             bf16_cvt=sorted(set(re.findall(r"cvt\\.[a-z.]*bf16[a-z0-9.]*\\.f32", ptx)))))
print(json.dumps(rows))
"""


def test_float32_out_compiles_for_hopper_and_bf16_rounds_to_nearest_even():
    """For sm_90 (Triton's ptxas, no GPU needed): the kernel that writes out (the decode kernel of a
    one-chunk schedule, the combine otherwise) compiles for a float32 out, and then converts
    nothing to bf16 but the value-product operand in the decode; for a bf16 out it rounds with
    ``cvt.rn`` (to nearest even), as ``torch``'s ``.to(torch.bfloat16)`` does."""
    root = os.path.join(os.path.dirname(__file__), "..")
    env = dict(os.environ, TRITON_INTERPRET="0",
               PYTHONPATH=os.pathsep.join([os.path.join(root, "src"), os.environ.get("PYTHONPATH", "")]))
    run = subprocess.run([sys.executable, "-c", _COMPILE], capture_output=True, text=True, env=env, timeout=600)
    if run.returncode != 0:
        pytest.skip(f"cannot compile for sm_90 here: {run.stderr[-300:]}")
    rows = {(r["kernel"], r["split"], r["out"]): r["bf16_cvt"] for r in json.loads(run.stdout)}
    assert rows[("mla_combine_kernel", True, "torch.bfloat16")] == ["cvt.rn.bf16x2.f32"]
    assert rows[("mla_combine_kernel", True, "torch.float32")] == []
    # The decode kernel rounds its probabilities to bf16 for the value product in every case.
    for split in (False, True):
        for out in ("torch.bfloat16", "torch.float32"):
            assert all(c.startswith("cvt.rn.") for c in rows[("mla_decode_kernel", split, out)])
