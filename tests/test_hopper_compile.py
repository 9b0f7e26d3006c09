"""The Hopper kernel compiles for sm_90a on a machine without a GPU, for every configuration the
library launches, and the compiled code has the properties its speed depends on.

Compilation runs in a subprocess: this test process runs Triton's interpreter (for the portable
kernels), under which Gluon cannot compile.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("triton.experimental.gluon")

SCRIPT = r"""
import json, multiprocessing, os, sys
from concurrent.futures import ProcessPoolExecutor
from mixmla.kernels.gluon.compile import compile_decode, KernelSpec, staged
from mixmla.kernels.gluon.launch import shipped_kernels, shipped_specs
from mixmla.kernels.gluon.sass import kernel_facts

def facts(job):
    spec, staged_kernel, served = job
    k = compile_decode(spec, staged_kernel)
    f = kernel_facts(k)
    ptx = k.asm["ptx"]
    return {"spec": spec.constexprs(), "staged": staged(spec, staged_kernel), "served": served,
            "registers": f.registers, "spill_bytes": f.spill_bytes, "shared": f.shared, "wgmma": f.wgmma,
            "loop_instructions": f.loop_instructions, "loop_local": f.loop_local,
            "loop_hgmma": f.loop_ops["HGMMA"], "prefetch": ptx.count("cp.async.bulk.prefetch.L2.global"),
            "tma_copies": ptx.count("cp.async.bulk.tensor"), "setmaxnreg": ptx.count("setmaxnreg"),
            "row_copies": ptx.count("cp.async.cg.shared.global"),
            "line_prefetch": ptx.count("prefetch.global.L2 ["),
            "row_arrivals": ptx.count("cp.async.mbarrier.arrive.noinc.shared.b64"),
            "scratch": k.metadata.global_scratch_size,
            "ldmatrix_trans": ptx.count("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16"),
            "stmatrix": ptx.count("stmatrix.sync.aligned")}

if __name__ == "__main__":
    # One compile per core: the specializations are independent. Besides the shipped ones, the
    # staged kernel's form for contiguous MXFP4 caches, which no layout is served by yet.
    jobs = [(s, k, True) for s, k in shipped_kernels()]
    jobs += [(s, True, False) for s in shipped_specs() if s.FORMAT == 2 and s.PAGED == 0]
    with ProcessPoolExecutor(max_workers=max(1, min(8, os.cpu_count() or 1)),
                             mp_context=multiprocessing.get_context("fork")) as pool:
        out = list(pool.map(facts, jobs))
    print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def compiled():
    env = dict(os.environ, TRITON_INTERPRET="0")
    r = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=env, timeout=1800)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_every_shipped_configuration_compiles(compiled):
    from mixmla.kernels.gluon.launch import shipped_kernels, shipped_specs
    assert sum(k["served"] for k in compiled) == len(shipped_kernels()) == len(shipped_specs())
    # Paged fp8 is read by the staged kernel, in one form for pages smaller than a tile and one
    # for the others.
    paged_fp8 = [k for k in compiled if k["served"] and k["spec"]["FORMAT"] == 1 and k["spec"]["PAGED"]]
    assert all(k["staged"] for k in paged_fp8)
    small = [k["spec"]["SMALL_PAGES"] for k in paged_fp8]
    assert small.count(True) == small.count(False) > 0
    # Paged MXFP4 is read by ``decode``, likewise in two forms.
    paged_mxfp4 = [k for k in compiled if k["served"] and k["spec"]["FORMAT"] == 2 and k["spec"]["PAGED"]]
    assert not any(k["staged"] for k in paged_mxfp4)
    small = [k["spec"]["SMALL_PAGES"] for k in paged_mxfp4]
    assert small.count(True) == small.count(False) > 0


def test_programs_fit_an_sm(compiled):
    """As many programs per SM as the grid assumes (``launch.programs_per_sm``): two of 128
    threads for ``decode``, one of 256 (two warpgroups) for ``decode_tma``; registers and shared
    memory for all of them."""
    from mixmla.kernels.gluon.compile import KernelSpec
    from mixmla.kernels.gluon.launch import programs_per_sm
    for k in compiled:
        per_sm = programs_per_sm(KernelSpec(**k["spec"]), k["staged"])
        threads = 256 if k["staged"] else 128
        assert per_sm == (1 if k["staged"] else 2), k
        assert per_sm * threads * k["registers"] <= 65536, k
        assert per_sm * (k["shared"] + 1024) <= 233472, k  # H100/H200: 228 KB per SM, 1 KB reserved per block


def test_matrix_products_on_wgmma_in_the_tile_loop(compiled):
    """36 score and 32 value wgmma per tile, all in the tile loop (each warpgroup's, in the staged
    kernel)."""
    for k in compiled:
        if k["staged"]:  # the two warpgroups' loops may lie inside one backward branch of the listing
            assert k["wgmma"] == 136 and k["loop_hgmma"] in (68, 136), k
        else:
            assert k["wgmma"] == 68 and k["loop_hgmma"] == 68, k


