"""`mixmla bench` without a GPU (the interpreter demo) and `mixmla eval` with submission files."""

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from mixmla.harness.evaluate import SubmissionError, load_submission, main as eval_main
from mixmla.harness.report import validate_results

SRC = str(Path(__file__).resolve().parents[1] / "src")


def _run_cli(args, tmp_path, timeout=120):
    env = dict(os.environ, PYTHONPATH=SRC + os.pathsep + os.environ.get("PYTHONPATH", ""), CUDA_VISIBLE_DEVICES="")
    env.pop("TRITON_INTERPRET", None)  # the command must set it itself
    return subprocess.run([sys.executable, "-m", "mixmla", *args], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=timeout)


def test_bench_without_gpu_runs_the_interpreter_demo(tmp_path):
    t0 = time.perf_counter()
    proc = _run_cli(["bench", "--shape", "2,1,48", "--out", "demo"], tmp_path)
    elapsed = time.perf_counter() - t0
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert elapsed < 60
    assert "no CUDA GPU found" in proc.stdout and "TRITON_INTERPRET=1" in proc.stdout
    doc = json.loads((tmp_path / "demo" / "results.json").read_text())
    assert validate_results(doc) == []
    assert doc["mode"] == "cpu-demo" and doc["ceiling"] is None
    labels = {r["label"]: r for r in doc["rows"]}
    expected = {f"mixmla {p}" for p in ("bf16", "fp8", "mxfp4", "auto")} | {f"torch {f}" for f in ("bf16", "fp8", "mxfp4")}
    assert set(labels) == expected
    for label, row in labels.items():
        assert row["status"] == "ok", (label, row["note"])
        assert row["check"]["strict"]["passed"] and row["check"]["strict"]["rel_l2"] < 1e-2
        assert row["shape"]["kvseqlen"] == 48 and row["latency_us"] is None  # nothing is timed on a CPU
    assert labels["mixmla fp8"]["bytes"] == 2 * 48 * 576 + 2 * 16 * (576 + 512) * 2
    assert not doc["peers"]["flashmla"]["available"] and doc["peers"]["torch"]["available"]
    assert (tmp_path / "demo" / "summary.md").read_text().startswith("# mixmla bench")


def test_bench_rejects_unknown_path(tmp_path):
    proc = _run_cli(["bench", "--paths", "bf16,int4"], tmp_path)
    assert proc.returncode == 2 and "unknown path int4" in proc.stderr


# ---------------------------------------------------------------------------------------------- eval
SPECS = "batchsize: 2; qseqlen: 1; kvseqlen: 40; seed: 3\nbatchsize: 1; qseqlen: 2; kvseqlen: 33; seed: 4\n"

GOOD = """
from task import input_t, output_t
import torch
from mixmla.reference import mla_decode_reference

SEEN = []

def custom_kernel(data: input_t) -> output_t:
    q, kv, qo, kvp, cfg = data
    SEEN.append(float(q.float().sum()))
    out, _ = mla_decode_reference(q, kv["fp8"], kvp, qo, cfg["sm_scale"], compute_dtype=torch.float32)
    return out.to(torch.bfloat16)
"""

# Right for its first three calls, then wrong: only a re-check of timed outputs can catch it.
DRIFTS = GOOD.replace("return out.to(torch.bfloat16)",
                      "return (out * (1.0 if len(SEEN) <= 3 else 1.2)).to(torch.bfloat16)")


def _write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(textwrap.dedent(text))
    return str(p)


def test_load_submission_from_file(tmp_path):
    path = _write(tmp_path, "my-kernel.py", GOOD)
    fn, name = load_submission(path)
    assert callable(fn) and name == "my-kernel.py" and fn.__module__ == "mixmla_submission_my_kernel"
    with pytest.raises(SubmissionError, match="no callable custom_kernel"):
        load_submission(_write(tmp_path, "empty.py", "x = 1\n"))
    with pytest.raises(SubmissionError, match="importing .* failed: ZeroDivisionError"):
        load_submission(_write(tmp_path, "broken.py", "1 / 0\n"))
    with pytest.raises(SubmissionError, match="not found"):
        load_submission(str(tmp_path / "missing.py"))


def test_eval_test_mode_good_and_bad(tmp_path, capsys):
    specs = _write(tmp_path, "specs.txt", SPECS)
    out_json = str(tmp_path / "r.json")
    assert eval_main(["test", specs, "--submission", _write(tmp_path, "good.py", GOOD), "--json", out_json]) == 0
    doc = json.loads(open(out_json).read())
    assert [r["passed"] for r in doc["results"]] == [True, True]
    assert all(r["format"] == "fp8" and r["strict"]["rel_l2"] < 1e-2 and r["loose"]["passed"] for r in doc["results"])
    bad = GOOD.replace("return out.to(torch.bfloat16)", "return (out * 0.9).to(torch.bfloat16)")
    assert eval_main(["test", specs, "--submission", _write(tmp_path, "bad.py", bad)]) == 1
    text = capsys.readouterr().out
    # a 10% error passes the original loose rule but not the strict one
    assert "loose pass" in text and "strict FAIL" in text and "0 of 2 specs passed" in text


