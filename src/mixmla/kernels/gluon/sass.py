"""Facts about a compiled Hopper kernel read from its PTX and SASS, without a GPU.

Used by the CPU test suite (tests/test_hopper_compile.py) and by kernel work: registers and local
memory from ptxas, the matrix instructions in the PTX, and whether any local-memory traffic (a
spill) sits inside the kernel's tile loop (``hot_loop``).
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass

from ..nvtools import cuobjdump, ptxas_verbose


@dataclass(frozen=True)
class KernelFacts:
    """registers: per thread; spill_bytes: ptxas spill stores; shared: bytes of dynamic shared
    memory; wgmma: wgmma.mma_async instructions in the PTX; loop_instructions: SASS instructions in
    the hot loop (``hot_loop``); loop_local: local-memory instructions (STL/LDL) in all the tile loops
    (``tile_loops``); loop_ops: the hot loop's opcodes."""

    registers: int
    spill_bytes: int
    shared: int
    wgmma: int
    loop_instructions: int
    loop_local: int
    loop_ops: Counter


def parse_sass(text: str) -> list[tuple[int, str]]:
    """``(address, instruction)`` of every instruction of a cuobjdump ``-sass`` listing, runs of
    whitespace inside an instruction made one space."""
    return [(int(a, 16), re.sub(r"\s+", " ", t).strip())
            for a, t in re.findall(r"/\*([0-9a-f]{4,})\*/\s+(.*?);", text)]


def _sass_instructions(cubin: bytes) -> list[tuple[int, str]]:
    return parse_sass(cuobjdump(cubin, "-sass"))


def loops(instructions: list[tuple[int, str]]) -> list[tuple[int, int]]:
    """(first, last) instruction indices of every loop of a SASS listing (target .. backward branch)."""
    index = {addr: i for i, (addr, _) in enumerate(instructions)}
    found = []
    for i, (addr, text) in enumerate(instructions):
        m = re.search(r"BRA\s+(0x[0-9a-f]+)", text)
        if m:
            target = int(m.group(1), 16)
            if target < addr and target in index:
                found.append((index[target], i))
    return found


def _is_mma(text: str) -> bool:
    """A warpgroup matrix instruction: HGMMA (16-bit operands) or QGMMA (8-bit)."""
    return "HGMMA" in text or "QGMMA" in text


def tile_loops(instructions: list[tuple[int, str]]) -> list[tuple[int, int]]:
    """The loops that hold matrix instructions (``_is_mma``), shortest first, leaving out any that overlaps
    one already taken: a kernel's tile loops (one per warpgroup's code in a warp-specialized
    kernel). Overlap, not nesting: ptxas may lay out an outer loop's backward branch so that its
    range starts inside an inner loop."""
    def mmas(loop):
        return sum(_is_mma(t) for _, t in instructions[loop[0]:loop[1] + 1])

    taken = []
    for lp in sorted((lp for lp in loops(instructions) if mmas(lp)), key=lambda lp: lp[1] - lp[0]):
        if not any(lp[0] <= o[1] and o[0] <= lp[1] for o in taken):
            taken.append(lp)
    return sorted(taken)


def hot_loop(instructions: list[tuple[int, str]], loops_found: list[tuple[int, int]] | None = None) -> list[str]:
    """The instructions of the tile loop (``tile_loops``, or ``loops_found`` when the caller has
    them) that holds the most matrix instructions (the shorter of equals)."""
    best, best_key = (0, -1), (0, 0)
    for first, last in tile_loops(instructions) if loops_found is None else loops_found:
        body = instructions[first:last + 1]
        key = (sum(_is_mma(t) for _, t in body), -len(body))
        if key > best_key:
            best, best_key = (first, last), key
    return [text for _, text in instructions[best[0]:best[1] + 1]]


def kernel_facts(kernel) -> KernelFacts:
    """Facts of a ``CompiledKernel`` (from ``compile.compile_decode``)."""
    ptx = kernel.asm["ptx"]
    report = ptxas_verbose(ptx)
    regs = int(re.findall(r"Used (\d+) registers", report)[-1])
    spills = int(re.findall(r"(\d+) bytes spill stores", report)[-1])
    instructions = _sass_instructions(kernel.asm["cubin"])
    found = tile_loops(instructions)
    loop = hot_loop(instructions, found)
    ops = Counter(opcode(t) for t in loop)
    local = sum(opcode(t) in ("STL", "LDL") for first, last in found
                for _, t in instructions[first:last + 1])
    return KernelFacts(regs, spills, kernel.metadata.shared, ptx.count("wgmma.mma_async"), len(loop), local, ops)


def opcode(text: str) -> str:
    """An instruction's opcode without its predicate and modifiers (``@!P0 HGMMA.64x64x16.F32`` -> ``HGMMA``)."""
    return re.sub(r"^@!?U?P\w+\s+", "", text).split()[0].split(".")[0]
