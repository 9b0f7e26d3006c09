import os, sys, time, statistics
os.environ["TRITON_INTERPRET"] = "1"
import torch, mixmla
import triton.runtime.interpreter as interp
interp.InterpretedFunction.run = lambda self, *a, **k: None   # no kernel runs: mixmla's Python only
from mixmla import api
from mixmla.inputs import generate_input
def t(fn, n=300):
    for _ in range(30): fn()
    xs=[]
    for _ in range(n):
        a=time.perf_counter(); fn(); xs.append((time.perf_counter()-a)*1e6)
    return statistics.median(xs)
res = {}
for shape in ((4,1024),(64,1024),(256,1024)):
    data = generate_input(shape[0], 1, shape[1], seed=1, device="cpu")
    q, kv, qo, kvp, cfg = data
    for fmt in ("bf16","fp8","mxfp4"):
        p = mixmla.plan(kvp, qo, 16, fmt)
        out = torch.empty(q.shape[0], 16, 512, dtype=torch.bfloat16)
        c = kv[fmt]
        r = [t(lambda: p.run(q, c, out=out)), t(lambda: mixmla.plan(kvp, qo, 16, fmt), 150),
             t(lambda: mixmla.mla_decode(q, c, kvp, qo), 150), t(lambda: api.custom_kernel(data, fmt, use_graphs=False))]
        print(f"{shape[0]}x{shape[1]} {fmt}: run {r[0]:.1f} plan {r[1]:.1f} mla_decode {r[2]:.1f} custom_kernel eager {r[3]:.1f}", flush=True)
