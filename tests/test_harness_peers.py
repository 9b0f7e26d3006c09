"""Peers and the check-before-timing gate (CPU: the plain-PyTorch peer; the others must say they
are not installed)."""

import importlib.util

import pytest
import torch

from mixmla.harness.measure import check_impl_case
from mixmla.harness.cases import Case
from mixmla.harness.ceiling import triton_read_sum
from mixmla.harness.peers import FlashInfer, FlashMLA, Impl, Prepared, TorchBaseline, Unsupported, make_impl
from mixmla.harness.verify import verify, verify_any_format

from conftest import DEVICE

SHAPES = [
    {"batchsize": 3, "qseqlen": 1, "kvseqlen": 70, "seed": 11},                 # uniform, padded bmm
    {"batchsize": 2, "qseqlen": 4, "kvseqlen": 50, "seed": 12},                 # MTP: causal window
    {"batchsize": 2, "qseqlen": 1, "kvseqlen": 40, "seed": 13, "numheads": 32},  # TP 4
    {"batchsize": 5, "qseqlen": 2, "kvseqlen": 60, "seed": 14, "ragged": 1},    # ragged, empty requests
]


@pytest.mark.parametrize("spec", SHAPES, ids=lambda s: "-".join(f"{k}{v}" for k, v in s.items()))
@pytest.mark.parametrize("fmt", ["bf16", "fp8", "mxfp4"])
def test_torch_baseline_passes_strict_check(spec, fmt):
    case = Case.generate(spec, device=DEVICE)
    row, prep = check_impl_case(TorchBaseline(), case, fmt)
    assert row["status"] == "ok", row["note"]
    assert prep is not None and row["format"] == fmt
    assert row["check"]["strict"]["rel_l2"] < 1e-2
    assert row["note"] == ("per-request loop" if spec.get("ragged") else "padded bmm")


def test_verify_any_format_identifies_the_cache_format():
    case = Case.generate({"batchsize": 2, "qseqlen": 1, "kvseqlen": 128, "seed": 5}, device=DEVICE)
    for fmt in ("bf16", "fp8", "mxfp4"):
        out = TorchBaseline().prepare(case, fmt).call()
        v = verify_any_format(out, case)
        assert v.fmt == fmt and v.strict.passed and v.loose.passed
    # The formats' references differ by far more than the strict tolerance, so the wrong one fails.
    out = TorchBaseline().prepare(case, "bf16").call()
    assert not verify(out, case, "mxfp4").strict.passed


class _Wrong(Impl):
    name = "wrong"
    formats = ("fp8",)

    def prepare(self, case, fmt):
        good = TorchBaseline().prepare(case, fmt)
        return Prepared(lambda: good.call() * 1.05, good.call, None, fmt)


class _GraphPathNeverWrites(Impl):
    """call() is right, but gpu() leaves its output buffer unwritten."""

    name = "lazy"
    formats = ("bf16",)

    def prepare(self, case, fmt):
        good = TorchBaseline().prepare(case, fmt)
        out = torch.zeros(case.total_q, case.num_heads, 512, dtype=torch.bfloat16, device=case.q.device)
        return Prepared(good.call, lambda: out, out, fmt)


class _Raises(Impl):
    name = "raises"
    formats = ("bf16",)

    def __init__(self, exc):
        self.exc = exc

    def prepare(self, case, fmt):
        raise self.exc


def test_check_gate_reports_failures_and_never_returns_them_for_timing():
    case = Case.generate({"batchsize": 2, "qseqlen": 1, "kvseqlen": 64, "seed": 9}, device=DEVICE)
    row, prep = check_impl_case(_Wrong(), case, "fp8")
    assert row["status"] == "check failed" and prep is None
    assert row["check"]["strict"]["passed"] is False and row["check"]["strict"]["rel_l2"] > 1e-2

    row, prep = check_impl_case(_GraphPathNeverWrites(), case, "bf16")
    assert row["status"] == "check failed" and prep is None and "graph-path output" in row["note"]

    row, prep = check_impl_case(_Raises(Unsupported("needs uniform Lq")), case, "bf16")
    assert (row["status"], row["note"], prep) == ("unsupported", "needs uniform Lq", None)

    row, prep = check_impl_case(_Raises(RuntimeError("boom")), case, "bf16")
    assert row["status"] == "error" and "RuntimeError: boom" in row["note"] and prep is None


@pytest.mark.skipif(importlib.util.find_spec("flashinfer") is not None, reason="flashinfer is installed here")
def test_flashinfer_reports_not_installed():
    assert FlashInfer().unavailable().startswith("not installed")


@pytest.mark.skipif(importlib.util.find_spec("flash_mla") is not None, reason="flash_mla is installed here")
def test_flashmla_reports_not_installed_and_why():
    reason = FlashMLA().unavailable()
    assert reason.startswith("not installed") and "not on PyPI" in reason


def test_make_impl():
    assert make_impl("torch").formats == ("bf16", "fp8", "mxfp4")
    assert make_impl("mixmla").formats == ("bf16", "fp8", "mxfp4", "auto")
    with pytest.raises(ValueError):
        make_impl("cudnn")


def test_triton_read_sum_matches_torch():
    # Runs compiled on a GPU, in the Triton interpreter on a CPU (conftest sets TRITON_INTERPRET).
    x = torch.randn(50_000, device=DEVICE)
    for programs, block in ((None, 1024), (3, 256), (1, 128)):
        got = triton_read_sum(x, programs=programs, block=block)
        assert got.item() == pytest.approx(x.double().sum().item(), abs=1e-2)
    with pytest.raises(ValueError):
        triton_read_sum(x.to(torch.float16))