def test_eval_leaderboard_regenerates_and_rechecks(tmp_path):
    specs = _write(tmp_path, "specs.txt", SPECS.splitlines()[0] + "\n")
    path = _write(tmp_path, "good_lb.py", GOOD)
    out_json = str(tmp_path / "lb.json")
    assert eval_main(["leaderboard", specs, "--submission", path, "--max-count", "4", "--json", out_json]) == 0
    seen = sys.modules["mixmla_submission_good_lb"].SEEN
    doc = json.loads(open(out_json).read())
    timing = doc["results"][0]["timing"]
    assert 3 <= timing["n"] <= 4 and timing["best"] <= timing["mean"] <= timing["worst"]
    assert len(seen) == 1 + timing["n"] and len(set(seen)) == len(seen)  # every timed call on fresh inputs
    assert doc["geomean_us"] == pytest.approx(timing["mean"])

    path = _write(tmp_path, "drift_lb.py", DRIFTS)
    assert eval_main(["leaderboard", specs, "--submission", path, "--max-count", "6", "--json", out_json]) == 1
    res = json.loads(open(out_json).read())["results"][0]
    assert not res["passed"] and "re-check failed on timed call 3" in res["error"]


def test_eval_benchmark_reuses_inputs_and_does_not_recheck(tmp_path):
    specs = _write(tmp_path, "specs.txt", SPECS.splitlines()[0] + "\n")
    path = _write(tmp_path, "drift_bm.py", DRIFTS)
    assert eval_main(["benchmark", specs, "--submission", path, "--max-count", "5"]) == 0
    seen = sys.modules["mixmla_submission_drift_bm"].SEEN
    assert len(set(seen)) == 1 and len(seen) >= 1 + 2 + 3  # check, warm-up, >= min_count timed calls


def test_eval_bad_specfile(tmp_path, capsys):
    specs = _write(tmp_path, "specs.txt", "batchsize: 2; qseqlen: 1\n")
    assert eval_main(["test", specs, "--submission", _write(tmp_path, "g.py", GOOD)]) == 2
    assert "lacks kvseqlen, seed" in capsys.readouterr().err


def test_eval_defaults_to_our_kernel(tmp_path, capsys):
    specs = _write(tmp_path, "specs.txt", SPECS)
    assert eval_main(["test", specs]) == 0
    out = capsys.readouterr().out
    assert "mixmla.api.custom_kernel on 2 spec(s)" in out and "2 of 2 specs passed" in out


# A ragged spec whose first batch has more cached tokens than the later, freshly generated ones of
# leaderboard mode (seed + 13 per call): all of one config, so they share a cached plan.
RAGGED = "batchsize: 4; qseqlen: 1; kvseqlen: 40; seed: 5; ragged: 1\n"


def test_eval_leaderboard_of_a_ragged_spec_with_our_kernel(tmp_path):
    from mixmla.inputs import generate_from_spec

    spec = {"batchsize": 4, "qseqlen": 1, "kvseqlen": 40, "seed": 5, "ragged": 1}
    totals = [int(generate_from_spec(dict(spec, seed=5 + 13 * i))[3][-1]) for i in range(4)]
    assert max(totals[1:]) < totals[0], totals  # the case that rejected valid batches
    out_json = str(tmp_path / "lb.json")
    assert eval_main(["leaderboard", _write(tmp_path, "ragged.txt", RAGGED), "--max-count", "3",
                      "--json", out_json]) == 0
    res = json.loads(open(out_json).read())["results"][0]
    assert res["passed"] and res["error"] is None and res["timing"]["n"] == 3


def test_eval_on_the_cpu_skips_specs_over_the_cap_and_says_so(tmp_path, capsys):
    specs = _write(tmp_path, "specs.txt", SPECS.splitlines()[0] + "\nbatchsize: 2; qseqlen: 1; kvseqlen: 4096; seed: 9\n")
    out_json = str(tmp_path / "r.json")
    assert eval_main(["test", specs, "--submission", _write(tmp_path, "g.py", GOOD), "--json", out_json]) == 0
    text = capsys.readouterr().out
    assert "only specs with at most 4096 cached tokens are run on the CPU" in text
    assert "SKIPPED 8192 cached tokens > 4096 (--max-kv-tokens)" in text
    assert "1 of 1 specs passed both checks" in text and "; 1 skipped" in text
    first, second = json.loads(open(out_json).read())["results"]
    assert first["passed"] and first["skipped"] is None
    assert not second["passed"] and "8192 cached tokens" in second["skipped"] and second["strict"] is None
    # every spec over the cap: nothing ran, which is not a pass
    assert eval_main(["test", specs, "--submission", _write(tmp_path, "g2.py", GOOD), "--max-kv-tokens", "10"]) == 1
    captured = capsys.readouterr()
    assert "0 of 0 specs passed" in captured.out and "nothing was run" in captured.err


def test_eval_reports_each_spec_as_it_starts_and_what_runs(tmp_path, capsys, monkeypatch):
    """A log shows each spec's line before its (slow, on a CPU) run; the live line is told every
    phase: inputs, the checked call, each timed call."""
    from mixmla.harness import evaluate

    phases = []

    class Recording(evaluate.Progress):
        def describe(self, text):
            phases.append(text)

    monkeypatch.setattr(evaluate, "Progress", Recording)
    path = _write(tmp_path, "g3.py", GOOD)
    assert eval_main(["benchmark", _write(tmp_path, "specs.txt", SPECS), "--submission", path, "--max-count", "3"]) == 0
    text = capsys.readouterr().out
    heads = [text.index(f"[{i}/2] {line}") for i, line in enumerate(SPECS.splitlines(), 1)]
    assert heads[0] < text.index("loose pass") < heads[1]
    for label in ("[1/2] b2 q1 kv40 h16 s3", "[2/2] b1 q2 kv33 h16 s4"):
        mine = [p[len(label) + 2:] for p in phases if p.startswith(label + ": ")]
        assert mine == ["inputs and references", "checked call", "warm-up", "timed call 1", "timed call 2",
                        "timed call 3"], phases
