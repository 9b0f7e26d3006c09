"""custom_kernel's CUDA-graph replay: a replay must compute on the tensors' current contents,
never hand out a buffer a later call overwrites, and never apply to other addresses or layouts."""

import pytest
import torch

import mixmla
from mixmla.api import _GRAPHS
from mixmla.check import check_strict
from mixmla.graphs import GraphCache, tensor_signature
from mixmla.inputs import generate_input
from mixmla.reference import mla_decode_reference


def test_signature_tells_layouts_apart():
    x = torch.zeros(4, 6)
    assert tensor_signature(x) == tensor_signature(x)
    assert tensor_signature(x) != tensor_signature(x.t())
    assert tensor_signature(x) != tensor_signature(x[1:])
    assert tensor_signature(x) != tensor_signature(x.view(torch.int32))


def test_cpu_calls_run_eagerly_every_time():
    cache = GraphCache()
    calls = []

    def launch(out):
        calls.append(1)
        out.fill_(len(calls))

    outs = [cache.run(("k",), launch, (2,), torch.float32, torch.device("cpu")) for _ in range(3)]
    assert len(calls) == 3 and len(cache) == 0
    assert [o[0].item() for o in outs] == [1.0, 2.0, 3.0]


@pytest.mark.gpu
@pytest.mark.parametrize("fmt", ["bf16", "fp8", "mxfp4"])
def test_replay_follows_new_contents_and_returns_fresh_tensors(fmt):
    _GRAPHS.clear()
    data = generate_input(4, 1, 700, seed=3, device="cuda")
    outs = []
    for step in range(4):
        # New contents at the same addresses: the third and fourth calls are graph replays.
        fresh = generate_input(4, 1, 700, seed=100 + step, device="cuda")
        data[0].copy_(fresh[0])
        for dst, src in zip(data[1][fmt] if fmt != "bf16" else (data[1][fmt],),
                            fresh[1][fmt] if fmt != "bf16" else (fresh[1][fmt],)):
            dst.copy_(src)
        out = mixmla.custom_kernel(data, fmt)
        ref, _ = mla_decode_reference(data[0], data[1][fmt], data[3], data[2])
        result = check_strict(out, ref)
        assert result.passed, f"step {step}: {result.message}"
        outs.append((out, ref))
    assert len(_GRAPHS) == 1
    for out, ref in outs:  # earlier results were not overwritten by later replays
        assert check_strict(out, ref).passed
