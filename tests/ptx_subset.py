"""A tiny interpreter for the few PTX instructions the Hopper kernel's inline decoders use.

It lets the CPU test suite check the decoders' bit logic (the GPU is not always at hand): each
register is a numpy uint32 array, so one call evaluates the asm for many inputs at once. Only the
instructions below are understood; anything else raises, so a decoder that grows a new
instruction needs this file to grow with it.
"""

from __future__ import annotations

import re

import numpy as np
import torch

_M32 = np.uint64(0xFFFFFFFF)


def _u32(x):
    return np.asarray(x, dtype=np.uint64) & _M32


def _prmt(a, b, sel):
    src = [(a >> np.uint64(8 * i)) & np.uint64(0xFF) for i in range(4)] + \
          [(b >> np.uint64(8 * i)) & np.uint64(0xFF) for i in range(4)]
    out = np.zeros_like(a)
    for i in range(4):
        nib = (sel >> np.uint64(4 * i)) & np.uint64(0xF)
        idx = nib & np.uint64(7)
        byte = np.choose(idx.astype(np.int64), src)
        msb = (byte >> np.uint64(7)) & np.uint64(1)
        byte = np.where((nib & np.uint64(8)) != 0, msb * np.uint64(0xFF), byte)
        out |= byte << np.uint64(8 * i)
    return out


def _lop3(a, b, c, lut):
    out = np.zeros_like(a)
    for bit in range(8):
        if (lut >> bit) & 1:
            ta = a if bit & 4 else ~a
            tb = b if bit & 2 else ~b
            tc = c if bit & 1 else ~c
            out |= ta & tb & tc
    return out & _M32


def _bf16_halves(x):
    lo = torch.from_numpy((x & np.uint64(0xFFFF)).astype(np.int32)).to(torch.int16)
    hi = torch.from_numpy(((x >> np.uint64(16)) & np.uint64(0xFFFF)).astype(np.int32)).to(torch.int16)
    return lo.view(torch.bfloat16).float(), hi.view(torch.bfloat16).float()


def _pack_bf16(lo, hi):
    lo16 = lo.to(torch.bfloat16).view(torch.int16).numpy().astype(np.uint64) & np.uint64(0xFFFF)
    hi16 = hi.to(torch.bfloat16).view(torch.int16).numpy().astype(np.uint64) & np.uint64(0xFFFF)
    return lo16 | (hi16 << np.uint64(16))


def _e4m3_to_f16_bits(byte):
    t = torch.from_numpy(byte.astype(np.uint8)).view(torch.float8_e4m3fn).to(torch.float16)
    return t.view(torch.int16).numpy().astype(np.uint64) & np.uint64(0xFFFF)


def _f16_to_e4m3_bits(half):
    """e4m3fn bits of f16 bits, rounded to nearest even and saturated to +-448 (``.satfinite``)."""
    t = torch.from_numpy(half.astype(np.int32)).to(torch.int16).view(torch.float16).float()
    t = torch.clamp(t, -448.0, 448.0)
    return t.to(torch.float8_e4m3fn).view(torch.uint8).numpy().astype(np.uint64)


