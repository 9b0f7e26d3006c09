"""mixmla: MLA (DeepSeek forward-absorb) decode attention over bf16, fp8 and MXFP4 KV caches.

Quick start::

    import mixmla
    out = mixmla.mla_decode(q, cache, kv_indptr)             # any cache format
    p = mixmla.plan(kv_indptr, num_heads=16, fmt="mxfp4")     # serving loops: plan once ...
    out = p.run(q, mixmla.quantize_mxfp4(kv))                 # ... run many times (graph-safe)
"""

from .api import DecodePlan, custom_kernel, mla_decode, plan
from .formats import (
    Bf16Cache,
    Fp8Cache,
    Mxfp4Cache,
    as_cache,
    dequantize,
    quantize,
    quantize_fp8,
    quantize_mxfp4,
)
from .plan import KernelConfig
from .reference import mla_decode_reference

__version__ = "0.1.0"

__all__ = [
    "mla_decode", "plan", "DecodePlan", "custom_kernel", "KernelConfig",
    "Bf16Cache", "Fp8Cache", "Mxfp4Cache", "as_cache", "quantize", "quantize_fp8", "quantize_mxfp4", "dequantize",
    "mla_decode_reference",
]
