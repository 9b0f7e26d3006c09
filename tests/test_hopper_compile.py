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
import json, sys
from mixmla.kernels.gluon.compile import compile_decode, KernelSpec
from mixmla.kernels.gluon.launch import shipped_specs
from mixmla.kernels.gluon.sass import kernel_facts
out = []
for spec in shipped_specs():
    f = kernel_facts(compile_decode(spec))
    out.append({"spec": spec.constexprs(), "registers": f.registers, "spill_bytes": f.spill_bytes,
                "shared": f.shared, "wgmma": f.wgmma, "loop_instructions": f.loop_instructions,
                "loop_local": f.loop_local, "loop_hgmma": f.loop_ops["HGMMA"],
                "prefetch": compile_decode(spec).asm["ptx"].count("cp.async.bulk.prefetch.L2.global")})
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def compiled():
    env = dict(os.environ, TRITON_INTERPRET="0")
    r = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=env, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_every_shipped_configuration_compiles(compiled):
    from mixmla.kernels.gluon.launch import shipped_specs
    assert len(compiled) == len(shipped_specs()) > 0


def test_two_programs_fit_an_sm(compiled):
    """Two programs per SM (the grid assumes it): registers and shared memory for both."""
    for k in compiled:
        assert 2 * 128 * k["registers"] <= 65536, k
        assert 2 * (k["shared"] + 1024) <= 233472, k  # H100/H200: 228 KB per SM, 1 KB reserved per block


def test_matrix_products_on_wgmma_in_the_tile_loop(compiled):
    """36 score and 32 value wgmma per tile, all in the tile loop."""
    for k in compiled:
        assert k["wgmma"] == 68 and k["loop_hgmma"] == 68, k


def test_fp8_cache_rows_are_prefetched_into_l2(compiled):
    """The fp8 tile loop prefetches the rows of the tile after next into L2 (without it the kernel
    waits on its loads); the MXFP4 one does not (measured slower with it)."""
    from mixmla.kernels.constants import FMT_FP8
    for k in compiled:
        assert (k["prefetch"] >= 1) == (k["spec"]["FORMAT"] == FMT_FP8.value), k


def test_no_local_memory_in_the_tile_loop(compiled):
    """A few bytes of per-request values are spilled around the tile loop, never inside it."""
    for k in compiled:
        assert k["loop_local"] == 0, k
