"""Shared pytest setup.

Without a CUDA GPU the Triton kernels can only run in the Triton interpreter, and Triton reads
TRITON_INTERPRET when a kernel is defined (at import), so it is set here, before any test module
imports mixmla.kernels. Tests marked ``gpu`` are skipped without CUDA.
"""

from __future__ import annotations

import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip_gpu = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip_gpu)
