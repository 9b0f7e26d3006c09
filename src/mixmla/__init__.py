"""mixmla: MLA (DeepSeek forward-absorb) decode attention over bf16, fp8 and MXFP4 KV caches.

Quick start::

    import mixmla
    out = mixmla.mla_decode(q, cache, kv_indptr)             # any cache format
    p = mixmla.plan(kv_indptr, num_heads=16, fmt="mxfp4")     # serving loops: plan once ...
    out = p.run(q, mixmla.quantize_mxfp4(kv))                 # ... run many times (graph-safe)
"""

from . import interpreter as _interpreter

# Before anything below imports Triton (see mixmla.interpreter).
_interpreter.use_without_cuda()

from .api import DecodePlan, custom_kernel, mla_decode, plan  # noqa: E402
from .formats import (  # noqa: E402
    Bf16Cache,
    Fp8Cache,
    Mxfp4Cache,
    as_cache,
    dequantize,
    quantize,
    quantize_fp8,
    quantize_mxfp4,
)
from .kernels.triton.configs import KernelConfig  # noqa: E402
from .reference import mla_decode_reference  # noqa: E402
from . import distributed  # noqa: E402  (mixmla.distributed: decode context parallelism)

__version__ = "0.1.0"

__all__ = [
    "mla_decode", "plan", "DecodePlan", "custom_kernel", "KernelConfig",
    "Bf16Cache", "Fp8Cache", "Mxfp4Cache", "as_cache", "quantize", "quantize_fp8", "quantize_mxfp4", "dequantize",
    "mla_decode_reference", "distributed",
]
