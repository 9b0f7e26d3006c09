"""Variants of the staged kernel's row copies (paged fp8 in pages smaller than a tile; docs/PERF.md
design log step 91), each a copy of this checkout's ``src/`` with text edits of
``kernels/gluon/decode_tma.py`` that differ from it in one idea, timed by ``mixmla bench``'s paged
mode in one device call.

    PYTHONPATH=src python bench/studies/staged_rows_variants.py OUT [--variants pf,pfl,qfirst,rows4]
        [--shape 256,1,8192 --shape 64,1,8192 ...] [--compile]

- ``rows4``: four lanes per row for every chunk (64 bytes of 8 rows per copy instruction): the copy
  pattern step 91 measured before the shipped eight lanes per chunk pair.
- ``pf``: an L2 prefetch of the tile after next's rows, one 576-byte bulk prefetch per row (its
  page entries read two tiles ahead): whether the rows' latency is what holds 256x8192 page 1 at
  x1.21 of contiguous.
- ``pfl``: ``pf`` by per-thread line prefetches (``prefetch.global.L2``, five 128-byte lines per
  row spread over the row's four lanes) instead of bulk prefetches, which take a uniform address
  and so compile to a loop over the issuing lanes.
- ``qfirst``: a piece's first tile's page entries read before its query, and that tile's copies
  issued after the query's loads, so that the two waits of a piece's start overlap: the small
  shapes, whose pieces are a few tiles (x1.11-1.19 at page 1). Timed: no change (PERF step 96).

On a GPU, for the trees ``shipped``, the variants, ``shipped`` again: ``python -m mixmla bench
--paged --quick --paths fp8 --peers none --shape ...`` with the tree's ``src`` first on
PYTHONPATH, into ``OUT/<tree>/`` (each tree's results are written as it finishes), then a table of
the paged / contiguous ratios; OUT/variants.json. ``--compile`` (any machine, no GPU): compiles each
tree's paged fp8 row-copy kernel for sm_90a and prints registers, spills, tile-loop instructions
and the row copies and bulk prefetches in them.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
KERNEL = os.path.join("mixmla", "kernels", "gluon", "decode_tma.py")

EDITS = {
    "rows4": [(
        """    if chunks == 2:
        return gl.BlockedLayout([1, 1, 4], [2, 4, 4], [1, 4, 1], [2, 1, 0])
    return gl.BlockedLayout([1, 1, 4], [1, 8, 4], [1, 4, 1], [2, 1, 0])
""",
        """    return gl.BlockedLayout([chunks, 1, 4], [1, 8, 4], [1, 4, 1], [2, 1, 0])
""")],
    "pf": [(
        """@gluon.jit
