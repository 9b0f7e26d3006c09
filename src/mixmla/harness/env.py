"""Where we run: CUDA or not, what the device is, and running under the Triton interpreter on a CPU."""

from __future__ import annotations

import datetime
import os
import platform
import subprocess
import sys

__all__ = ["has_cuda", "device_info", "interpreter_on", "ensure_interpreter"]


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
        info.update(name="cpu (no CUDA GPU)", interpreter=interpreter_on())
    return info


def interpreter_on() -> bool:
    """True when TRITON_INTERPRET asks for the Triton interpreter."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def ensure_interpreter(module: str, argv: list[str]) -> int | None:
    """Make sure Triton kernels will run in the interpreter on this CPU-only machine.

    TRITON_INTERPRET must be set before the kernels are defined (``mixmla.kernels`` imported). If
    it is set, or nothing of ours with kernels is imported yet (then it is set now), returns None:
    carry on in this process. Otherwise runs ``python -m module argv`` with it set and returns
    that exit status.
    """
    if interpreter_on():
        return None
    if not any(m == "mixmla.api" or m.startswith("mixmla.kernels") for m in sys.modules):
        os.environ["TRITON_INTERPRET"] = "1"
        return None
    env = dict(os.environ, TRITON_INTERPRET="1")
    return subprocess.call([sys.executable, "-m", module, *argv], env=env)
