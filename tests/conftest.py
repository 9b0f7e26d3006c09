"""Shared pytest setup and the helpers several test files use.

Importing ``mixmla`` here, before any test module imports Triton, is what makes the kernels run in
Triton's interpreter on a machine without a CUDA GPU (``mixmla.interpreter``). Tests marked
``gpu`` are skipped without CUDA. Test modules import the constants and builders below with
``from conftest import ...``.
"""

from __future__ import annotations

import sys
import types

import pytest
import torch

import mixmla  # noqa: F401  (the interpreter switch, before anything imports Triton)

#: Where unmarked tests run: the GPU when there is one, else CPU tensors under the interpreter.
DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")
ON_GPU = DEVICE.type == "cuda"
#: The cache formats, in the order tests parametrize over them.
FORMATS = ("bf16", "fp8", "mxfp4")


def indptr(lens, dtype=torch.int32, device=DEVICE) -> torch.Tensor:
    """Prefix sums ``[0, lens[0], lens[0] + lens[1], ...]`` as a (len(lens)+1,) tensor."""
    ptr = [0]
    for n in lens:
        ptr.append(ptr[-1] + int(n))
    return torch.tensor(ptr, dtype=dtype, device=device)


def poisoned_out(total_q: int, num_heads: int, device=DEVICE) -> torch.Tensor:
    """An output buffer (total_q, H, 512) bf16 filled with NaN, so an element a kernel leaves
    unwritten fails the strict check."""
    return torch.full((total_q, num_heads, 512), float("nan"), dtype=torch.bfloat16, device=device)


def stand_in_gluon_backend(monkeypatch, backend) -> None:
    """Make ``backend`` what the backend registry loads as the Gluon backend for this test (its
    module in ``sys.modules``, as ``kernels.backend`` looks it up there first)."""
    module = types.ModuleType("mixmla.kernels.gluon.backend")
    module.BACKEND = backend
    monkeypatch.setitem(sys.modules, "mixmla.kernels.gluon.backend", module)


def compile_in_child(script: str, cases: list) -> list[dict]:
    """Run ``script`` (Python source reading ``json.loads(sys.argv[1])`` and printing one JSON row
    per line) with ``cases`` in a child process where Triton compiles for real (TRITON_INTERPRET=0
    and this checkout's src/ first on the path); returns the rows. Skips the test when nothing
    came back (no compiler here), with the child's last words."""
    import json
    import os
    import subprocess
    import sys

    root = os.path.join(os.path.dirname(__file__), "..")
    env = dict(os.environ, TRITON_INTERPRET="0",
               PYTHONPATH=os.pathsep.join([os.path.join(root, "src"), os.environ.get("PYTHONPATH", "")]))
    run = subprocess.run([sys.executable, "-c", script, json.dumps(cases)], capture_output=True, text=True, env=env,
                         timeout=900)
    rows = [json.loads(line) for line in run.stdout.splitlines()]
    if not rows:
        pytest.skip(f"cannot compile for sm_90 here: {run.stderr[-300:]}")
    return rows


@pytest.fixture(autouse=True)
def _no_remembered_call():
    """Every test starts with no remembered ``mla_decode`` or ``plan`` call (``api._LAST_DECODE``,
    ``api._LAST_PLAN``), so that one whose tensors happen to reuse an earlier test's addresses
    still runs, and counts, its own checks and plans."""
    from mixmla import api

    api._LAST_DECODE = api._LAST_PLAN = None


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip_gpu = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip_gpu)
