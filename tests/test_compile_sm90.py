"""The default kernel shapes, compiled for Hopper (sm_90) on any machine: they must fit an SM's
shared memory and keep their registers (no spills) where the H200 measurements depend on it.

A shape that does not fit fails only at launch on the GPU (OutOfResources), which CI cannot see;
compiling with Triton's bundled ptxas can. The compiles run in a child process with the
interpreter off (bench/compile_report.py's compile_decode), since this one may be interpreting.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

SHARED_MEMORY_LIMIT = 232448  #: bytes per block on the H200 (227 KB), as Triton reports it
FORMATS = ("bf16", "fp8", "mxfp4")
CASES = {"h16": (16, 16), "h32": (32, 32), "h16-lq4": (16, 64), "h128": (128, 128)}  #: heads, rows

_CHILD = """
import json, sys
sys.path.insert(0, {bench!r})
from compile_report import compile_decode, resource_usage
from mixmla.plan import block_rows, default_config
for fmt, heads, rows in json.loads(sys.argv[1]):
    cfg = default_config(fmt, rows)
    try:
        k = compile_decode(fmt, cfg.block_t, cfg.num_warps, cfg.num_stages, direct=False, heads=heads,
                           block_r=block_rows(rows))
        usage = dict(item.split("=") for item in resource_usage(k).split())
        print(json.dumps(dict(fmt=fmt, rows=rows, shared=k.metadata.shared, stack=int(usage["stack"]))))
    except Exception as e:
        print(json.dumps(dict(fmt=fmt, rows=rows, error=repr(e)[:300])))
"""


@pytest.fixture(scope="module")
def compiled():
    root = os.path.join(os.path.dirname(__file__), "..")
    cases = [(fmt, heads, rows) for fmt in FORMATS for heads, rows in CASES.values()]
    env = dict(os.environ, TRITON_INTERPRET="0",
               PYTHONPATH=os.pathsep.join([os.path.join(root, "src"), os.environ.get("PYTHONPATH", "")]))
    code = _CHILD.format(bench=os.path.join(root, "bench"))
    run = subprocess.run([sys.executable, "-c", code, json.dumps(cases)], capture_output=True, text=True, env=env,
                         timeout=600)
    results = {(r["fmt"], r["rows"]): r for r in map(json.loads, run.stdout.splitlines())}
    if not results:
        pytest.skip(f"cannot compile for sm_90 here: {run.stderr[-300:]}")
    return results


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("case", list(CASES))
def test_default_shapes_fit_and_do_not_spill_where_it_matters(compiled, fmt, case):
    """Every default shape fits. 16-row programs (the benchmark's) and 64-row bf16 programs (8 warps
    since the H200 showed 4 warps spilling 1 KB per thread at 1.8x the time) keep their registers.
    Not asserted: 32-row programs (H = 32) still spill 96-264 bytes per thread with 4 warps, and
    64-row fp8/MXFP4 programs a little with 8. 8 warps for 32 rows were measured (docs/PERF.md
    step 26: fp8 and MXFP4 faster, bf16 slower) but are not the default yet."""
    rows = CASES[case][1]
    r = compiled[(fmt, rows)]
    assert "error" not in r, r
    assert r["shared"] <= SHARED_MEMORY_LIMIT, f"{fmt} with {rows} rows needs {r['shared']} bytes of shared memory"
    if rows <= 16 or (rows >= 64 and fmt == "bf16"):
        assert r["stack"] == 0, f"{fmt} with {rows} rows spills {r['stack']} bytes per thread"
