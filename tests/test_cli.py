"""The ``mixmla`` dispatcher and ``mixmla test``.

``mixmla test`` is exercised with implementations made here (``--impl module:function``): the
exact reference must pass, and implementations that are wrong in the ways a kernel can be wrong
(zeros, NaN, unwritten output, a crash, an off-by-one causal window) must fail with a nonzero
exit status.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from mixmla import cli
from mixmla.harness import selftest

SRC = str(Path(__file__).resolve().parents[1] / "src")

IMPLEMENTATIONS = '''
import torch
from mixmla.reference import mla_decode_reference

def exact(q, cache, kv_indptr, qo_indptr=None, sm_scale=None):
    return mla_decode_reference(q, cache, kv_indptr, qo_indptr, sm_scale)[0].to(torch.bfloat16)

def with_lse(q, cache, kv_indptr, qo_indptr=None, sm_scale=None):
    out, lse = mla_decode_reference(q, cache, kv_indptr, qo_indptr, sm_scale)
    return out.to(torch.bfloat16), lse.float()

def zeros(q, cache, kv_indptr, qo_indptr=None, sm_scale=None):
    return torch.zeros(q.shape[0], q.shape[1], 512, dtype=torch.bfloat16)

def one_nan(q, cache, kv_indptr, qo_indptr=None, sm_scale=None):
    out = exact(q, cache, kv_indptr, qo_indptr, sm_scale)
    out[0, 0, 0] = float("nan")
    return out

def writes_nothing(q, cache, kv_indptr, qo_indptr=None, sm_scale=None, out=None):
    return out

def writes_into_out(q, cache, kv_indptr, qo_indptr=None, sm_scale=None, out=None):
    out.copy_(exact(q, cache, kv_indptr, qo_indptr, sm_scale))
    return out

def crashes(q, cache, kv_indptr, qo_indptr=None, sm_scale=None):
    raise RuntimeError("kernel exploded")

def sees_one_row_too_many(q, cache, kv_indptr, qo_indptr=None, sm_scale=None):
    # Wrong causal window: every request's last query token also sees the next request's first row.
    grown = kv_indptr.clone()
    grown[1:-1] += 1
    return mla_decode_reference(q, cache, grown, qo_indptr, sm_scale)[0].to(torch.bfloat16)
'''

SPECS = "# tiny shapes\nbatchsize: 2; qseqlen: 1; kvseqlen: 16; seed: 1\n\nbatchsize: 2; qseqlen: 2; kvseqlen: 8; seed: 2; numheads: 32\n"


@pytest.fixture
def impls(tmp_path, monkeypatch):
    (tmp_path / "fake_impls.py").write_text(IMPLEMENTATIONS)
    monkeypatch.syspath_prepend(str(tmp_path))
    spec = tmp_path / "specs.txt"
    spec.write_text(SPECS)
    return spec


def run_test(capsys, *args):
    status = cli.main(["test", "--plain", *args])
    return status, capsys.readouterr()


def test_top_level_help_lists_every_subcommand(capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["--help"])
    assert e.value.code == 0
    text = capsys.readouterr().out
    for name in ("test", "bench", "eval", "TRITON_INTERPRET", "kvseqlen"):
        assert name in text


def test_no_subcommand_prints_help_and_fails(capsys):
    assert cli.main([]) == 2
    assert "subcommands" in capsys.readouterr().out


def test_unknown_subcommand_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["frobnicate"])
    assert e.value.code == 2


def test_subcommand_help_comes_from_the_subcommand(capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["test", "--help"])
    assert e.value.code == 0
    text = capsys.readouterr().out
    assert "mixmla test" in text and "--impl" in text and "relative L2" in text


def test_missing_subcommand_module_is_reported_not_raised(capsys, monkeypatch):
    monkeypatch.setitem(cli.COMMANDS, "ghost", ("mixmla.no_such_module:main", "nothing"))
    assert cli.main(["ghost"]) == 2
    assert "not available" in capsys.readouterr().err


def test_every_registered_subcommand_points_at_a_main():
    for name, (target, summary) in cli.COMMANDS.items():
        module, _, function = target.partition(":")
        assert module.startswith("mixmla.") and function == "main" and summary


def test_exact_reference_passes(impls, capsys):
    status, captured = run_test(capsys, str(impls), "--impl", "reference")
    assert status == 0
    out = captured.out
    assert out.count("PASS") == 6 and "FAIL" not in out
    assert "6 passed, 0 failed, 0 skipped" in out


@pytest.mark.parametrize("impl", ["fake_impls:exact", "fake_impls:with_lse", "fake_impls:writes_into_out"])
def test_correct_implementations_pass(impls, capsys, impl):
    status, captured = run_test(capsys, str(impls), "--impl", impl)
    assert status == 0, captured.out


@pytest.mark.parametrize(
    "impl, expected",
    [
        ("fake_impls:zeros", "FAIL"),
        ("fake_impls:one_nan", "NaN/Inf"),
        ("fake_impls:writes_nothing", "NaN/Inf"),  # the poisoned buffer was returned untouched
        ("fake_impls:crashes", "kernel exploded"),
        ("fake_impls:sees_one_row_too_many", "strict FAIL"),
    ],
)
def test_wrong_implementations_fail(impls, capsys, impl, expected):
    status, captured = run_test(capsys, str(impls), "--impl", impl)
    assert status == 1
    assert expected in captured.out


def test_formats_option(impls, capsys):
    status, captured = run_test(capsys, str(impls), "--impl", "reference", "--formats", "mxfp4")
    assert status == 0 and "2 passed" in captured.out
    assert " bf16 " not in captured.out
    status, captured = run_test(capsys, str(impls), "--impl", "reference", "--formats", "int4")
    assert status == 2


def test_large_shapes_are_skipped_and_nothing_checked_fails(impls, capsys):
    status, captured = run_test(capsys, str(impls), "--impl", "reference", "--max-kv-tokens", "20")
    assert status == 0
    assert "3 passed, 0 failed, 3 skipped" in captured.out  # 2x16 = 32 tokens > 20; 2x8 = 16 ran
    status, captured = run_test(capsys, str(impls), "--impl", "reference", "--max-kv-tokens", "1")
    assert status == 1 and "nothing was checked" in captured.err


def test_bad_spec_file_is_reported(tmp_path, capsys):
    bad = tmp_path / "bad.txt"
    bad.write_text("batchsize: 2; qseqlen: 1\n")
    status, captured = run_test(capsys, str(bad), "--impl", "reference")
    assert status == 2 and "bad.txt:1" in captured.err
    status, captured = run_test(capsys, str(tmp_path / "missing.txt"), "--impl", "reference")
    assert status == 2


def test_auto_falls_back_to_the_reference_when_the_api_is_missing(monkeypatch):
    monkeypatch.setitem(sys.modules, "mixmla.api", None)  # makes "import mixmla.api" fail
    fn, description = selftest.resolve_implementation("auto")
    assert fn is selftest._reference_implementation and "FALLBACK" in description
    with pytest.raises(RuntimeError, match="not available"):
        selftest.resolve_implementation("api")
    with pytest.raises(ValueError):
        selftest.resolve_implementation("nonsense")


def _interpreter_after_import(env_value):
    """TRITON_INTERPRET as the child sees it after ``import mixmla`` (with the variable unset when
    ``env_value`` is None), and whether Triton then defines kernels for its interpreter."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    if env_value is not None:
        env["TRITON_INTERPRET"] = env_value
    env["PYTHONPATH"] = SRC + os.pathsep + env.get("PYTHONPATH", "")
    code = ("import os, mixmla, triton.runtime.interpreter as i; from mixmla.kernels.triton import decode; "
            "print(os.environ.get('TRITON_INTERPRET'), isinstance(decode.mla_decode_kernel, i.InterpretedFunction))")
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return result.stdout.split()