def run(asm: str, inputs: dict[int, np.ndarray], num_outputs: int, memory: np.ndarray | None = None) -> list[np.ndarray]:
    """Evaluate ``asm`` with operands ``$k`` = ``inputs[k]`` (uint32 arrays of one shape, 64-bit
    values for address operands); returns the output operands ``$0 .. $(num_outputs-1)``.
    memory: the bytes global loads read, an address being an index into it."""
    regs: dict[str, np.ndarray] = {f"${k}": np.asarray(v, dtype=np.uint64) for k, v in inputs.items()}
    shape = next(iter(regs.values())).shape

    def val(tok):
        tok = tok.strip()
        if tok in regs:
            return regs[tok]
        if re.fullmatch(r"-?(0x[0-9a-fA-F]+|\d+)", tok):
            return np.full(shape, int(tok, 0) & 0xFFFFFFFF, dtype=np.uint64)
        raise KeyError(f"unknown operand {tok!r}")

    # Scope braces ("{" or "}" alone on a line) only limit where a .reg name is visible; executed in
    # order they change nothing. Braces inside a statement ("mov.b32 {lo, hi}, $2") are vectors.
    body = "\n".join(line for line in asm.splitlines() if line.strip() not in ("{", "}"))
    for stmt in body.split(";"):
        stmt = re.sub(r"^\{\s+|^\}$", "", stmt.strip()).strip()  # scope braces on a statement's line
        if not stmt or stmt.startswith(".reg"):
            continue
        guard = None
        if stmt.startswith("@"):
            guard, _, stmt = stmt.partition(" ")
            guard = regs[guard[1:]].astype(bool)
        op, _, rest = stmt.partition(" ")
        if op == "mov.b32" and rest.strip().startswith("{"):
            dst, src = rest.split("}")
            lo, hi = [t.strip() for t in dst.strip("{ ").split(",")]
            x = val(src.strip(" ,"))
            regs[lo], regs[hi] = x & np.uint64(0xFFFF), (x >> np.uint64(16)) & np.uint64(0xFFFF)
            continue
        if op == "mov.b32" and rest.strip().endswith("}"):  # pack two 16-bit registers: mov.b32 d, {lo, hi}
            dst, src = rest.split(",", 1)
            lo, hi = [t.strip() for t in src.strip(" {}").split(",")]
            regs[dst.strip()] = (val(lo) & np.uint64(0xFFFF)) | ((val(hi) & np.uint64(0xFFFF)) << np.uint64(16))
            continue
        args = [t.strip() for t in rest.split(",")]
        d, srcs = args[0], args[1:]
        if op == "setp.ne.b32":
            regs[d] = (_u32(val(srcs[0])) != _u32(val(srcs[1]))).astype(np.uint64)
            continue
        if op == "ld.global.u8":
            addr = val(srcs[0].strip("[] "))
            r = memory[np.where(guard, addr, 0).astype(np.int64)].astype(np.uint64)
        elif op == "mov.b32":
            r = val(srcs[0])
        elif op == "and.b32":
            r = val(srcs[0]) & val(srcs[1])
        elif op == "shl.b32":
            r = (val(srcs[0]) << val(srcs[1])) & _M32
        elif op == "shr.b32":
            r = val(srcs[0]) >> val(srcs[1])
        elif op == "prmt.b32":
            r = _prmt(val(srcs[0]), val(srcs[1]), val(srcs[2]))
        elif op == "lop3.b32":
            r = _lop3(val(srcs[0]), val(srcs[1]), val(srcs[2]), int(srcs[3], 0))
        elif op == "mul.rn.bf16x2":
            alo, ahi = _bf16_halves(val(srcs[0]))
            blo, bhi = _bf16_halves(val(srcs[1]))
            r = _pack_bf16(alo * blo, ahi * bhi)
        elif op == "cvt.rn.satfinite.e4m3x2.f16x2":
            x = val(srcs[0])
            r = _f16_to_e4m3_bits(x & np.uint64(0xFFFF)) | (_f16_to_e4m3_bits((x >> np.uint64(16)) & np.uint64(0xFFFF))
                                                           << np.uint64(8))
        elif op == "cvt.rn.f16x2.e4m3x2":
            x = val(srcs[0])
            r = _e4m3_to_f16_bits(x & np.uint64(0xFF)) | (_e4m3_to_f16_bits((x >> np.uint64(8)) & np.uint64(0xFF))
                                                         << np.uint64(16))
        else:
            raise NotImplementedError(f"ptx_subset does not know {op!r}")
        r = r & _M32
        regs[d] = r if guard is None else np.where(guard, r, regs[d])
    return [regs[f"${k}"] for k in range(num_outputs)]
