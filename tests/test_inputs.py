"""mixmla.inputs: the benchmark contract, ragged and realistic generators, spec lines, shape lists."""

from __future__ import annotations

import math

import pytest
import torch

from mixmla.formats import dequantize, quantize_fp8, quantize_mxfp4
from mixmla.inputs import (
    BENCHMARK_SHAPES,
    TEST_SHAPES,
    format_spec,
    generate_from_spec,
    generate_input,
    generate_ragged,
    generate_realistic,
    generate_staircase,
    parse_spec_file,
    parse_spec_line,
)

CONFIG_KEYS = {"batch_size", "num_heads", "num_kv_heads", "qk_head_dim", "kv_lora_rank", "qk_rope_head_dim",
               "v_head_dim", "q_seq_len", "kv_seq_len", "sm_scale"}


def _check_contract(data, total_q, total_kv, num_heads):
    q, kv_data, qo_indptr, kv_indptr, config = data
    assert q.dtype == torch.bfloat16 and tuple(q.shape) == (total_q, num_heads, 576)
    assert set(kv_data) == {"bf16", "fp8", "mxfp4"}
    bf16 = kv_data["bf16"]
    assert bf16.dtype == torch.bfloat16 and tuple(bf16.shape) == (total_kv, 1, 576)
    fp8, scale = kv_data["fp8"]
    assert fp8.dtype == torch.float8_e4m3fn and tuple(fp8.shape) == (total_kv, 1, 576)
    assert scale.dtype == torch.float32 and scale.numel() == 1
    fp4, scales = kv_data["mxfp4"]
    assert fp4.dtype == torch.uint8 and tuple(fp4.shape) == (total_kv, 1, 288)
    assert scales.dtype == torch.uint8 and scales.shape[0] >= total_kv and scales.shape[1] == 24
    assert scales.shape[0] % 256 == 0
    for ptr, total in ((qo_indptr, total_q), (kv_indptr, total_kv)):
        assert ptr.dtype == torch.int32 and ptr[0].item() == 0 and ptr[-1].item() == total
        assert (ptr[1:] >= ptr[:-1]).all()
    assert CONFIG_KEYS <= set(config)
    assert config["num_heads"] == num_heads and config["num_kv_heads"] == 1
    assert (config["qk_head_dim"], config["kv_lora_rank"], config["qk_rope_head_dim"], config["v_head_dim"]) == (
        576, 512, 64, 512)
    assert config["sm_scale"] == pytest.approx(1 / 24)
    # fp8 and MXFP4 are the quantizations of the bf16 cache.
    again_fp8 = quantize_fp8(bf16)
    assert torch.equal(again_fp8.data.view(torch.uint8), fp8.reshape(total_kv, 576).view(torch.uint8))
    assert torch.equal(again_fp8.scale, scale)
    again_mx = quantize_mxfp4(bf16)
    assert torch.equal(again_mx.data, fp4.reshape(total_kv, 288)) and torch.equal(again_mx.scales, scales)


def test_generate_input_follows_the_benchmark_contract():
    data = generate_input(4, 2, 33, seed=1, num_heads=32, device="cpu")
    _check_contract(data, 8, 132, 32)
    q, kv_data, qo_indptr, kv_indptr, config = data
    assert qo_indptr.tolist() == [0, 2, 4, 6, 8] and kv_indptr.tolist() == [0, 33, 66, 99, 132]
    assert (config["batch_size"], config["q_seq_len"], config["kv_seq_len"]) == (4, 2, 33)


def test_generate_input_is_standard_normal_and_seeded():
    q, kv_data, *_ = generate_input(8, 1, 512, seed=2, device="cpu")
    kv = kv_data["bf16"].float()
    assert abs(kv.mean().item()) < 0.01 and abs(kv.std().item() - 1) < 0.01
    assert abs(q.float().std().item() - 1) < 0.02
    q2, kv_data2, *_ = generate_input(8, 1, 512, seed=2, device="cpu")
    assert torch.equal(q, q2) and torch.equal(kv_data["bf16"], kv_data2["bf16"])
    q3, *_ = generate_input(8, 1, 512, seed=3, device="cpu")
    assert not torch.equal(q, q3)


def test_generate_input_with_empty_caches():
    data = generate_input(3, 1, 0, seed=4, device="cpu")
    _check_contract(data, 3, 0, 16)
    assert data[3].tolist() == [0, 0, 0, 0]


@pytest.mark.parametrize("args", [(0, 1, 8), (2, 0, 8), (2, 1, -1)])
def test_generate_input_rejects_bad_sizes(args):
    with pytest.raises(ValueError):
        generate_input(*args, seed=0, device="cpu")


def test_generate_ragged_lengths_include_0_1_and_the_maximum():
    data = generate_ragged(12, 1, 300, seed=5, device="cpu")
    q, kv_data, qo_indptr, kv_indptr, config = data
    lens = config["kv_seq_lens"]
    assert len(lens) == 12 and {0, 1, 300} <= set(lens) and max(lens) == 300 and min(lens) >= 0
    assert torch.diff(kv_indptr).tolist() == lens
    _check_contract(data, 12, sum(lens), 16)
    assert config["kv_seq_len"] == 300 and config["q_seq_len"] == 1 and config["q_seq_lens"] == [1] * 12
    assert len(set(lens)) > 4  # actually ragged


