"""Compile the decode kernel for Hopper (sm_90) on any machine, GPU or not, and report its
resources: registers, spills, shared memory. Catches compile errors before device time is spent.

``PYTHONPATH=src python3 bench/compile_report.py [--fmt fp8] [--block-t 32] [--warps 4] [--stages 2]
[--split] [--heads 16] [--loop] [--dump DIR]``.

``--loop`` also prints the main loop's SASS: instructions per iteration (per warp) and the most
frequent opcodes, which is how the design log's instruction counts were taken. ``--heads 128``
compiles the 64-row program (shared memory of the wide-head case).
"""

import argparse
import collections
import os

# Compile for real even on a machine without a GPU (mixmla would pick the interpreter there).
os.environ["TRITON_INTERPRET"] = "0"
import re
import subprocess
import tempfile
import time

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from mixmla.kernels.decode import mla_decode_kernel

FORMAT_IDS = {"bf16": 0, "fp8": 1, "mxfp4": 2}
KV_TYPES = {"bf16": "*bf16", "fp8": "*fp8e4nv", "mxfp4": "*u8"}
TARGET = GPUTarget("cuda", 90, 32)


def compile_decode(fmt, block_t=32, warps=4, stages=2, direct=True, heads=16, block_r=16, write_lse=False):
    """Compile ``mla_decode_kernel`` for sm_90 with the given constexprs; returns the CompiledKernel."""
    sig = {
        "q_ptr": "*bf16", "stride_qt": "i32", "stride_qh": "i32",
        "kv_ptr": KV_TYPES[fmt], "kv_stride": "i32",
        "scale_ptr": {"bf16": "constexpr", "fp8": "*fp32", "mxfp4": "*u8"}[fmt],
        "scale_stride": "i32" if fmt == "mxfp4" else "constexpr",
        "kv_indptr": "*i32", "qo_indptr": "*i32", "work_req": "*i32", "work_split": "*i32", "work_nsplit": "*i32",
        "out_ptr": "*bf16", "stride_ot": "i32", "stride_oh": "i32", "lse_ptr": "*fp32", "stride_lt": "i32",
        "part_o_ptr": "*fp32", "part_lse_ptr": "*fp32", "rows_max": "i32", "sm_scale": "fp32",
    }
    constexprs = dict(H=heads, BLOCK_R=block_r, BLOCK_T=block_t, FORMAT=FORMAT_IDS[fmt], DIRECT=direct,
                      WRITE_LSE=write_lse, INTERPRETED=False)
    if fmt != "mxfp4":
        constexprs.update(scale_stride=None)
    if fmt == "bf16":
        constexprs.update(scale_ptr=None)
    for k, v in constexprs.items():
        sig[k] = "constexpr"
    names = mla_decode_kernel.arg_names
    # What the launcher would specialize on real tensors: 16-byte aligned pointers, strides that
    # are multiples of 16 (the MXFP4 scale stride, 24 in the benchmark, is not).
    aligned = [n for n, t in sig.items() if t.startswith("*") or (t == "i32" and n.startswith(("stride", "kv_stride")))]
    attrs = {(names.index(n),): [["tt.divisibility", 16]] for n in aligned}
    src = ASTSource(fn=mla_decode_kernel, signature=sig, attrs=attrs,
                    constexprs={(names.index(k),): v for k, v in constexprs.items()})
    # The decoders choose inline PTX by the target's capability (triton.language.target_info).
    drivers = triton.runtime.driver
    previous = drivers._active  # None until a driver was looked up; reset_active() would need a GPU
    drivers.set_active(_TargetOnly(TARGET))
    try:
        return triton.compile(src, target=TARGET, options=dict(num_warps=warps, num_stages=stages))
    finally:
        drivers.set_active(previous)


class _TargetOnly:
    """A stand-in for Triton's active driver that only reports the compile target."""

    def __init__(self, target):
        self.target = target

    def get_current_target(self):
        return self.target


def _cuobjdump(kernel, flag: str) -> str:
    """What the cuobjdump that ships with Triton prints for the kernel's cubin with ``flag``."""
    tool = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(kernel.asm["cubin"])
        f.flush()
        return subprocess.run([tool, flag, f.name], capture_output=True, text=True).stdout


def resource_usage(kernel) -> str:
    """REG/STACK/SHARED/LOCAL as reported by cuobjdump."""
    text = _cuobjdump(kernel, "--dump-resource-usage")
    m = re.search(r"REG:(\d+) STACK:(\d+) SHARED:(\d+) LOCAL:(\d+)", text)
    return f"regs={m[1]} stack={m[2]} local={m[4]}" if m else text.strip()


def sass_text(kernel) -> str:
    """The kernel's SASS, disassembled by cuobjdump."""
    return _cuobjdump(kernel, "--dump-sass")


def loop_profile(sass: str):
    """``(instructions, Counter of opcodes)`` of the longest backward branch's body in ``sass``:
    the token loop of the decode kernel. (0, empty) if there is no loop."""
    lines = re.findall(r"/\*([0-9a-f]{4,})\*/\s+(.*?);", sass)
    best = None
    for address, text in lines:
        m = re.search(r"\bBRA\b.*?0x([0-9a-f]+)", text)
        if m and int(m[1], 16) < int(address, 16):
            span = (int(m[1], 16), int(address, 16))
            if best is None or span[1] - span[0] > best[1] - best[0]:
                best = span
    ops = collections.Counter()
    for address, text in lines:
        if best and best[0] <= int(address, 16) <= best[1]:
            op = re.sub(r"^@!?U?P\w+\s+", "", text.strip()).split()[0]
            ops[op.split(".")[0]] += 1
    return sum(ops.values()), ops


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fmt", default="bf16,fp8,mxfp4")
    ap.add_argument("--block-t", type=int, default=32)
    ap.add_argument("--warps", type=int, default=4)
    ap.add_argument("--stages", type=int, default=2)
    ap.add_argument("--split", action="store_true", help="the partial-output variant instead of direct")
    ap.add_argument("--dump", default=None)
    ap.add_argument("--loop", action="store_true", help="print the token loop's SASS instruction counts")
    ap.add_argument("--heads", type=int, default=16, help="query heads (16 rows per program up to 16, 64 from 64)")
    a = ap.parse_args()
    for fmt in a.fmt.split(","):
        t = time.time()
        block_r = min(64, max(16, 1 << (a.heads - 1).bit_length()))
        k = compile_decode(fmt, a.block_t, a.warps, a.stages, not a.split, heads=a.heads, block_r=block_r)
        md = k.metadata
        print(f"{fmt}: {resource_usage(k)} shared={md.shared} ({time.time() - t:.0f}s)", flush=True)
        if a.loop:
            count, ops = loop_profile(sass_text(k))
            print(f"  loop: {count} instructions per iteration; " + ", ".join(f"{o} {n}" for o, n in ops.most_common(12)))
        if a.dump:
            os.makedirs(a.dump, exist_ok=True)
            for ext in ("ttgir", "ptx"):
                with open(os.path.join(a.dump, f"{fmt}.{ext}"), "w") as f:
                    f.write(k.asm[ext])
            with open(os.path.join(a.dump, f"{fmt}.cubin"), "wb") as f:
                f.write(k.asm["cubin"])
            with open(os.path.join(a.dump, f"{fmt}.sass"), "w") as f:
                f.write(sass_text(k))


if __name__ == "__main__":
    main()
