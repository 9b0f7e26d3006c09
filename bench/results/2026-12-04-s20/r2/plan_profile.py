"""cProfile and primitive costs of plan() on the GPU (round 2, session 20)."""
import cProfile, io, pstats, statistics, sys, time
import torch, mixmla
from mixmla.inputs import generate_input

def med(fn, n=300, burst=20):
    ts = []
    for _ in range(n // burst):
        torch.cuda.synchronize()
        for _ in range(burst):
            t = time.perf_counter(); fn(); ts.append((time.perf_counter() - t) * 1e6)
    return statistics.median(ts)

dev = torch.device("cuda", 0)
print("torch.empty 512 i32", round(med(lambda: torch.empty(512, dtype=torch.int32, device=dev)), 1))
print("torch.zeros 512 i32", round(med(lambda: torch.zeros(512, dtype=torch.int32, device=dev)), 1))
print("torch.empty 4.4M f32", round(med(lambda: torch.empty(4400000, dtype=torch.float32, device=dev)), 1))
pin = torch.zeros(260, dtype=torch.int32, pin_memory=True)
print("zeros pinned 260", round(med(lambda: torch.zeros(260, dtype=torch.int32, pin_memory=True)), 1))
print("pinned .to non_blocking", round(med(lambda: pin.to(dev, non_blocking=True)), 1))
dst = torch.empty(260, dtype=torch.int32, device=dev)
print("copy_ pinned->dev non_blocking", round(med(lambda: dst.copy_(pin, non_blocking=True)), 1))
data = generate_input(256, 1, 1024, seed=1, num_heads=16, device="cuda")
q, kv, qo, kvp, _ = data
kvh, qoh = kvp.cpu(), qo.cpu()
for label, fmt, a, b in (("bf16 dev", "bf16", kvp, qo), ("fp8 dev", "fp8", kvp, qo), ("mxfp4 dev", "mxfp4", kvp, qo),
                         ("mxfp4 host", "mxfp4", kvh, qoh)):
    fn = lambda: mixmla.plan(a, b, 16, fmt, device=dev)
    for _ in range(30): fn()
    print(label, "plan median us", round(med(fn), 1), "backend", fn().backend)
    pr = cProfile.Profile()
    torch.cuda.synchronize(); pr.enable()
    for _ in range(400): fn()
    pr.disable()
    s = io.StringIO(); pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(16); print(s.getvalue()[-3200:])