def test_generate_ragged_is_seeded_and_device_independent_in_lengths():
    a = generate_ragged(10, 1, 100, seed=6, device="cpu")[4]["kv_seq_lens"]
    b = generate_ragged(10, 1, 100, seed=6, device="cpu")[4]["kv_seq_lens"]
    c = generate_ragged(10, 1, 100, seed=7, device="cpu")[4]["kv_seq_lens"]
    assert a == b and a != c


def test_generate_ragged_without_empty_requests():
    for seed in range(5):
        lens = generate_ragged(16, 1, 64, seed=seed, device="cpu", include_empty=False)[4]["kv_seq_lens"]
        assert min(lens) >= 1 and max(lens) == 64


def test_generate_ragged_per_request_query_counts_and_explicit_lengths():
    data = generate_ragged(3, [4, 0, 2], 0, seed=8, device="cpu", kvseqlens=[10, 5, 1])
    q, kv_data, qo_indptr, kv_indptr, config = data
    _check_contract(data, 6, 16, 16)
    assert qo_indptr.tolist() == [0, 4, 4, 6] and kv_indptr.tolist() == [0, 10, 15, 16]
    assert config["q_seq_len"] == 4 and config["kv_seq_len"] == 10


def test_generate_ragged_small_batches():
    assert generate_ragged(1, 1, 50, seed=9, device="cpu")[4]["kv_seq_lens"] == [50]
    assert sorted(generate_ragged(2, 1, 50, seed=9, device="cpu")[4]["kv_seq_lens"]) == [0, 50]


@pytest.mark.parametrize(
    "kwargs",
    [dict(kvseqlens=[1, 2]), dict(kvseqlens=[1, -1, 2]), dict(qseqlen=[1, 1]), dict(max_kvseqlen=-1)],
)
def test_generate_ragged_rejects_bad_lengths(kwargs):
    args = dict(batchsize=3, qseqlen=1, max_kvseqlen=8, seed=0, device="cpu") | kwargs
    with pytest.raises(ValueError):
        generate_ragged(**args)


def test_generate_realistic_has_outlier_channels_and_larger_rope_dims():
    data = generate_realistic(4, 1, 256, seed=10, device="cpu")
    _check_contract(data, 4, 1024, 16)
    kv = data[1]["bf16"].float().reshape(-1, 576)
    config = data[4]
    outliers = config["outlier_channels"]
    assert len(outliers) == 6 and all(0 <= c < 512 for c in outliers)
    channel_std = kv.std(dim=0)
    normal = [c for c in range(512) if c not in outliers]
    typical = channel_std[normal].median()
    assert (channel_std[outliers] > 8 * typical).all()
    assert channel_std[512:].median() > 3 * typical
    # Not Gaussian: the kurtosis of the whole cache is far above 3.
    flat = kv.reshape(-1)
    kurtosis = (((flat - flat.mean()) / flat.std()) ** 4).mean().item()
    assert kurtosis > 5
    # And it costs MXFP4 accuracy: blocks holding an outlier quantize the rest coarsely.
    mx_err = lambda x: (torch.linalg.vector_norm(dequantize(quantize_mxfp4(x)) - x) /  # noqa: E731
                        torch.linalg.vector_norm(x)).item()
    gaussian = generate_input(4, 1, 256, seed=10, device="cpu")[1]["bf16"].float().reshape(-1, 576)
    latent_err = lambda x: (torch.linalg.vector_norm((dequantize(quantize_mxfp4(x)) - x)[:, normal]) /  # noqa: E731
                            torch.linalg.vector_norm(x[:, normal])).item()
    assert latent_err(kv) > latent_err(gaussian)
    assert math.isfinite(mx_err(kv))


def test_generate_realistic_is_seeded():
    a = generate_realistic(2, 1, 32, seed=11, device="cpu")
    b = generate_realistic(2, 1, 32, seed=11, device="cpu")
    assert torch.equal(a[1]["bf16"], b[1]["bf16"]) and a[4]["outlier_channels"] == b[4]["outlier_channels"]
    c = generate_realistic(2, 1, 32, seed=12, device="cpu")
    assert not torch.equal(a[1]["bf16"], c[1]["bf16"])
    with pytest.raises(ValueError):
        generate_realistic(2, 1, 32, seed=0, device="cpu", num_outlier_channels=600)


def test_parse_spec_line():
    assert parse_spec_line("batchsize: 4; qseqlen: 1; kvseqlen: 1024; seed: 4220") == {
        "batchsize": 4, "qseqlen": 1, "kvseqlen": 1024, "seed": 4220}
    spec = parse_spec_line("  BatchSize:32 ;qseqlen: 4; kvseqlen: 8192; seed: 5415; numheads: 32; note: x;\n")
    assert spec == {"batchsize": 32, "qseqlen": 4, "kvseqlen": 8192, "seed": 5415, "numheads": 32, "note": "x"}
    assert parse_spec_line("batchsize: 1; qseqlen: 1; kvseqlen: 1; seed: 1; scale: 0.5")["scale"] == 0.5


