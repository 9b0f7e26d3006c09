"""results.json schema, bandwidth arithmetic, the text table, markdown and PNG writers (CPU)."""

import json
import os

import pytest

from mixmla.harness.chart import chart_series, write_chart
from mixmla.harness.report import (
    SCHEMA, fill_bandwidth, format_markdown, format_short, format_table, geomeans, main, make_row, new_results,
    validate_results, write_all,
)

SPEC_A = {"batchsize": 4, "qseqlen": 1, "kvseqlen": 1024, "seed": 1}
SPEC_B = {"batchsize": 256, "qseqlen": 1, "kvseqlen": 8192, "seed": 2}


def _ok_row(spec, label, impl, path, mean, gpu_us, nbytes, rel=3e-3, fmt=None):
    row = make_row(spec, label, impl, path)
    row["format"] = fmt or path
    check = {"passed": True, "rel_l2": rel, "message": "strict pass"}
    row["check"] = {"format": row["format"], "strict": check, "loose": dict(check, message="loose pass")}
    row["latency_us"] = {"n": 10, "mean": mean, "std": 1.0, "err": 0.3, "best": mean - 1, "worst": mean + 2,
                         "stop": "converged"}
    row["gpu"] = {"median_us": gpu_us, "min_us": gpu_us - 0.5, "n": 50, "method": "graph+flush", "note": "",
                  "flush": "read", "write_flush_median_us": gpu_us + 7.0}
    row["bytes"] = nbytes
    return fill_bandwidth(row, 4000.0)


def _results():
    res = new_results("gpu", {"name": "NVIDIA H200", "torch": "2.x", "triton": "3.x"},
                      {"read_gbps": 4000.0, "torch_sum_gbps": 3900.0, "triton_read_gbps": 4000.0,
                       "copy_gbps": 3800.0, "nbytes": 3 << 30, "method": "triton grid-stride read"},
                      {"max_count": 100})
    res["peers"] = {"flashmla": {"available": False, "reason": "not installed (not on PyPI)", "formats": ["bf16"]}}
    res["rows"] = [
        _ok_row(SPEC_A, "4x1024", "mixmla", "fp8", 40.0, 10.0, 4_000_000),
        _ok_row(SPEC_B, "256x8192", "mixmla", "fp8", 400.0, 300.0, 1_200_000_000),
        _ok_row(SPEC_A, "4x1024", "mixmla", "auto", 45.0, 9.0, 2_000_000, fmt="mxfp4"),
        make_row(SPEC_B, "256x8192", "mixmla", "auto", "check failed", "strict FAIL: rel L2 0.5"),
    ]
    res["geomean"] = geomeans(res["rows"])
    return res


def test_fill_bandwidth_arithmetic():
    row = _ok_row(SPEC_B, "256x8192", "mixmla", "bf16", 700.0, 600.0, 2_400_000_000)
    assert row["gbps"] == pytest.approx(2.4e9 / 600e-6 / 1e9)  # 4000 GB/s
    assert row["pct_ceiling"] == pytest.approx(100.0)
    assert row["floor_us"] == pytest.approx(600.0)
    assert row["x_floor"] == pytest.approx(1.0)
    empty = fill_bandwidth(make_row(SPEC_A, "4x1024", "torch", "fp8"), 4000.0)
    assert empty["gbps"] is None and empty["pct_ceiling"] is None


def test_make_row_rejects_unknown_status():
    with pytest.raises(ValueError):
        make_row(SPEC_A, "4x1024", "mixmla", "fp8", status="great")


def test_geomeans_counts_only_ok_shapes():
    g = _results()["geomean"]
    assert g["mixmla fp8"]["latency_us"] == pytest.approx((40.0 * 400.0) ** 0.5)
    assert g["mixmla fp8"]["gpu_us"] == pytest.approx((10.0 * 300.0) ** 0.5)
    assert (g["mixmla fp8"]["n_ok"], g["mixmla fp8"]["n_shapes"]) == (2, 2)
    assert g["mixmla auto"]["latency_us"] == pytest.approx(45.0)
    assert (g["mixmla auto"]["n_ok"], g["mixmla auto"]["n_shapes"]) == (1, 2)


def test_validate_results_accepts_good_and_flags_bad():
    res = _results()
    assert validate_results(res) == []
    bad = json.loads(json.dumps(res))
    bad["schema"] = "other"
    bad["rows"][3]["latency_us"] = bad["rows"][0]["latency_us"]  # a failing output was timed
    del bad["rows"][1]["gpu"]
    bad["rows"][0]["latency_us"]["best"] = 1e9  # best > mean
    problems = validate_results(bad)
    assert any("schema" in p for p in problems)
    assert any("row 3" in p and "failing output" in p for p in problems)
    assert any("row 1" in p and "missing" in p for p in problems)
    assert any("row 0" in p and "inconsistent" in p for p in problems)
    ok_unchecked = json.loads(json.dumps(res))
    ok_unchecked["rows"][0]["check"]["strict"]["passed"] = False
    assert any("without a passed strict check" in p for p in validate_results(ok_unchecked))