@pytest.mark.skipif(torch.cuda.is_available(), reason="the switch acts only without CUDA")
def test_importing_mixmla_without_cuda_turns_the_interpreter_on():
    assert _interpreter_after_import(None) == ["1", "True"]


def test_an_explicit_triton_interpret_setting_is_respected():
    assert _interpreter_after_import("0") == ["0", "False"]


def test_python_dash_m_mixmla_runs_the_reference_without_the_variable(tmp_path):
    spec = tmp_path / "one.txt"
    spec.write_text("batchsize: 1; qseqlen: 1; kvseqlen: 8; seed: 3\n")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = SRC + os.pathsep + env.get("PYTHONPATH", "")
    result = subprocess.run([sys.executable, "-m", "mixmla", "test", str(spec), "--impl", "reference", "--plain"],
                            env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "3 passed, 0 failed" in result.stdout
    if not torch.cuda.is_available():
        assert "TRITON_INTERPRET=1" in result.stdout


def test_selftest_module_documents_its_contract():
    text = textwrap.dedent(selftest.build_parser().format_help())
    assert "loose" in text and "strict" in text and "numheads" in text and "ragged" in text


def test_selftest_help_prints_percent_signs_once(capsys):
    """argparse formats help strings, not the description: a doubled percent sign there prints twice."""
    with pytest.raises(SystemExit):
        cli.main(["test", "--help"])
    text = capsys.readouterr().out
    assert "but 5% of the elements" in " ".join(text.split()) and "%%" not in text
