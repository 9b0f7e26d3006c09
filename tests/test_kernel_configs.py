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
from mixmla.kernels.triton.configs import DEFAULT_CONFIGS, KernelConfig, config_fields, default_config
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


@pytest.mark.parametrize("fields, error, match", [
    (dict(block_t=7), ValueError, r"KernelConfig.block_t must be a power of two in \[16, 128\], got 7"),
    (dict(block_t=48), ValueError, r"block_t must be a power of two"),
    (dict(block_t=8), ValueError, r"block_t .*got 8"),
    (dict(block_t=256), ValueError, r"block_t .*got 256"),
    (dict(block_t=64.0), TypeError, r"block_t must be an int, got float"),
    (dict(block_t=True), TypeError, r"block_t must be an int, got bool"),
    (dict(num_warps=3), ValueError, r"num_warps must be a power of two .*got 3"),
    (dict(num_warps=0), ValueError, r"num_warps .*got 0"),
    (dict(num_stages=0), ValueError, r"num_stages must be an int >= 1, got 0"),
    (dict(min_chunk=0), ValueError, r"min_chunk must be an int >= 1, got 0"),
    (dict(items_per_sm=0.0), ValueError, r"items_per_sm must be finite and > 0, got 0.0"),
    (dict(items_per_sm=float("nan")), ValueError, r"items_per_sm must be finite"),
    (dict(items_per_sm="2"), TypeError, r"items_per_sm must be a number, got str"),
])
def test_kernel_config_is_checked_when_made(fields, error, match):
    """A shape the kernels cannot take fails at construction (and through dataclasses.replace),
    naming the field, not at launch inside Triton."""
    with pytest.raises(error, match=match):
        KernelConfig(**fields)
    with pytest.raises(error, match=match):
        dataclasses.replace(DEFAULT_CONFIGS["bf16"], **fields)


@pytest.mark.parametrize("config", ["fast", {"block_t": 64}, 64])
def test_a_config_that_is_not_a_kernel_config_is_a_type_error(config):
    """plan and mla_decode on the Triton backend: config must be a KernelConfig or None."""
    kv_indptr = indptr([10, 3])
    q = torch.randn(2, 16, 576, device=DEVICE).to(torch.bfloat16)
    cache = torch.randn(13, 576, device=DEVICE).to(torch.bfloat16)
    with pytest.raises(TypeError, match=r"config must be a mixmla.KernelConfig .*got " + type(config).__name__):
        mixmla.plan(kv_indptr, num_heads=16, fmt="bf16", config=config, backend="triton")
    with pytest.raises(TypeError, match=r"config must be a mixmla.KernelConfig"):
        mixmla.mla_decode(q, cache, kv_indptr, config=config)


def test_config_fields_reads_command_line_text():
    fields = config_fields(" block_t=32, items_per_sm=1.5 ,num_warps=8")
    assert fields == {"block_t": 32, "items_per_sm": 1.5, "num_warps": 8}
    assert isinstance(fields["block_t"], int) and isinstance(fields["items_per_sm"], float)
    assert dataclasses.replace(default_config("fp8"), **fields).block_t == 32
    assert config_fields("num_stages=1/min_chunk=16", sep="/") == {"num_stages": 1, "min_chunk": 16}
    assert config_fields("") == {} and config_fields(None) == {}


@pytest.mark.parametrize("text, match", [("block_t", "expected field=value"), ("=4", "expected field=value"),
                                         ("blocks=4", "KernelConfig has block_t"), ("num_warps=four", "not a number")])
def test_config_fields_names_what_is_wrong(text, match):
    with pytest.raises(ValueError, match=match):
        config_fields(text)
