"""``mixmla bench --dcp`` on a CPU: as a group of one in this process, and under torchrun with two
gloo processes (slow). The checks and the files are what the GPU run produces; the times are the
interpreter's and are only required to be there."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from mixmla.harness import bench


def _doc(out_dir):
    with open(os.path.join(out_dir, "dcp.json")) as f:
        return json.load(f)


def test_a_group_of_one_checks_and_times_every_schedule(tmp_path):
    rc = bench.main(["--dcp", "--shape", "2,1,40", "--paths", "fp8", "--out", str(tmp_path)])
    assert rc == 0
    doc = _doc(tmp_path)
    assert doc["world_size"] == 1 and doc["backend"] == ("nccl" if torch.cuda.is_available() else "gloo")
    assert [(r["format"], r["schedule"], r["status"]) for r in doc["rows"]] == \
        [("fp8", "allgather", "ok"), ("fp8", "reduce_scatter", "ok")]
    for r in doc["rows"]:
        c = r["check"]
        assert c["passed"] and c["same_bytes_on_every_rank"] and c["strict"]["passed"]
        assert c["merge_err_over_bound"] <= 1.0 and c["lse_err_vs_one_gpu"] <= 1e-5
        assert r["local_tokens"] == [80] and r["step_us"] > 0 and r["one_gpu_us"] > 0
        assert set(r["step_stages_us"]) == {"decode", "comm", "merge"} and len(r["decode_us"]) == 1
    assert "| 2x40 | fp8 | allgather | ok |" in (tmp_path / "dcp.md").read_text()


@pytest.mark.parametrize("argv, message", [
    (["--paths", "auto"], "names no cache format"),
    (["--schedules", "ring"], "unknown schedule ring"),
    (["--interleave", "0"], "--interleave >= 1"),
])
def test_bad_options_exit_2(argv, message, capsys, tmp_path):
    assert bench.main(["--dcp", "--shape", "1,1,8", "--out", str(tmp_path)] + argv) == 2
    assert message in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.skipif(torch.cuda.is_available(), reason="two gloo processes on CPU; bench/run_dcp_h200.sh on GPUs")
def test_under_torchrun_with_two_processes(tmp_path):
    root = os.path.join(os.path.dirname(__file__), "..")
    env = dict(os.environ, TRITON_INTERPRET="1",
               PYTHONPATH=os.pathsep.join([os.path.join(root, "src"), os.environ.get("PYTHONPATH", "")]))
    run = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "-m", "mixmla",
                          "bench", "--dcp", "--shape", "3,1,70", "--paths", "mxfp4", "--interleave", "64",
                          "--check-only", "--out", str(tmp_path)], capture_output=True, text=True, env=env,
                         timeout=600)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    doc = _doc(tmp_path)
    assert doc["world_size"] == 2 and all(r["check"]["passed"] for r in doc["rows"])
    assert doc["rows"][0]["local_tokens"] == [192, 18]  # 3 requests of 70 tokens: 64 each on rank 0, 6 on rank 1