def test_contiguous_cache_rows_reach_shared_memory_ahead_of_use(compiled):
    """fp8 tiles, contiguous or in pages of at least a tile, come by TMA (per tile and warpgroup
    five copies for fp8, three for MXFP4, of warp-specialized warpgroups with their register
    budgets set: ``setmaxnreg``) with the tensor descriptors in the workspace's global scratch, and
    no L2 prefetch (it slowed the copies); fp8 in smaller pages comes into the same buffers by row
    copies (``cp.async``, 18 of 16 bytes per thread and tile, each thread arriving on the tile's
    mbarrier), without descriptors. MXFP4 is served by ``decode`` (its staged form is not yet
    faster), which loads rows into registers a tile ahead, and in pages smaller than a tile also
    asks L2 for the rows of the tile after next (line prefetches: faster there, slower elsewhere)."""
    from mixmla.kernels.constants import FMT_FP8
    from mixmla.kernels.gluon.decode_tma import SCRATCH_PER_PROGRAM
    for k in compiled:
        fp8 = k["spec"]["FORMAT"] == FMT_FP8.value
        assert k["staged"] == (fp8 or not k["served"]), k
        # Each warpgroup issues a tile's copies before its loop and in it.
        if k["staged"] and k["spec"]["SMALL_PAGES"]:
            assert k["tma_copies"] == 0 and k["scratch"] == 0, k
            assert k["row_copies"] == 2 * 2 * 18 and k["row_arrivals"] == 2 * 2, k
        elif k["staged"]:
            assert k["tma_copies"] == 2 * 2 * (5 if fp8 else 3) and k["row_copies"] == 0, k
            assert k["scratch"] == SCRATCH_PER_PROGRAM, k
        else:
            assert k["tma_copies"] == 0 and k["row_copies"] == 0 and k["scratch"] == 0, k
        if k["staged"]:
            assert k["setmaxnreg"] >= 2 and k["prefetch"] == 0 and k["line_prefetch"] == 0, k
        else:
            assert k["setmaxnreg"] == 0 and k["prefetch"] == 0, k
            assert (k["line_prefetch"] > 0) == k["spec"]["SMALL_PAGES"], k


def test_staged_values_come_from_the_staged_bytes(compiled):
    """The staged kernel's value product takes V^T from registers, loaded by transposed 8x8 loads of
    the staged bytes (per tile and warpgroup: fp8 4 pairs of chunks x 4 loads, MXFP4 2 quads of
    chunks x 4), and writes no decoded value tile to shared memory (its two ``stmatrix`` are the
    query's, and for MXFP4 one the zero word its decode tables come from); ``decode`` stores the value tile (32 per tile, ``stmatrix``) and reads it in the
    product."""
    from mixmla.kernels.constants import FMT_FP8
    for k in compiled:
        if k["staged"]:
            fp8 = k["spec"]["FORMAT"] == FMT_FP8.value
            assert k["ldmatrix_trans"] == 2 * (16 if fp8 else 8) and k["stmatrix"] <= (2 if fp8 else 3), k
        else:
            assert k["ldmatrix_trans"] == 0 and k["stmatrix"] >= 32, k


def test_no_local_memory_in_the_tile_loop(compiled):
    """A few bytes of per-request values are spilled around the tile loop, never inside it."""
    for k in compiled:
        assert k["loop_local"] == 0, k


def test_tile_loops_are_found_by_their_matrix_instructions_of_either_width():
    """``sass.tile_loops`` and ``hot_loop`` on a made-up listing: a loop counts as a tile loop when
    it holds 16-bit (HGMMA) or 8-bit (QGMMA) matrix instructions, a loop without any is left out,
    and the hot loop is the one with the most."""
    from mixmla.kernels.gluon import sass

    def listing(*bodies):
        out, addr = [], 0
        for ops in bodies:
            start = addr
            for op in ops:
                out.append((addr, op))
                addr += 16
            out.append((addr, f"BRA {start:#x}"))
            addr += 16
        return out

    ins = listing(["IADD3 R1, R1, 1"], ["QGMMA.64x32x32.F32.E4M3.E4M3 R24, R8, gdesc[UR4], R24", "LDS R2, [R3]"],
                  ["HGMMA.64x16x16.F32.BF16 R24, R8, gdesc[UR4], R24"] * 2)
    loops = sass.tile_loops(ins)
    assert [(ins[a][1].split()[0], ins[b][1].split()[0]) for a, b in loops] == [("QGMMA.64x32x32.F32.E4M3.E4M3", "BRA"),
                                                                              ("HGMMA.64x16x16.F32.BF16", "BRA")]
    assert sass.hot_loop(ins)[:2] == ["HGMMA.64x16x16.F32.BF16 R24, R8, gdesc[UR4], R24"] * 2
