"""CPU time of the calling thread per call (us) of ``mla_decode`` and ``plan`` (and ``run``), for
A/B runs of two trees on one machine: ``PYTHONPATH=<tree>/src python cpu_time_ab.py [--quick]
SHAPE...``.

As ``../2026-12-01-host8-cpu/cpu_time_ab.py`` without its paged rows: Triton's interpreter with
every kernel run replaced by nothing (mixmla's Python only), ``time.thread_time``, min of 3
repeats; ``*_newlen`` columns forget the lengths before each call (``api._LAYOUTS`` and
``validate._ORDERED``, what ``bench/host_cost.py``'s ``forget_lengths`` empties). One torch CPU
thread.

``--compiled``: the GPU's launch path instead of the interpreter's (``TritonPlan._compiled`` set to
``launch.SHARED``, as on CUDA tensors): ``launch.run`` (the dispatcher's first sight of a key) hands
back stand-in ``CompiledKernel`` objects whose launcher does nothing, and ``launcher_call_is_known``
says yes, so the Python of ``call_key``, ``CompiledLaunches.launch`` and ``bound_launch`` runs as on
a GPU, minus the C launch itself.
"""
import os, sys, time, timeit
os.environ["TRITON_INTERPRET"] = "1"
import torch
torch.set_num_threads(1)
import triton.runtime.interpreter as interp
interp.InterpretedFunction.run = lambda self, *a, **k: None
import mixmla
from mixmla import api, validate
from mixmla.inputs import generate_input

QUICK = "--quick" in sys.argv
if "--compiled" in sys.argv:
    from triton.compiler import CompiledKernel
    from mixmla.kernels.triton import backend, launch

    class _Runner:
        global_scratch_size = profile_scratch_size = 0
        launch_cooperative_grid = launch_pdl = False

        def launch(self, *args):
            pass

    def _fake_run(one):
        k = CompiledKernel.__new__(CompiledKernel)
        k._run, k.function, k.packed_metadata = _Runner(), 0, ()
        return k

    launch.run = _fake_run
    launch.launcher_call_is_known = lambda cls: True
    launch.SHARED = launch.CompiledLaunches(current_device=lambda: 0, current_stream=lambda device: 0)
    _use_workspace = backend.TritonPlan.use_workspace

    def _compiled_use_workspace(self, *args, **kwargs):
        _use_workspace(self, *args, **kwargs)
        self._compiled = launch.SHARED

    backend.TritonPlan.use_workspace = _compiled_use_workspace
N = 500 if QUICK else 2000


def t(stmt, n=N, before=None):
    fn = stmt
    if before:
        def fn():
            before(); stmt()
    return min(timeit.repeat(fn, number=n, repeat=3, timer=time.thread_time)) / n * 1e6


def forget():
    api._LAYOUTS.clear()
    validate._ORDERED.clear()


print(f"tree {os.path.dirname(os.path.dirname(mixmla.__file__))}" + (" (compiled launch path)" if "--compiled" in sys.argv else ""), flush=True)
for shape in [a for a in sys.argv[1:] if not a.startswith("--")] or ["4x1024", "64x1024"]:
    b, l = map(int, shape.split("x"))
    q, kv, qo, kvp, _ = generate_input(b, 1, l, seed=1, num_heads=16, device="cpu")
    for fmt in ("bf16", "fp8"):
        cache = kv[fmt]
        p = mixmla.plan(kvp, qo, 16, fmt)
        out = torch.empty(q.shape[0], 16, 512, dtype=torch.bfloat16)
        r = dict(run=t(lambda: p.run(q, cache, out=out), N * 5),
                 plan=t(lambda: mixmla.plan(kvp, qo, 16, fmt)),
                 plan_newlen=t(lambda: mixmla.plan(kvp, qo, 16, fmt), before=forget),
                 mla=t(lambda: mixmla.mla_decode(q, cache, kvp, qo)),
                 mla_newlen=t(lambda: mixmla.mla_decode(q, cache, kvp, qo), before=forget))
        print(f"{shape:>9} {fmt:>5} " + " ".join(f"{k}={v:.1f}" for k, v in r.items()), flush=True)
