"""SM clock and board power while one decode runs back to back (design log step 82).

Per format, the 256x8192 plan's ``run`` is captured 20 times in one CUDA graph and replayed for
about 2.5 s without a flush, while ``nvidia-smi`` samples the SM and memory clocks, the power draw,
the temperature and the active throttle reasons every 50 ms. Reported per format: the time per
call (warm L2, back to back: not the benchmark's GPU time), and the median clock and power of the
samples in the middle of the run; the raw samples go to the JSON file.

    PYTHONPATH=src python3 bench/studies/power_clock.py OUT.json
"""

import json
import statistics
import subprocess
import sys
import time

import torch

import mixmla
from mixmla.inputs import generate_input

out = sys.argv[1]
q, kv_data, qo, kv, _ = generate_input(256, 1, 8192, seed=3, device="cuda")
rows = []
for fmt in ["bf16", "fp8", "mxfp4"]:
    p = mixmla.plan(kv, qo, 16, fmt)
    cache = kv_data[fmt]
    o = torch.empty(256, 16, 512, dtype=torch.bfloat16, device="cuda")
    for _ in range(3): p.run(q, cache, out=o)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(20): p.run(q, cache, out=o)
    g.replay(); torch.cuda.synchronize()
    smi = subprocess.Popen(["nvidia-smi", "--query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_event_reasons.active",
                            "--format=csv,noheader", "-lms", "50"], stdout=subprocess.PIPE, text=True)
    time.sleep(0.3)
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    t = time.time(); n = 0; e0.record()
    while time.time() - t < 2.5:
        g.replay(); n += 20
        if n % 200 == 0: torch.cuda.synchronize()
    e1.record(); torch.cuda.synchronize()
    us = e0.elapsed_time(e1) * 1e3 / n
    time.sleep(0.2); smi.terminate(); lines = smi.communicate()[0].strip().splitlines()
    samples = [l.split(", ") for l in lines]
    clk = [float(s[1].split()[0]) for s in samples if len(s) > 3]
    pw = [float(s[3].split()[0]) for s in samples if len(s) > 3]
    mid = slice(len(clk) // 5, -max(1, len(clk) // 10))  # past the ramp, before the tail
    r = {"fmt": fmt, "backend": p.backend, "us per call (warm L2, back to back)": round(us, 1),
         "sm MHz median": statistics.median_high(clk[mid]) if clk[mid] else None,
         "power W median": statistics.median_high(pw[mid]) if pw[mid] else None, "samples": lines}
    rows.append(r)
    print({k: v for k, v in r.items() if k != "samples"}, flush=True)
    time.sleep(1.0)
json.dump(rows, open(out, "w"), indent=1)
