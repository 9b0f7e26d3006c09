import os, sys, timeit, time
os.environ["TRITON_INTERPRET"]="1"
import torch
import triton.runtime.interpreter as interp
interp.InterpretedFunction.run = lambda self,*a,**k: None
import mixmla
from mixmla import api
from mixmla.kernels.triton import backend as tb
from mixmla.inputs import generate_input
def t(stmt, n=2000, before=None):
    if before:
        def f():
            before(); stmt()
        stmt2 = f
    else: stmt2 = stmt
    return min(timeit.repeat(stmt2, number=n, repeat=3, timer=time.thread_time))/n*1e6
def clear_layouts():
    getattr(api, "_LAYOUTS", {}).clear()
def clear_all():
    clear_layouts(); tb._schedule_on_device.cache_clear()
for shape in sys.argv[1:] or ["64x1024", "256x1024"]:
    b, l = map(int, shape.split("x"))
    q, kv, qo, kvp, _ = generate_input(b, 1, l, seed=1, num_heads=16, device="cpu")
    for fmt in ("bf16", "fp8"):
        cache = kv[fmt]
        p = mixmla.plan(kvp, qo, 16, fmt)
        out = torch.empty(q.shape[0], 16, 512, dtype=torch.bfloat16)
        r = dict(run=t(lambda: p.run(q, cache, out=out), 20000),
                 plan=t(lambda: mixmla.plan(kvp, qo, 16, fmt)),
                 plan_newlen=t(lambda: mixmla.plan(kvp, qo, 16, fmt), before=clear_layouts),
                 plan_newcnt=t(lambda: mixmla.plan(kvp, qo, 16, fmt), before=clear_all),
                 mla=t(lambda: mixmla.mla_decode(q, cache, kvp, qo)),
                 mla_newlen=t(lambda: mixmla.mla_decode(q, cache, kvp, qo), before=clear_layouts),
                 ck_eager=t(lambda: api.custom_kernel((q, kv, qo, kvp, {}), fmt, use_graphs=False)))
        print(f"{shape:>9} {fmt:>5} " + " ".join(f"{k}={v:.1f}" for k, v in r.items()), flush=True)
