"""Facts about a compiled Hopper kernel read from its PTX and SASS, without a GPU.

Used by the CPU test suite (tests/test_hopper_compile.py) and by kernel work: registers and local
memory from ptxas, the matrix instructions in the PTX, and whether any local-memory traffic (a
spill) sits inside the kernel's tile loop (``hot_loop``).
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
from collections import Counter
from dataclasses import dataclass


def _bin(name: str) -> str:
    import triton
    return os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", name)


@dataclass(frozen=True)
class KernelFacts:
    """registers: per thread; spill_bytes: ptxas spill stores; shared: bytes of dynamic shared
    memory; wgmma: wgmma.mma_async instructions in the PTX; loop_instructions: SASS instructions in
    the hot loop; loop_local: local-memory instructions (STL/LDL) in it; loop_ops: its opcodes."""

    registers: int
    spill_bytes: int
    shared: int
    wgmma: int
    loop_instructions: int
    loop_local: int
    loop_ops: Counter


def _sass_instructions(cubin: bytes) -> list[tuple[int, str]]:
    with tempfile.NamedTemporaryFile(suffix=".cubin", delete=False) as f:
        f.write(cubin)
    try:
        sass = subprocess.run([_bin("cuobjdump"), "-sass", f.name], capture_output=True, text=True, check=True).stdout
    finally:
        os.unlink(f.name)
    out = []
    for line in sass.splitlines():
        m = re.match(r"\s+/\*([0-9a-f]+)\*/\s+(.*?);", line)
        if m:
            out.append((int(m.group(1), 16), m.group(2).strip()))
    return out


def hot_loop(instructions: list[tuple[int, str]]) -> list[str]:
    """The instructions of the innermost loop (target .. backward branch) that holds the most
    matrix instructions (HGMMA) of a SASS listing: the kernel's tile loop."""
    index = {addr: i for i, (addr, _) in enumerate(instructions)}
    best, best_key = (0, -1), (0, 0)
    for i, (addr, text) in enumerate(instructions):
        m = re.search(r"BRA\s+(0x[0-9a-f]+)", text)
        if m:
            target = int(m.group(1), 16)
            if target < addr and target in index:
                body = instructions[index[target]:i + 1]
                key = (sum("HGMMA" in t for _, t in body), -len(body))
                if key > best_key:
                    best, best_key = (index[target], i), key
    return [text for _, text in instructions[best[0]:best[1] + 1]]


def kernel_facts(kernel) -> KernelFacts:
    """Facts of a ``CompiledKernel`` (from ``compile.compile_decode``)."""
    ptx = kernel.asm["ptx"]
    with tempfile.NamedTemporaryFile("w", suffix=".ptx", delete=False) as f:
        f.write(ptx)
    try:
        r = subprocess.run([_bin("ptxas"), "-v", "--gpu-name", "sm_90a", f.name, "-o", os.devnull], capture_output=True,
                           text=True, check=True)
    finally:
        os.unlink(f.name)
    regs = int(re.findall(r"Used (\d+) registers", r.stderr)[-1])
    spills = int(re.findall(r"(\d+) bytes spill stores", r.stderr)[-1])
    loop = hot_loop(_sass_instructions(kernel.asm["cubin"]))
    ops = Counter(re.sub(r"^@!?U?P\w+\s+", "", t).split()[0].split(".")[0] for t in loop)
    return KernelFacts(regs, spills, kernel.metadata.shared, ptx.count("wgmma.mma_async"), len(loop),
                       ops["STL"] + ops["LDL"], ops)
