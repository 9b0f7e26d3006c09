"""``torch.ops.mixmla.*`` (``mixmla.ops``): the operators pass ``torch.library.opcheck`` (schema,
fake implementation, AOT dispatch with dynamic shapes), give the Python entry points' results, and
a function calling them compiles with ``torch.compile(fullgraph=True)`` and matches eager."""

from __future__ import annotations

import pytest
import torch

import mixmla
from mixmla.formats import quantize
from mixmla.paged import scatter_to_pages

from conftest import DEVICE, FORMATS, indptr


def cache_tensors(cache):
    """(kv, kv_scale) of a container: what the operators take."""
    if cache.format == "bf16":
        return cache.data, None
    if cache.format == "fp8":
        return cache.data, cache.scale
    return cache.data, cache.scales


def paged_problem(fmt, page_size=16, kv_lens=(40, 0, 17), q_lens=(1, 1, 2), seed=0):
    gen = torch.Generator().manual_seed(seed)
    cache = quantize(torch.randn(sum(kv_lens), 576, generator=gen).to(DEVICE), fmt)
    paged = scatter_to_pages(cache, indptr(kv_lens), page_size, generator=gen, spare_pages=2)
    q = torch.randn(sum(q_lens), 16, 576, generator=gen).to(DEVICE, torch.bfloat16)
    pool_kv, pool_scale = cache_tensors(paged.cache.rows)
    pages = paged.cache.num_pages
    pool_kv = pool_kv.view(pages, page_size, pool_kv.shape[-1])
    return q, cache, paged, pool_kv, pool_scale, indptr(q_lens)


def opcheck_utils(fmt):
    """opcheck's tests for a cache format. torch's schema check compares every tensor an inner
    operation touches by arithmetic, which float8 tensors do not have (``"mul_cpu_reduced_float"
    not implemented for 'Float8_e4m3fn'``), so fp8 caches skip that one test; the fake
    implementation and the AOT dispatch are tested for every format."""
    utils = ("test_schema", "test_autograd_registration", "test_faketensor", "test_aot_dispatch_dynamic")
    return utils[1:] if fmt == "fp8" else utils


@pytest.mark.parametrize("fmt", FORMATS)
def test_opcheck_decode_ops(fmt):
    q, cache, paged, pool_kv, pool_scale, qo = paged_problem(fmt)
    kv, scale = cache_tensors(cache)
    utils = opcheck_utils(fmt)
    torch.library.opcheck(torch.ops.mixmla.mla_decode.default, (q, kv, scale, indptr([40, 0, 17]), qo, None),
                          test_utils=utils)
    torch.library.opcheck(torch.ops.mixmla.mla_decode_paged.default,
                          (q, pool_kv, pool_scale, paged.block_table, paged.seq_lens, qo, 0.05), test_utils=utils)
    torch.library.opcheck(torch.ops.mixmla.mla_decode_paged_csr.default,
                          (q, pool_kv, pool_scale, paged.kv_indptr, paged.kv_indices, paged.seq_lens, qo, None),
                          test_utils=utils)


@pytest.mark.parametrize("fmt", FORMATS)
def test_opcheck_append_kv(fmt):
    _, _, paged, pool_kv, pool_scale, _ = paged_problem(fmt)
    new = torch.randn(3, 576).to(DEVICE, torch.bfloat16)
    slots = torch.tensor([5, -1, 20], device=DEVICE)
    torch.library.opcheck(torch.ops.mixmla.append_kv.default, (pool_kv, pool_scale, new, slots),
                          test_utils=opcheck_utils(fmt))


def test_ops_give_the_entry_points_results():
    q, cache, paged, pool_kv, pool_scale, qo = paged_problem("mxfp4", page_size=1)
    out, lse = torch.ops.mixmla.mla_decode_paged(q, pool_kv, pool_scale, paged.block_table, paged.seq_lens, qo, None)
    ref_out, ref_lse = mixmla.mla_decode_paged(q, paged.cache, paged.block_table, paged.seq_lens, qo_indptr=qo,
                                               return_lse=True)
    assert torch.equal(out, ref_out) and torch.equal(lse, ref_lse)
    kv, scale = cache_tensors(cache)
    out2, _ = torch.ops.mixmla.mla_decode(q, kv, scale, indptr([40, 0, 17]), qo, None)
    assert torch.equal(out2, ref_out), "contiguous and paged operators over the same tokens agree"
    with pytest.raises(ValueError, match="kv_scale"):
        torch.ops.mixmla.mla_decode_paged(q, pool_kv, None, paged.block_table, paged.seq_lens, qo, None)


@pytest.mark.parametrize("fmt", ["fp8", "mxfp4"])
def test_compile_fullgraph_matches_eager(fmt):
    """One decode step as a model writes it: append the new tokens, attend, project. Compiled with
    fullgraph=True, the operators stay opaque (no graph break at the kernels, no interpreter or
    host read traced) and the result and the written cache equal eager's."""
    q, _, paged, pool_kv, pool_scale, qo = paged_problem(fmt, page_size=16, kv_lens=(40, 0, 17), q_lens=(1, 1, 1))
    new = torch.randn(3, 576).to(DEVICE, torch.bfloat16)
    # One new token per request, in the slot after its last: request 1 starts its first page.
    slots = torch.tensor([int(paged.block_table[0, 2]) * 16 + 8, -1, int(paged.block_table[2, 1]) * 16 + 1],
                         device=DEVICE)
    seq_lens = paged.seq_lens.clone()
    seq_lens[0] += 1
    seq_lens[2] += 1
    weight = torch.randn(512, 64).to(DEVICE)

    def step(q, kv, kv_scale, new, slots, block_table, seq_lens):
        torch.ops.mixmla.append_kv(kv, kv_scale, new, slots)
        out, lse = torch.ops.mixmla.mla_decode_paged(q, kv, kv_scale, block_table, seq_lens, None, None)
        return out.float() @ weight, lse

    def fresh():
        return pool_kv.clone(), pool_scale.clone()

    kv_e, scale_e = fresh()
    eager = step(q, kv_e, scale_e, new, slots, paged.block_table, seq_lens)
    kv_c, scale_c = fresh()
    torch._dynamo.reset()
    compiled = torch.compile(step, fullgraph=True)(q, kv_c, scale_c, new, slots, paged.block_table, seq_lens)
    def bits(t):  # the pool's unowned rows hold NaN: compare bits
        return t.view(torch.uint8)

    assert torch.equal(bits(kv_c), bits(kv_e)) and torch.equal(scale_c, scale_e), "the compiled step writes the same cache"
    assert torch.equal(compiled[1], eager[1])
    torch.testing.assert_close(compiled[0], eager[0], rtol=1e-5, atol=1e-5)
    assert not torch.equal(bits(kv_c), bits(pool_kv)), "the new tokens were written"
