"""``mixmla.compat``: FlashMLA's and FlashInfer's calls with their argument names and result shapes,
checked here against mixmla's own paged entry points and the float64 reference (and against
FlashInfer itself on a GPU: tests/test_paged_gpu.py)."""

from __future__ import annotations

import math

import pytest
import torch

import mixmla
from mixmla.check import check_strict
from mixmla.compat import BatchMLAPagedAttentionWrapper, flash_mla_with_kvcache, get_mla_metadata
from mixmla.compat.flashinfer import join_columns
from mixmla.formats import quantize
from mixmla.paged import scatter_to_pages
from mixmla.reference import mla_decode_paged_reference

from conftest import DEVICE, FORMATS, indptr


def problem(fmt, kv_lens, page_size, s_q=1, heads=16, seed=0):
    gen = torch.Generator().manual_seed(seed)
    cache = quantize(torch.randn(sum(kv_lens), 576, generator=gen).to(DEVICE), fmt)
    paged = scatter_to_pages(cache, indptr(kv_lens), page_size, generator=gen, spare_pages=1)
    q = torch.randn(len(kv_lens), s_q, heads, 576, generator=gen).to(DEVICE, torch.bfloat16)
    return q, paged


def pool_argument(paged):
    rows = paged.cache.rows
    if rows.format == "bf16":  # FlashMLA's own layout: (blocks, P, 1, 576)
        return rows.data.view(paged.cache.num_pages, paged.cache.page_size, 1, 576)
    return paged.cache


@pytest.mark.parametrize("fmt", FORMATS)
def test_flash_mla_with_kvcache_shapes_and_values(fmt):
    q, paged = problem(fmt, [70, 3], 64, s_q=2)
    meta, splits = get_mla_metadata(paged.seq_lens, 2 * 16, 1)
    assert splits is None
    out, lse = flash_mla_with_kvcache(q, pool_argument(paged), paged.block_table, paged.seq_lens, 512, meta, splits,
                                      causal=True)
    assert out.shape == (2, 2, 16, 512) and lse.shape == (2, 16, 2) and lse.dtype == torch.float32
    qo = indptr([2, 2])
    ref, ref_lse = mla_decode_paged_reference(q.view(4, 16, 576), paged.cache, paged.block_pages, qo)
    result = check_strict(out.reshape(4, 16, 512), ref)
    assert result, result.message
    torch.testing.assert_close(lse.double(), ref_lse.view(2, 2, 16).transpose(1, 2).to(DEVICE), rtol=1e-3, atol=1e-2)
    # Later calls run the plan of the first: one token more, written into the pool, is attended to.
    assert meta.plan is not None
    first_plan = meta.plan
    paged.seq_lens[1] += 1
    mixmla.append_kv(paged.cache, torch.randn(1, 576).to(DEVICE, torch.bfloat16),
                     torch.tensor([int(paged.block_table[1, 0]) * 64 + 3], device=DEVICE))
    out2, _ = flash_mla_with_kvcache(q, pool_argument(paged), paged.block_table, paged.seq_lens, 512, meta, None,
                                     causal=True)
    assert meta.plan is first_plan
    ref2, _ = mla_decode_paged_reference(q.view(4, 16, 576), paged.cache, paged.block_pages, qo)
    assert check_strict(out2.reshape(4, 16, 512), ref2)
    assert not torch.equal(out2[1], out[1]) and torch.equal(out2[0], out[0])


def test_flash_mla_refuses_what_it_does_not_serve():
    q, paged = problem("bf16", [20], 16, s_q=2)
    args = (q, pool_argument(paged), paged.block_table, paged.seq_lens, 512)
    with pytest.raises(ValueError, match="causal=False with s_q > 1"):
        flash_mla_with_kvcache(*args, None, None, causal=False)
    with pytest.raises(ValueError, match="is_fp8_kvcache"):
        flash_mla_with_kvcache(*args, None, None, causal=True, is_fp8_kvcache=True)
    with pytest.raises(ValueError, match="indices"):
        flash_mla_with_kvcache(*args, None, None, causal=True, indices=torch.zeros(1, 2, 8, dtype=torch.int32))
    with pytest.raises(ValueError, match=r"block_table\[0, 0\]"):
        bad = paged.block_table.clone()
        bad[0, 0] = 99
        flash_mla_with_kvcache(q, pool_argument(paged), bad, paged.seq_lens, 512, None, None, causal=True)


