import os, time, statistics
os.environ["TRITON_INTERPRET"] = "0"
import torch, triton
from triton.runtime.jit import create_function_from_signature, compute_cache_key
from triton.compiler import make_backend
from mixmla.kernels.triton import compile as tc, launch
plan, ls = tc.plan_launches(tc.example_layout("fp8", 16, 1, split=True))
b = make_backend(tc.SM90)
def t(fn, n=5000):
    for _ in range(100): fn()
    a=time.perf_counter()
    for _ in range(n): fn()
    return (time.perf_counter()-a)/n*1e6
for one in ls:
    k = one.kernel
    binder = create_function_from_signature(k.signature, k.params, b)
    kw = dict(one.options, debug=False, instrumentation_mode="")
    cache = {}
    def dispatch():
        bound, spec, opts = binder(*one.args, **kw)
        key = compute_cache_key(cache, spec, opts)
        return [v for v in bound.values()]
    print(k.fn.__name__, "dispatcher bind+key (no launch):", round(t(dispatch), 1), "us;", len(one.args), "args")

