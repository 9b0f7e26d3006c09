"""The kernel configurations the planner ships: the split path against the reference (a chunk
boundary inside a tile, an empty request, causal query tokens, more chunks than one combine load),
and the planner's choice of defaults for programs of many query rows."""

from __future__ import annotations

import dataclasses

import pytest
import torch

import mixmla
from mixmla.check import check_strict
from mixmla.formats import quantize
from mixmla.kernels.triton.configs import DEFAULT_CONFIGS, KernelConfig, default_config
from mixmla.reference import mla_decode_reference
from mixmla.schedule import MAX_BLOCK_R, block_rows

from conftest import DEVICE, FORMATS, indptr, poisoned_out

@pytest.mark.parametrize("fmt", FORMATS)
def test_split_path_matches_reference(fmt):
    """Ragged lengths (a chunk boundary inside a tile, an empty request), Lq = 2 (causal), split
    and merged with the format's tuned kernel shape: the output, poisoned before the call, passes
    the strict check."""
    kv_lens, q_lens, heads = [70, 0, 133], [2, 2, 1], 16
    gen = torch.Generator(device=DEVICE).manual_seed(sum(map(ord, fmt)))
    q = torch.randn(sum(q_lens), heads, 576, generator=gen, device=DEVICE).to(torch.bfloat16)
    cache = quantize(torch.randn(sum(kv_lens), 576, generator=gen, device=DEVICE), fmt)
    kv_indptr, qo_indptr = indptr(kv_lens), indptr(q_lens)
    config = dataclasses.replace(DEFAULT_CONFIGS[fmt], min_chunk=32, items_per_sm=2.0)
    plan = mixmla.plan(kv_indptr, qo_indptr, heads, fmt, config=config)
    assert not plan.schedule.direct, "the case should exercise the split path and the merge"
    out = poisoned_out(q.shape[0], heads)
    plan.run(q, cache, out)
    ref, _ = mla_decode_reference(q, cache, kv_indptr, qo_indptr)
    result = check_strict(out, ref)
    assert result.passed, f"{fmt}: {result}"


def test_block_rows_covers_the_rows_in_powers_of_two():
    assert [block_rows(r) for r in (1, 16, 17, 32, 33, 64, 512)] == [16, 16, 32, 32, 64, 64, 64]


@pytest.mark.parametrize("fmt", FORMATS)
def test_default_config_fits_64_row_programs(fmt):
    """The tuned 3-stage bf16 shape needs 288 KB of shared memory with 64 query rows (H = 128,
    or Lq * H >= 64) and 4 warps spill its accumulator; the planner uses 2 stages and 8 warps
    there and keeps the tuned shape otherwise."""
    assert default_config(fmt, 16) == DEFAULT_CONFIGS[fmt]
    assert default_config(fmt, 32) == DEFAULT_CONFIGS[fmt]
    wide = default_config(fmt, 4 * 128)
    assert wide.num_stages <= 2 and wide.num_warps == 8
    tuned = DEFAULT_CONFIGS[fmt]
    assert dataclasses.replace(wide, num_stages=tuned.num_stages, num_warps=tuned.num_warps) == tuned


def test_plan_uses_the_fitted_default_and_keeps_an_explicit_config():
    kv_indptr, qo_indptr = indptr([10]), indptr([4])
    assert mixmla.plan(kv_indptr, qo_indptr, 128, "bf16").config == default_config("bf16", 4 * 128)
    assert mixmla.plan(kv_indptr, qo_indptr, 128, "bf16").schedule.block_r == MAX_BLOCK_R
    mine = KernelConfig(block_t=32, num_stages=3)
    assert mixmla.plan(kv_indptr, qo_indptr, 128, "bf16", config=mine).config is mine


@pytest.mark.parametrize("fmt", FORMATS)
def test_merge_of_more_chunks_than_one_combine_load(fmt):
    """A request cut into 41 chunks (the combine reads 16 per load, so it loops three times), one of
    2 and an empty one: output and log-sum-exp match the reference."""
    kv_lens, heads = [1300, 0, 70], 16
    gen = torch.Generator(device=DEVICE).manual_seed(41)
    q = torch.randn(len(kv_lens), heads, 576, generator=gen, device=DEVICE).to(torch.bfloat16)
    cache = quantize(torch.randn(sum(kv_lens), 576, generator=gen, device=DEVICE), fmt)
    kv_indptr, qo_indptr = indptr(kv_lens), indptr([1] * len(kv_lens))
    config = dataclasses.replace(DEFAULT_CONFIGS[fmt], block_t=32, num_stages=2, min_chunk=32, items_per_sm=1.0)
    plan = mixmla.plan(kv_indptr, qo_indptr, heads, fmt, config=config)
    assert plan.schedule.max_splits > 32, plan.schedule.max_splits
    out = poisoned_out(q.shape[0], heads)
    out, lse = plan.run(q, cache, out, return_lse=True)
    ref, ref_lse = mla_decode_reference(q, cache, kv_indptr, qo_indptr)
    assert check_strict(out, ref).passed, check_strict(out, ref)
    assert check_strict(lse, ref_lse).passed, check_strict(lse, ref_lse)
