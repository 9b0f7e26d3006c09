"""GPU tests of issue 14 (marked ``gpu``, skipped without CUDA): paged decode at serving sizes
against the reference, under CUDA graphs with tables and cache rewritten between replays,
``append_kv``'s bits from the compiled kernels, the operators under ``torch.compile`` on the GPU,
and the compat wrappers against FlashInfer itself (skipped where it is not installed)."""

from __future__ import annotations

import importlib.util
import math

import pytest
import torch

import mixmla
from mixmla.check import check_strict
from mixmla.formats import quantize, quantize_mxfp4
from mixmla.formats.fp8 import encode_fp8
from mixmla.paged import scatter_to_pages
from mixmla.reference import mla_decode_paged_reference

from conftest import FORMATS, indptr, poisoned_out

pytestmark = pytest.mark.gpu
CUDA = torch.device("cuda")


def problem(fmt, kv_lens, q_lens, page_size, heads=16, seed=0, spare_pages=8):
    gen = torch.Generator().manual_seed(seed)
    cache = quantize(torch.randn(sum(kv_lens), 576, generator=gen).to(CUDA), fmt)
    paged = scatter_to_pages(cache, indptr(kv_lens, device=CUDA), page_size, generator=gen, spare_pages=spare_pages)
    q = torch.randn(sum(q_lens), heads, 576, generator=gen).to(CUDA, torch.bfloat16)
    qo = indptr(q_lens, device=CUDA)
    return q, cache, paged, qo


def ragged(batch, mean, seed):
    gen = torch.Generator().manual_seed(seed)
    lens = torch.randint(0, 2 * mean, (batch,), generator=gen).tolist()
    lens[0] = 0
    return lens


@pytest.mark.parametrize("heads", [16, 128])
@pytest.mark.parametrize("page_size", [1, 16, 32, 64, 128])
@pytest.mark.parametrize("fmt", FORMATS)
def test_paged_decode_on_gpu(fmt, page_size, heads):
    kv_lens = ragged(48, 1500, seed=page_size)
    q_lens = [1 + (i % 3 == 0) for i in range(48)]
    q, _, paged, qo = problem(fmt, kv_lens, q_lens, page_size, heads)
    out = poisoned_out(q.shape[0], heads, device=CUDA)
    _, lse = mixmla.mla_decode_paged(q, paged.cache, paged.block_table, paged.seq_lens, qo_indptr=qo, out=out,
                                     return_lse=True)
    ref, ref_lse = mla_decode_paged_reference(q, paged.cache, paged.block_pages, qo)
    result = check_strict(out, ref)
    assert result, result.message
    assert torch.equal(torch.isneginf(lse), torch.isneginf(ref_lse))
    out_csr = mixmla.mla_decode_paged_csr(q, paged.cache, paged.kv_indptr, paged.kv_indices, paged.seq_lens,
                                          qo_indptr=qo)
    assert torch.equal(out_csr, out)


@pytest.mark.parametrize("page_size", [1, 16, 32, 64, 128])
@pytest.mark.parametrize("fmt", ["fp8", "mxfp4"])
def test_paged_decode_on_the_hopper_kernel(fmt, page_size):
    """backend='gluon' over a shuffled pool (block table and CSR) against the reference; both forms
    read the same tokens in the same order, so they give the same bits."""
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("needs an sm_90 GPU")
    kv_lens = ragged(40, 1500, seed=50 + page_size)
    q, _, paged, qo = problem(fmt, kv_lens, [1] * 40, page_size, seed=page_size)
    out = poisoned_out(q.shape[0], 16, device=CUDA)
    _, lse = mixmla.mla_decode_paged(q, paged.cache, paged.block_table, paged.seq_lens, qo_indptr=qo, out=out,
                                     return_lse=True, backend="gluon")
    ref, ref_lse = mla_decode_paged_reference(q, paged.cache, paged.block_pages, qo)
    result = check_strict(out, ref)
    assert result, result.message
    assert torch.equal(torch.isneginf(lse), torch.isneginf(ref_lse))
    out_csr = mixmla.mla_decode_paged_csr(q, paged.cache, paged.kv_indptr, paged.kv_indices, paged.seq_lens,
                                          qo_indptr=qo, backend="gluon")
    assert torch.equal(out_csr, out)


