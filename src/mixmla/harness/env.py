"""Where we run: CUDA or not, and what the device and the software are."""

from __future__ import annotations

import datetime
import os
import platform
import subprocess

__all__ = ["has_cuda", "device_info", "source_commit"]


def has_cuda() -> bool:
    """True when torch sees a CUDA device."""
    import torch

    return bool(torch.cuda.is_available())


def device_info(device=None) -> dict:
    """Name, SM count, memory (GiB) of the CUDA device (or ``"cpu"``), torch / triton / CUDA /
    python versions and the date, for results.json."""
    import torch

    info = {"torch": torch.__version__, "python": platform.python_version(),
            "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds")}
    try:
        import triton

        info["triton"] = triton.__version__
    except ImportError:
        info["triton"] = None
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(device or torch.cuda.current_device())
        info.update(name=props.name, sm_count=props.multi_processor_count,
                    memory_gib=round(props.total_memory / 2**30, 1), cuda=torch.version.cuda,
                    capability=f"{props.major}.{props.minor}")
    else:
        from .. import interpreter

        info.update(name="cpu (no CUDA GPU)", interpreter=interpreter.active())
    return info


def source_commit() -> str | None:
    """The git commit (short hash, ``+`` when the work tree has changes) of the checkout mixmla is
    imported from, or None when it is not a git checkout. ``MIXMLA_SOURCE_COMMIT`` in the
    environment overrides it, for a copy of the tree whose .git is not the one it came from."""
    forced = os.environ.get("MIXMLA_SOURCE_COMMIT")
    if forced:
        return forced
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=here, capture_output=True, text=True,
                              timeout=10)
        if head.returncode != 0:
            return None
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=here,
                               capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return head.stdout.strip() + ("+" if dirty else "")
