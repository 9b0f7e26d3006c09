"""One Hopper-kernel launch per format for a profiler to capture (after two untimed warm-ups).

``ncu --clock-control none -k mla_decode_hopper_kernel --launch-skip 2 --launch-count 1 python
bench/studies/hopper_profile_target.py FMT BATCH KV_LEN [VARIANT]``; FMT ``mxfp4-staged``: the staged
kernel's form for contiguous MXFP4 caches (``HopperDecoder(staged_kernel=True)``); VARIANT: a
variant module's path as ``hopper_variants.py`` takes it (its kernel launched instead, on its own
grid).
"""

import os
import sys

import torch

from mixmla.formats import as_cache
from mixmla.inputs import generate_input
from mixmla.kernels.gluon.launch import HopperDecoder
from mixmla.reference import default_sm_scale

fmt, batch, kv_len = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
fmt, staged = fmt.removesuffix("-staged"), fmt.endswith("-staged")
q, kv, qo, kvp, _ = generate_input(batch, 1, kv_len, seed=1, device="cuda")
cache = as_cache(kv[fmt])
if len(sys.argv) > 4:
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from hopper_variants import _decoder
    dec = _decoder(sys.argv[4], batch, fmt, q.device, 0)
else:
    dec = HopperDecoder(batch, 16, fmt, q.device, staged_kernel=True if staged else None)
out = torch.empty(q.shape[0], 16, 512, dtype=torch.bfloat16, device="cuda")
lse = torch.empty(q.shape[0], 16, device="cuda")
for _ in range(3):
    dec.launch(q, cache, kvp, qo, out, lse, default_sm_scale())
torch.cuda.synchronize()
print("done", fmt, batch, kv_len)