@pytest.mark.parametrize(
    "line, match",
    [
        ("batchsize: 4; qseqlen: 1; kvseqlen: 1024", "lacks seed"),
        ("batchsize 4; qseqlen: 1; kvseqlen: 1024; seed: 1", "key: value"),
        ("batchsize: ; qseqlen: 1; kvseqlen: 1024; seed: 1", "key: value"),
        ("batchsize: 4; batchsize: 5; qseqlen: 1; kvseqlen: 1024; seed: 1", "twice"),
        ("batchsize: four; qseqlen: 1; kvseqlen: 1024; seed: 1", "integer"),
        ("batchsize: 4; qseqlen: 1.5; kvseqlen: 1024; seed: 1", "integer"),
        ("", "lacks"),
    ],
)
def test_parse_spec_line_errors(line, match):
    with pytest.raises(ValueError, match=match):
        parse_spec_line(line)


def test_parse_spec_file(tmp_path):
    path = tmp_path / "shapes.txt"
    path.write_text("# benchmark\n\nbatchsize: 4; qseqlen: 1; kvseqlen: 1024; seed: 4220\n"
                    "   # indented comment\nbatchsize: 32; qseqlen: 1; kvseqlen: 8192; seed: 5415\n")
    assert [s["batchsize"] for s in parse_spec_file(path)] == [4, 32]
    path.write_text("batchsize: 4; qseqlen: 1; kvseqlen: 1024; seed: 4220\nbatchsize: 4\n")
    with pytest.raises(ValueError, match="shapes.txt:2"):
        parse_spec_file(path)


def test_benchmark_shapes_are_the_eight_of_the_spec():
    pairs = sorted((s["batchsize"], s["kvseqlen"]) for s in BENCHMARK_SHAPES)
    assert pairs == sorted((b, kv) for b in (4, 32, 64, 256) for kv in (1024, 8192))
    assert all(s["qseqlen"] == 1 and s.get("numheads", 16) == 16 for s in BENCHMARK_SHAPES)
    assert len({s["seed"] for s in BENCHMARK_SHAPES}) == 8


def test_test_shapes_are_small_and_cover_mtp_and_32_heads():
    assert all(s["batchsize"] * s["kvseqlen"] <= 4096 for s in TEST_SHAPES)
    assert any(s["qseqlen"] == 4 for s in TEST_SHAPES)
    assert any(s.get("numheads") == 32 for s in TEST_SHAPES)
    assert any(s["qseqlen"] == 4 and s.get("numheads") == 32 for s in TEST_SHAPES)
    assert any(s["kvseqlen"] == 0 for s in TEST_SHAPES) and any(s.get("ragged") for s in TEST_SHAPES)
    for spec in TEST_SHAPES + BENCHMARK_SHAPES:
        assert parse_spec_line(format_spec(spec)) == spec


def test_generate_from_spec():
    data = generate_from_spec({"batchsize": 2, "qseqlen": 4, "kvseqlen": 10, "seed": 1, "numheads": 32}, "cpu")
    _check_contract(data, 8, 20, 32)
    ragged = generate_from_spec({"batchsize": 5, "qseqlen": 1, "kvseqlen": 40, "seed": 2, "ragged": 1}, "cpu")
    assert ragged[4]["kv_seq_lens"] == generate_ragged(5, 1, 40, seed=2, device="cpu")[4]["kv_seq_lens"]


def test_staircase_scores_follow_their_levels():
    """Each 64-token tile's largest score (base 2, every head) lies near its level, in the order
    each request walks the levels; the cache is the same tokens in all three formats."""
    from mixmla.reference import default_sm_scale

    levels = [0.0, 3.0, 30.0, 12.0, 60.0]
    q, kv, qo_indptr, kv_indptr, config = generate_staircase(levels, num_heads=8, device="cpu")
    assert q.shape == (3, 8, 576) and q.dtype == torch.bfloat16
    assert kv_indptr.tolist() == [0, 320, 480, 800] and qo_indptr.tolist() == [0, 1, 2, 3]
    assert config["kv_seq_lens"] == [320, 160, 320] and kv["bf16"].shape == (800, 1, 576)
    keys = kv["bf16"].reshape(-1, 576).double()
    scale = default_sm_scale() / math.log(2.0)
    for b in (0, 2):
        lo = kv_indptr[b].item()
        s = scale * keys[lo:lo + 320] @ q[b].double().T  # (tokens, heads)
        tile_max = s.reshape(5, 64, 8).amax(dim=1)
        for i, level in enumerate(levels):
            assert (tile_max[i] > level - 1.0).all() and (tile_max[i] < level + 1.0).all(), (b, i, tile_max[i])
    # Request 1: the second half of request 0's tokens in reverse order, so its levels fall.
    s1 = (scale * keys[320:480] @ q[1].double().T).amax(dim=1)
    assert torch.equal(kv["bf16"][320:480], kv["bf16"][160:320].flip(0))
    assert 59 < s1[:64].max() < 61 and 11 < s1[64:128].max() < 13
