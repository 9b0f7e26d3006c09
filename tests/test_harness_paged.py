"""``mixmla bench --paged`` (harness/paged.py): which specs it runs, the paged/contiguous table,
and its CPU smoke run (the interpreter demo: paged paths checked, append_kv's bits checked)."""

from __future__ import annotations

import json

from mixmla.harness import bench
from mixmla.harness.paged import format_ratios, paged_ratios, paged_specs
from mixmla.harness.report import make_row


def test_paged_specs_follow_each_shape():
    specs = paged_specs([{"batchsize": 4, "kvseqlen": 64}, {"batchsize": 2, "kvseqlen": 8}])
    assert [s.get("page_size") for s in specs] == [None, 1, 64, None, 1, 64]
    assert specs[1]["batchsize"] == 4 and specs[4]["batchsize"] == 2


def test_ratios_divide_by_the_same_shape_and_format():
    def row(spec, path, us):
        r = make_row(spec, "x", "mixmla", path)
        r["gpu"] = {"median_us": us}
        return r

    base = {"batchsize": 4, "qseqlen": 1, "kvseqlen": 64, "seed": 1}
    rows = [row(base, "bf16", 10.0), row(base, "fp8", 8.0), row(dict(base, page_size=64), "bf16", 10.5),
            row(dict(base, page_size=1), "fp8", 8.8), row(dict(base, kvseqlen=128, page_size=1), "fp8", 3.0)]
    ratios = paged_ratios(rows)
    assert [(r["format"], r["page_size"], r["ratio"]) for r in ratios] == [
        ("bf16", 64, 1.05), ("fp8", 1, 1.1), ("fp8", 1, None)]
    assert rows[2]["label"] == "mixmla bf16 p64", "paged rows are labelled apart, so geomeans do not mix layouts"
    assert "1.050" in format_ratios(ratios)


def test_paged_bench_smoke_on_cpu(tmp_path, capsys):
    status = bench.main(["--paged", "--peers", "none", "--paths", "bf16,mxfp4", "--out", str(tmp_path)])
    assert status == 0
    doc = json.loads((tmp_path / "results.json").read_text())
    pages = sorted({r["shape"].get("page_size", 0) for r in doc["rows"]})
    assert pages == [0, 1, 64] and all(r["status"] == "ok" for r in doc["rows"])
    assert [r["status"] for r in doc["paged"]["append_kv"]] == ["ok"] * 3
    assert "append_kv" in capsys.readouterr().out
