"""Shapes, spec loading, byte counts and bench option handling (CPU, no kernels)."""

import pytest

from mixmla.harness.bench import select, settings_for
from mixmla.harness.measure import exit_status, peer_formats
from mixmla.harness.cases import BYTES_PER_TOKEN, DEFAULT_SEED, load_specs, min_bytes, parse_shape, spec_label
from mixmla.harness.report import make_row


def test_bytes_per_token_match_spec_table():
    assert BYTES_PER_TOKEN == {"bf16": 1152, "fp8": 576, "mxfp4": 306}


def test_min_bytes_counts_cache_q_and_out():
    # 256 x 8192, H = 16, Lq = 1: docs/SPEC.md's 2,097,152 tokens; q 256*16*576*2, out 256*16*512*2.
    qo = 256 * 16 * (576 + 512) * 2
    assert min_bytes(256, 256 * 8192, 16, "bf16") == 2_097_152 * 1152 + qo
    assert min_bytes(256, 256 * 8192, 16, "fp8") == 2_097_152 * 576 + qo
    assert min_bytes(256, 256 * 8192, 16, "mxfp4") == 2_097_152 * 306 + qo
    # At 4.44 TB/s the bf16 cache alone takes docs/SPEC.md's 544 us.
    assert 2_097_152 * 1152 / 4.44e12 * 1e6 == pytest.approx(544, abs=1)
    with pytest.raises(ValueError):
        min_bytes(1, 1, 16, "fp4")


def test_parse_shape():
    assert parse_shape("32,1,8192") == {"batchsize": 32, "qseqlen": 1, "kvseqlen": 8192, "seed": DEFAULT_SEED}
    assert parse_shape(" 4, 4, 1024, 32 ") == {"batchsize": 4, "qseqlen": 4, "kvseqlen": 1024, "seed": DEFAULT_SEED,
                                                "numheads": 32}
    assert parse_shape("2x1x0")["kvseqlen"] == 0
    for bad in ("32,8192", "a,b,c", "0,1,64", "1,0,64", "1,1,-1", "1,1,1,1,1", "1,1,64,0"):
        with pytest.raises(ValueError):
            parse_shape(bad)


def test_spec_label():
    assert spec_label({"batchsize": 256, "qseqlen": 1, "kvseqlen": 8192, "seed": 1}) == "256x8192"
    assert spec_label({"batchsize": 4, "qseqlen": 4, "kvseqlen": 1024, "seed": 1, "numheads": 32,
                       "ragged": 1}) == "4x1024 q4 h32 ragged"


def test_load_specs_default_is_the_eight_benchmark_shapes():
    specs = load_specs()
    assert len(specs) == 8
    assert {(s["batchsize"], s["kvseqlen"]) for s in specs} == {(b, k) for b in (4, 32, 64, 256) for k in (1024, 8192)}
    assert all(s["qseqlen"] == 1 and s.get("numheads", 16) == 16 for s in specs)


def test_load_specs_from_shapes_and_file(tmp_path):
    f = tmp_path / "specs.txt"
    f.write_text("# comment\nbatchsize: 32; qseqlen: 1; kvseqlen: 8192; seed: 5415\n\n"
                 "batchsize: 4; qseqlen: 4; kvseqlen: 100; seed: 7; numheads: 32\n")
    specs = load_specs(["2,1,64"], str(f))
    assert [s["batchsize"] for s in specs] == [2, 32, 4]
    assert specs[1]["seed"] == 5415 and specs[2]["numheads"] == 32
    f.write_text("batchsize: 32; qseqlen: 1\n")
    with pytest.raises(ValueError):
        load_specs(None, str(f))


def test_select_and_peer_formats():
    assert select("bf16, fp8,bf16", ("bf16", "fp8"), "path") == ["bf16", "fp8"]
    assert select("none", ("torch",), "peer") == [] and select("", ("torch",), "peer") == []
    with pytest.raises(ValueError, match="unknown peer flashy"):
        select("torch,flashy", ("torch",), "peer")
    assert peer_formats(("bf16", "fp8", "mxfp4"), ["fp8", "auto"]) == ["fp8"]
    assert peer_formats(("bf16", "fp8"), ["mxfp4"]) == []
    assert peer_formats(("bf16", "fp8"), ["auto"]) == ["bf16", "fp8"]


def test_settings_quick_is_cheaper():
    full, quick = settings_for(False), settings_for(True)
    assert full.rule.max_count == 100 and full.rule.rel_err == 1e-3
    assert quick.rule.max_count < full.rule.max_count and quick.rule.wall_cap_s < full.rule.wall_cap_s
    assert quick.gpu_cap_s < full.gpu_cap_s


def test_exit_status_counts_only_our_failures():
    spec = {"batchsize": 1, "qseqlen": 1, "kvseqlen": 1, "seed": 1}
    ok = make_row(spec, "1x1", "mixmla", "fp8")
    peer_bad = make_row(spec, "1x1", "torch", "fp8", "check failed")
    skipped = make_row(spec, "1x1", "mixmla", "bf16", "skipped")
    assert exit_status([ok, peer_bad, skipped]) == 0
    assert exit_status([ok, make_row(spec, "1x1", "mixmla", "auto", "error")]) == 1
    assert exit_status([make_row(spec, "1x1", "mixmla", "mxfp4", "check failed")]) == 1


def test_shipped_spec_files():
    from pathlib import Path

    from mixmla.inputs import BENCHMARK_SHAPES

    specs = Path(__file__).resolve().parents[1] / "bench" / "specs"
    assert load_specs(None, str(specs / "benchmark.txt")) == BENCHMARK_SHAPES
    ext = load_specs(None, str(specs / "extended.txt"))
    assert {s["qseqlen"] for s in ext} == {1, 4} and {s.get("numheads", 16) for s in ext} == {16, 32}
    assert 128 in {s["batchsize"] for s in ext}


def test_l2_flusher_rejects_an_unknown_mode():
    from mixmla.harness.timing import FLUSH_MODES, L2Flusher

    assert FLUSH_MODES == ("write", "read")
    with pytest.raises(ValueError, match="flush mode"):
        L2Flusher(device="cpu", mode="zero")
