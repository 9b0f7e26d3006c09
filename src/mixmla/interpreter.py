"""Triton's CPU interpreter: the one flag that says whether kernels run in it, and the one place
that turns it on.

The flag is Triton's own environment variable, ``TRITON_INTERPRET``. Triton reads it when a
``@triton.jit`` function is defined, and its own library functions are defined when ``triton`` is
first imported, so the variable must be set before that. Importing ``mixmla`` does it
(:func:`use_without_cuda`) before any of its modules import Triton: on a machine without a CUDA GPU
the kernels then run in the interpreter unless the environment already chose otherwise. Code that
imports Triton before ``mixmla`` must set the variable itself.
"""

from __future__ import annotations

import os

VARIABLE = "TRITON_INTERPRET"
_TRUE = ("1", "true", "on")  # the values Triton's getenv_bool accepts, case-insensitively


def active() -> bool:
    """True when ``TRITON_INTERPRET`` asks for the interpreter (read as Triton reads it)."""
    return os.environ.get(VARIABLE, "").strip().lower() in _TRUE


def use_without_cuda() -> None:
    """Set ``TRITON_INTERPRET=1`` when torch sees no CUDA device and the variable is unset."""
    import torch

    if not torch.cuda.is_available():
        os.environ.setdefault(VARIABLE, "1")