@pytest.mark.parametrize("fmt", FORMATS)
def test_paged_plan_in_a_cuda_graph_serving_loop(fmt):
    """Capture append_kv (check=False) + plan.run once; each replay after writing the next token's
    slot, length and (on a page boundary) page entry in place attends to the grown batch."""
    page_size, batch = 16, 8
    kv_lens = [15 + 3 * i for i in range(batch)]
    q, _, paged, _ = problem(fmt, kv_lens, [1] * batch, page_size, spare_pages=batch * 2)
    p = mixmla.plan_paged(paged.block_table, paged.seq_lens, page_size, num_heads=16, fmt=fmt)
    new = torch.empty(batch, 576, dtype=torch.bfloat16, device=CUDA)
    slots = torch.full((batch,), -1, dtype=torch.int64, device=CUDA)
    out = torch.empty(batch, 16, 512, dtype=torch.bfloat16, device=CUDA)
    table = paged.block_table
    wide = torch.full((batch, table.shape[1] + 2), -1, dtype=torch.int32, device=CUDA)
    wide[:, :table.shape[1]] = table
    p.rebind(mixmla.paged.PageTable(paged.seq_lens, wide, None, page_size))
    paged = type(paged)(paged.cache, wide, paged.seq_lens, paged.kv_indptr, paged.kv_indices)
    used = set(wide[wide >= 0].tolist())
    free = [i for i in range(paged.cache.num_pages) if i not in used]
    torch.cuda.synchronize()
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        for _ in range(2):  # warm up (compiles) outside the capture
            p.run(q, paged.cache, out=out)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=stream):
            mixmla.append_kv(paged.cache, new, slots, check=False)
            p.run(q, paged.cache, out=out)
    gen = torch.Generator().manual_seed(9)
    for step in range(3):
        for b in range(batch):
            n = int(paged.seq_lens[b])
            if n % page_size == 0:
                wide[b, n // page_size] = free.pop()
            slots[b] = int(wide[b, n // page_size]) * page_size + n % page_size
        new.copy_(torch.randn(batch, 576, generator=gen).to(CUDA, torch.bfloat16))
        paged.seq_lens.add_(1)
        graph.replay()
        torch.cuda.synchronize()
        ref, _ = mla_decode_paged_reference(q, paged.cache, paged.block_pages)
        result = check_strict(out, ref)
        assert result, f"step {step}: {result.message}"


@pytest.mark.parametrize("fmt", ["bf16", "fp8", "mxfp4"])
def test_append_kv_bits_on_gpu(fmt):
    gen = torch.Generator().manual_seed(1)
    pool = mixmla.empty_paged_cache(512, 64, fmt, device=CUDA, scale=0.013)
    kv = torch.randn(256, 576, generator=gen) * torch.logspace(-30, 30, 256)[:, None]
    kv[0, :8] = torch.tensor([0.0, -0.0, 0.25, 0.75, 2.5, 5.0, 7.0, 1e-40])
    kv = kv.clamp(-3e38, 3e38).to(CUDA, torch.bfloat16)
    slots = torch.randperm(512 * 64, generator=gen)[:256].to(CUDA)
    slots[3] = -1
    mixmla.append_kv(pool, kv, slots)
    keep = slots >= 0
    got = pool.rows.data.view(torch.uint8)[slots[keep]]
    if fmt == "mxfp4":
        q = quantize_mxfp4(kv[keep], pad_scales=False)
        assert torch.equal(got, q.data) and torch.equal(pool.rows.scales[slots[keep]][:, :18], q.scales)
    elif fmt == "fp8":
        assert torch.equal(got, encode_fp8(kv[keep], pool.rows.scale).view(torch.uint8))
    else:
        assert torch.equal(got, kv[keep].view(torch.uint8).reshape(got.shape))


def test_ops_compile_fullgraph_on_gpu():
    q, _, paged, _ = problem("mxfp4", [300, 77, 0, 1000], [1] * 4, 64)
    kv = paged.cache.rows.data.view(paged.cache.num_pages, 64, 288)
    scales = paged.cache.rows.scales

    def step(q, kv, scales, table, lens):
        out, lse = torch.ops.mixmla.mla_decode_paged(q, kv, scales, table, lens, None, None)
        return out.float().sum(-1), lse

    eager = step(q, kv, scales, paged.block_table, paged.seq_lens)
    torch._dynamo.reset()
    compiled = torch.compile(step, fullgraph=True)(q, kv, scales, paged.block_table, paged.seq_lens)
    torch.testing.assert_close(compiled[0], eager[0])
    assert torch.equal(compiled[1], eager[1])


needs_flashinfer = pytest.mark.skipif(importlib.util.find_spec("flashinfer") is None,
                                      reason="flashinfer not installed")


@needs_flashinfer
@pytest.mark.parametrize("page_size", [1, 64])
@pytest.mark.parametrize("fmt", ["bf16", "fp8"])
def test_flashinfer_wrapper_against_flashinfer(fmt, page_size):
    import flashinfer

    from mixmla.compat import BatchMLAPagedAttentionWrapper

    kv_lens = ragged(32, 900, seed=3)
    kv_lens[0] = 1
    q, _, paged, qo = problem(fmt, kv_lens, [1] * 32, page_size)
    rows = paged.cache.rows
    pool = rows.data.view(paged.cache.num_pages, page_size, 576)
    ckv, kpe = pool[..., :512], pool[..., 512:]
    q_nope, q_pe = q[..., :512], q[..., 512:]
    sm_scale = 1 / math.sqrt(192)
    args = (qo, paged.kv_indptr, paged.kv_indices, paged.seq_lens, 16, 512, 64, page_size, False, sm_scale,
            torch.bfloat16, pool.dtype)
    theirs = flashinfer.mla.BatchMLAPagedAttentionWrapper(torch.empty(128 << 20, dtype=torch.int8, device=CUDA),
                                                          backend="fa3")
    theirs.plan(*args)
    ours = BatchMLAPagedAttentionWrapper(torch.empty(1, dtype=torch.int8, device=CUDA))
    ours.plan(*args)
    kwargs = {"ckv_scale": float(rows.scale), "kpe_scale": float(rows.scale)} if fmt == "fp8" else {}
    out_o, lse_o = ours.run(q_nope, q_pe, ckv, kpe, return_lse=True, **kwargs)
    try:
        out_t, lse_t = theirs.run(q_nope, q_pe, ckv, kpe, return_lse=True, **kwargs)
    except TypeError:  # FlashInfer versions without the scale keywords
        out_t, lse_t = theirs.run(q_nope, q_pe, ckv, kpe, return_lse=True)
    ref, _ = mla_decode_paged_reference(q, paged.cache, paged.csr_pages, None, sm_scale)
    assert check_strict(out_o, ref), check_strict(out_o, ref).message
    if fmt == "bf16":  # FlashInfer's fp8 scale handling differs across versions; bf16 is its ground
        assert check_strict(out_t, ref), "FlashInfer itself disagrees with the reference"
        torch.testing.assert_close(lse_o, lse_t, rtol=1e-3, atol=1e-2)