@pytest.mark.parametrize("fmt", ["bf16", "fp8"])
@pytest.mark.parametrize("base_e", [False, True])
def test_flashinfer_wrapper_matches_paged_decode(fmt, base_e):
    q, paged = problem(fmt, [33, 0, 80], 1, heads=16, seed=3)
    q = q[:, 0]
    rows = paged.cache.rows
    kv = rows.data.view(paged.cache.num_pages, 1, 576)
    w = BatchMLAPagedAttentionWrapper(torch.empty(16, dtype=torch.int8, device=DEVICE))
    w.plan(indptr([1, 1, 1]), paged.kv_indptr, paged.kv_indices, paged.seq_lens, 16, 512, 64, 1, False, 0.07,
           torch.bfloat16, kv.dtype)
    scale = {"ckv_scale": float(rows.scale), "kpe_scale": float(rows.scale)} if fmt == "fp8" else {}
    out, lse = w.run(q[..., :512], q[..., 512:], kv[..., :512], kv[..., 512:], return_lse=True,
                     return_lse_base_on_e=base_e, **scale)
    ref_out, ref_lse = mixmla.mla_decode_paged_csr(q, paged.cache, paged.kv_indptr, paged.kv_indices, paged.seq_lens,
                                                   sm_scale=0.07, return_lse=True)
    assert torch.equal(out, ref_out)
    finite = torch.isfinite(ref_lse)
    expect = ref_lse if base_e else ref_lse / math.log(2)
    torch.testing.assert_close(lse[finite], expect[finite])
    assert torch.equal(torch.isneginf(lse), ~finite)
    # Separate buffers are joined (a copy): the same result.
    out2 = w.run(q[..., :512].clone(), q[..., 512:].clone(), kv[..., :512].clone(), kv[..., 512:].clone(), **scale)
    assert torch.equal(out2, ref_out)


def test_flashinfer_wrapper_reads_mxfp4_pools_and_graph_buffers():
    q, paged = problem("mxfp4", [40, 17], 16, seed=4)
    q = q[:, 0]
    bufs = (torch.zeros(3, dtype=torch.int32, device=DEVICE), torch.zeros(3, dtype=torch.int32, device=DEVICE),
            torch.zeros(16, dtype=torch.int32, device=DEVICE), torch.zeros(2, dtype=torch.int32, device=DEVICE))
    w = BatchMLAPagedAttentionWrapper(None, True, *bufs)
    w.plan(indptr([1, 1]), paged.kv_indptr, paged.kv_indices, paged.seq_lens, 16, 512, 64, 16, True, 0.07,
           torch.bfloat16, torch.uint8)
    out = w.run(q[..., :512], q[..., 512:], paged.cache)
    ref = mixmla.mla_decode_paged_csr(q, paged.cache, paged.kv_indptr, paged.kv_indices, paged.seq_lens, sm_scale=0.07)
    assert torch.equal(out, ref)
    first = w._plan
    w.plan(indptr([1, 1]), paged.kv_indptr, paged.kv_indices, paged.seq_lens - 1, 16, 512, 64, 16, True, 0.07,
           torch.bfloat16, torch.uint8)
    assert w._plan is first, "use_cuda_graph keeps one plan over the wrapper's buffers"
    out2 = w.run(q[..., :512], q[..., 512:], paged.cache)
    ref2 = mixmla.mla_decode_paged_csr(q, paged.cache, paged.kv_indptr, paged.kv_indices, paged.seq_lens - 1,
                                       sm_scale=0.07)
    assert torch.equal(out2, ref2)


def test_join_columns_views_one_buffer():
    whole = torch.randn(4, 2, 600)[..., :576]
    joined = join_columns(whole[..., :512], whole[..., 512:], "x")
    assert joined.data_ptr() == whole.data_ptr() and torch.equal(joined, whole)
    with pytest.raises(ValueError, match="x: expected"):
        join_columns(whole[..., :500], whole[..., 512:], "x")
