"""CPU time of the calling thread per call (us) of mixmla's host entry points, for A/B runs of two
trees on one machine: ``PYTHONPATH=<tree>/src python cpu_time_ab.py [--quick] SHAPE...``.

As ``../2026-12-01-plan7-cpu/cpu_time_ab.py`` (Triton's interpreter with every kernel run replaced by
nothing: mixmla's Python only; ``time.thread_time``, min of 3 repeats), plus paged entry points.
``*_newlen`` columns forget the lengths before each call (``api._LAYOUTS`` and
``validate._ORDERED``, what ``bench/host_cost.py``'s ``forget_lengths`` empties; plan7's script
emptied the first only). Paged: pools of zeros laid out as ``bench/host_cost.py``'s
``paged_batch``, pages of 1 and 64 tokens. One torch CPU thread (on this 2-core machine the thread pool's
hand-offs made the CSR table reductions swing by 10x).
"""
import os, sys, time, timeit
os.environ["TRITON_INTERPRET"] = "1"
import torch
torch.set_num_threads(1)  # torch's CPU thread pool made the table reductions of paged checks noisy
import triton.runtime.interpreter as interp
interp.InterpretedFunction.run = lambda self, *a, **k: None
import mixmla
from mixmla import api, validate
from mixmla.inputs import generate_input
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", ".."))
from bench.host_cost import paged_batch  # noqa: E402  (this tree's bench: same inputs for both trees)

QUICK = "--quick" in sys.argv
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
    for page in (1, 64):
        d = paged_batch(b, l, page, "bf16", "cpu", seed=b + l)
        qq, pool, bt, lens, qo2 = d["q"], d["pool"], d["block_table"], d["seq_lens"], d["qo_indptr"]
        ind, idx = d["kv_indptr"], d["kv_indices"]
        r = dict(plan_paged=t(lambda: mixmla.plan_paged(bt, lens, page, qo2, 16, "bf16")),
                 mla_paged=t(lambda: mixmla.mla_decode_paged(qq, pool, bt, lens)),
                 mla_paged_newlen=t(lambda: mixmla.mla_decode_paged(qq, pool, bt, lens), before=forget),
                 mla_paged_csr=t(lambda: mixmla.mla_decode_paged_csr(qq, pool, ind, idx, lens)))
        print(f"{shape + '/' + str(page):>9} {'bf16':>5} " + " ".join(f"{k}={v:.1f}" for k, v in r.items()),
              flush=True)