def _copy_group(""",
        """@gluon.jit
def _prefetch_rows(kv_ptr, kv_stride, first, kv_len, t, live, page, num_pages, page_shift, PAGED: gl.constexpr):
    ROW_L: gl.constexpr = paging.chunk_rows(4)
    rows, ok = paging.tile_rows(ROW_L, first, kv_len, t, live, page, num_pages, page_shift, PAGED)
    size = gl.where(ok, 576, 0)
    gl.inline_asm_elementwise(
        "{ .reg .pred p; .reg .u32 ln; mov.u32 ln, %laneid; and.b32 ln, ln, 3; setp.eq.u32 p, ln, 0; "
        "setp.ne.and.u32 p, $2, 0, p; @p cp.async.bulk.prefetch.L2.global [$1], $2; mov.u32 $0, 0; }",
        "=r,l,r", [kv_ptr + rows.to(gl.int64) * kv_stride, size], dtype=gl.int32, is_pure=False, pack=1)


@gluon.jit
def _copy_group("""), (
        """                pages_next = _row_pages(pages_ptr, first_row, kv_len, my_begin + 1, my_begin + 1 < my_end, page_shift,
                                        PAGED)
""",
        """                pages_next = _row_pages(pages_ptr, first_row, kv_len, my_begin + 1, my_begin + 1 < my_end, page_shift,
                                        PAGED)
                pages_pf = paging.tile_pages(paging.chunk_rows(4), pages_ptr, first_row, kv_len, my_begin + 2,
                                             my_begin + 2 < my_end, page_shift, PAGED)
"""), (
        """                    pages_next = _row_pages(pages_ptr, first_row, kv_len, t + 2, t + 2 < my_end, page_shift, PAGED)
""",
        """                    pages_next = _row_pages(pages_ptr, first_row, kv_len, t + 2, t + 2 < my_end, page_shift, PAGED)
                    _prefetch_rows(kv_ptr, kv_stride, first_row, kv_len, t + 2, t + 2 < my_end, pages_pf, num_pages,
                                   page_shift, PAGED)
                    pages_pf = paging.tile_pages(paging.chunk_rows(4), pages_ptr, first_row, kv_len, t + 3,
                                                 t + 3 < my_end, page_shift, PAGED)
""")],
    "qfirst": [(
        """                _copy_rows(kv_ptr, kv_stride, tma_bars.index(it % 2), raw, raw_last, it % 2, first_row, kv_len,
                           my_begin, my_begin < my_end,
                           _row_pages(pages_ptr, first_row, kv_len, my_begin, my_begin < my_end, page_shift, PAGED),
                           num_pages, page_shift, PAGED)
""",
        """                pages_first = _row_pages(pages_ptr, first_row, kv_len, my_begin, my_begin < my_end, page_shift,
                                         PAGED)
"""), (
        """            q_rows = _load_query(q_ptr, stride_qt, stride_qh, q_lo, q_len, H, ROWS)
""",
        """            q_rows = _load_query(q_ptr, stride_qt, stride_qh, q_lo, q_len, H, ROWS)
            if SMALL_PAGES:
                _copy_rows(kv_ptr, kv_stride, tma_bars.index(it % 2), raw, raw_last, it % 2, first_row, kv_len,
                           my_begin, my_begin < my_end, pages_first, num_pages, page_shift, PAGED)
""")],
}


#: ``pfl``'s prefetch helper: lane k of a row's four (``paging.chunk_rows(4)``) prefetches the
#: row's 128-byte line k, lane 0 also line 4, so the 576 bytes' five lines are each asked for once.
_PREFETCH_LINES = """@gluon.jit
def _prefetch_rows(kv_ptr, kv_stride, first, kv_len, t, live, page, num_pages, page_shift, PAGED: gl.constexpr):
    ROW_L: gl.constexpr = paging.chunk_rows(4)
    rows, ok = paging.tile_rows(ROW_L, first, kv_len, t, live, page, num_pages, page_shift, PAGED)
    gl.inline_asm_elementwise(
        "{ .reg .pred p, q; .reg .u32 ln; .reg .u64 a; mov.u32 ln, %laneid; and.b32 ln, ln, 3; "
        "setp.ne.u32 p, $2, 0; mul.wide.u32 a, ln, 128; add.u64 a, a, $1; @p prefetch.global.L2 [a]; "
        "setp.eq.and.u32 q, ln, 0, p; @q prefetch.global.L2 [$1+512]; mov.u32 $0, 0; }",
        "=r,l,r", [kv_ptr + rows.to(gl.int64) * kv_stride, ok.to(gl.int32)], dtype=gl.int32, is_pure=False,
        pack=1)


@gluon.jit
def _copy_group("""
EDITS["pfl"] = [(EDITS["pf"][0][0], _PREFETCH_LINES)] + EDITS["pf"][1:]  # pf's, with this helper


def edited(source: str, edits) -> str:
    """``source`` with each (anchor, replacement) applied; an anchor that does not occur exactly
    once fails, so a variant never silently edits something else."""
    for anchor, replacement in edits:
        if source.count(anchor) != 1:
            raise ValueError(f"anchor found {source.count(anchor)} times, expected once:\n{anchor}")
        source = source.replace(anchor, replacement)
    return source


def write_trees(out: str, names) -> dict:
    """``{name: src directory}``: ``shipped`` (this checkout's src) and each variant's copy of it."""
    src = os.path.join(ROOT, "src")
    trees = {"shipped": src}
    with open(os.path.join(src, KERNEL)) as f:
        kernel = f.read()
    for name in names:
        dst = os.path.join(out, "trees", name, "src")
        shutil.rmtree(dst, ignore_errors=True)
        shutil.copytree(src, dst, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
        with open(os.path.join(dst, KERNEL), "w") as f:
            f.write(edited(kernel, EDITS[name]))
        trees[name] = dst
    return trees


COMPILE = r"""
import collections, json, sys
from mixmla.kernels.gluon.compile import KernelSpec, compile_decode
from mixmla.kernels.gluon import sass
k = compile_decode(KernelSpec(H=16, ROWS=16, FORMAT=1, BLOCK_B=256, C0=2, WRITE_LSE=True, PAGED=1, SMALL_PAGES=True))
f = sass.kernel_facts(k)
print(json.dumps({"registers": f.registers, "spill_bytes": f.spill_bytes, "loop_instructions": f.loop_instructions,
                  "LDGSTS": f.loop_ops["LDGSTS"], "UBLKPF": f.loop_ops["UBLKPF"], "LDG": f.loop_ops["LDG"]}))
"""


def run_tree(src: str, cmd: list, log: str, timeout: float) -> int:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([src] + [p for p in os.environ.get("PYTHONPATH", "").split(
        os.pathsep) if p and os.path.abspath(p) != os.path.join(ROOT, "src")]))
    with open(log, "w") as f:
        try:
            return subprocess.run(cmd, env=env, stdout=f, stderr=subprocess.STDOUT, timeout=timeout).returncode
        except subprocess.TimeoutExpired:
            f.write(f"\ntimed out after {timeout} s\n")
            return 124


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--variants", default="pf,pfl,qfirst,rows4")
    ap.add_argument("--shape", action="append", help="B,Lq,Lk as for mixmla bench (default 256x8192, 64x8192, "
                                                     "4x8192, 32x1024)")
    ap.add_argument("--compile", action="store_true", help="compile facts only (no GPU needed)")
    ap.add_argument("--timeout-s", type=float, default=150.0, help="per tree")
    args = ap.parse_args()
    names = [n for n in args.variants.split(",") if n]
    os.makedirs(args.out, exist_ok=True)
    trees = write_trees(args.out, names)
    if args.compile:
        os.environ["TRITON_INTERPRET"] = "0"  # the compiles' child processes: Gluon does not interpret
        for name, src in trees.items():
            log = os.path.join(args.out, f"compile-{name}.log")
            rc = run_tree(src, [sys.executable, "-c", COMPILE], log, 1800)
            with open(log) as f:
                print(f"{name:<8} rc={rc} {f.read().strip().splitlines()[-1]}", flush=True)
        return
    shapes = args.shape or ["256,1,8192", "64,1,8192", "4,1,8192", "32,1,1024"]
    order = ["shipped"] + names + ["shipped"]
    results = []
    for i, name in enumerate(order):
        label = name if i < len(order) - 1 else "shipped-again"
        out = os.path.join(args.out, label)
        cmd = [sys.executable, "-m", "mixmla", "bench", "--paged", "--quick", "--paths", "fp8", "--peers", "none",
               "--budget-s", str(int(args.timeout_s) - 20), "--out", out]
        for s in shapes:
            cmd += ["--shape", s]
        os.makedirs(out, exist_ok=True)
        rc = run_tree(trees[name], cmd, os.path.join(out, "bench.log"), args.timeout_s)
        ratios = []
        path = os.path.join(out, "results.json")
        if os.path.exists(path):
            with open(path) as f:
                ratios = json.load(f).get("paged", {}).get("ratios", [])
        results.append({"tree": label, "rc": rc, "ratios": ratios})
        with open(os.path.join(args.out, "variants.json"), "w") as f:
            json.dump(results, f, indent=1)
        print(f"== {label} (rc {rc})", flush=True)
        for r in ratios:
            print(f"  {r['shape']:<14} page {r['page_size']:<3} paged {r['gpu_us']:8.1f} us  "
                  f"contiguous {r['contiguous_us'] or 0:8.1f} us  x{r['ratio'] or 0:.3f}", flush=True)


if __name__ == "__main__":
    main()