def test_format_table_contents():
    text = format_table(_results())
    lines = text.splitlines()
    assert lines[0].split()[:2] == ["shape", "impl"]
    fp8_big = next(line for line in lines if line.startswith("256x8192") and "mixmla fp8" in line)
    assert "400.0 ± 0.3" in fp8_big and "300.0" in fp8_big and "1200.00" in fp8_big
    assert "4000" in fp8_big and "100" in fp8_big  # GB/s and % of ceiling
    auto_small = next(line for line in lines if line.startswith("4x1024") and "mixmla auto" in line)
    assert "(mxfp4)" in auto_small
    assert any("check failed: strict FAIL" in line for line in lines)
    assert "only 1 of 2 shapes ok" in text
    assert "peer flashmla: not installed" in text
    assert "4000 GB/s" in text


def test_markdown_summary():
    md = format_markdown(_results())
    assert md.startswith("# mixmla bench")
    assert "**4000 GB/s**" in md
    table = [line for line in md.splitlines() if line.startswith("| 256x8192")]
    assert len(table) == 2 and all(line.count("|") == 12 for line in table)
    assert "| 300.0 | 307.0 |" in table[0]  # GPU time after the read flush, then after the write flush
    assert "| mixmla fp8 | 126.5 | 54.8 | 2/2 |" in md
    assert "flashmla: not installed" in md


def test_write_all_files_roundtrip(tmp_path):
    res = _results()
    paths = write_all(res, str(tmp_path / "out"))
    assert set(paths) == {"json", "markdown", "chart"}
    back = json.loads(open(paths["json"]).read())
    assert back["schema"] == SCHEMA and back == json.loads(json.dumps(res))
    assert validate_results(back) == []
    with open(paths["chart"], "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    assert os.path.getsize(paths["chart"]) > 10_000
    assert open(paths["markdown"]).read() == format_markdown(res)


def test_format_short_pivot():
    lines = format_short(_results()).splitlines()
    assert lines[0].split() == ["call/GPU", "us", "4x1024", "256x8192", "geomean"]
    assert lines[1].split() == ["mixmla", "fp8", "40/10", "400/300", "126/55"]
    assert lines[2].split() == ["mixmla", "auto", "45/9", "FAIL", "45/9*"]
    assert lines[3].startswith("* geomean over the shapes that passed only")
    assert lines[-1] == "HBM read ceiling 4000 GB/s"


def test_report_main_reprints_a_saved_run(tmp_path, capsys):
    paths = write_all(_results(), str(tmp_path))
    assert main([paths["json"], "--short"]) == 0
    assert "400/300" in capsys.readouterr().out
    doc = json.loads(open(paths["json"]).read())
    doc["rows"][0].pop("gpu")
    (tmp_path / "bad.json").write_text(json.dumps(doc))
    assert main([str(tmp_path / "bad.json")]) == 1


def test_chart_series_are_times_over_the_floor_and_over_the_best_peer():
    """Per shape: x floor as the row has it; x best peer against the fastest peer row of that
    shape, whatever its format; auto and paths without rows are not drawn."""
    res = _results()
    res["rows"] += [
        _ok_row(SPEC_A, "4x1024", "flashinfer", "bf16", 30.0, 20.0, 4_000_000),
        _ok_row(SPEC_A, "4x1024", "flashinfer", "fp8", 60.0, 50.0, 2_000_000),
        _ok_row(SPEC_B, "256x8192", "flashinfer", "fp8", 900.0, 600.0, 1_200_000_000),
        _ok_row(SPEC_A, "4x1024", "torch", "bf16", 90.0, 5.0, 4_000_000),  # a baseline is a peer too
    ]
    shapes, series = chart_series(res)
    assert shapes == ["4x1024", "256x8192"]
    by_label = {s["label"]: s for s in series}
    assert list(by_label) == ["mixmla fp8", "flashinfer bf16", "flashinfer fp8"]
    fp8 = by_label["mixmla fp8"]
    assert fp8["x_floor"] == pytest.approx([10.0 / (4_000_000 / 4000.0 * 1e-3), 300.0 / (1.2e9 / 4000.0 * 1e-3)])
    assert fp8["x_best_peer"] == pytest.approx([10.0 / 5.0, 300.0 / 600.0])
    assert by_label["flashinfer bf16"]["x_best_peer"] == [pytest.approx(4.0), None]


def test_chart_names_device_commit_and_date(tmp_path, monkeypatch):
    import matplotlib.figure

    res = _results()
    res["device"]["date"] = "2026-12-01T10:00:00+00:00"
    res["commit"] = "abc1234"
    titles, real = [], matplotlib.figure.Figure.suptitle
    monkeypatch.setattr(matplotlib.figure.Figure, "suptitle",
                        lambda self, t, **kw: titles.append(t) or real(self, t, **kw))
    assert write_chart(res, str(tmp_path / "c.png")) == str(tmp_path / "c.png")
    assert write_chart(res, str(tmp_path / "d.png"), commit="def5678")
    assert "NVIDIA H200" in titles[0] and "abc1234" in titles[0] and "2026-12-01" in titles[0]
    assert "def5678" in titles[1]
    assert (tmp_path / "c.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
