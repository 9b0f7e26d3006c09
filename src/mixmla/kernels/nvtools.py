"""The NVIDIA tools that ship inside Triton's wheel (``ptxas``, ``cuobjdump``), run on any machine.

Kernel screening without a GPU reads compiled kernels through them: registers and spills from
``ptxas -v``, SASS and resource usage from ``cuobjdump``. Both paths' compile checks
(``kernels/triton/compile.py``, ``kernels/gluon/sass.py``) call them from here, so the tools are
found and run one way.
"""

from __future__ import annotations

import os
import subprocess
import tempfile


def tool(name: str) -> str:
    """Path of Triton's bundled NVIDIA tool ``name`` (e.g. ``"ptxas"``, ``"cuobjdump"``)."""
    import triton

    return os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", name)


def cuobjdump(cubin: bytes, *flags: str) -> str:
    """What ``cuobjdump FLAGS`` prints for ``cubin`` (a compiled kernel's ``asm["cubin"]``)."""
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "kernel.cubin")
        with open(path, "wb") as f:
            f.write(cubin)
        return subprocess.run([tool("cuobjdump"), *flags, path], capture_output=True, text=True, check=True).stdout


def ptxas_verbose(ptx: str, arch: str = "sm_90a") -> str:
    """What ``ptxas -v`` reports (its stderr: registers, spill bytes, shared memory) for ``ptx``."""
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "kernel.ptx")
        with open(path, "w") as f:
            f.write(ptx)
        return subprocess.run([tool("ptxas"), "-v", "--gpu-name", arch, path, "-o", os.devnull], capture_output=True,
                              text=True, check=True).stderr
