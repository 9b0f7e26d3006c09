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
    PagedCache,
    as_paged_cache,
    empty_paged_cache,
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
from .paged import (  # noqa: E402
    PagedDecodePlan,
    mla_decode_paged,
    mla_decode_paged_csr,
    plan_paged,
    plan_paged_csr,
)
from .reference import mla_decode_paged_reference, mla_decode_reference  # noqa: E402
from .writer import append_kv  # noqa: E402
from . import ops as _ops  # noqa: E402,F401  (registers torch.ops.mixmla.*)
from . import distributed  # noqa: E402  (mixmla.distributed: decode context parallelism)

__version__ = "0.1.0"

__all__ = [
    "mla_decode", "plan", "DecodePlan", "custom_kernel", "KernelConfig",
    "Bf16Cache", "Fp8Cache", "Mxfp4Cache", "as_cache", "quantize", "quantize_fp8", "quantize_mxfp4", "dequantize",
    "mla_decode_reference",
    "mla_decode_paged", "mla_decode_paged_csr", "plan_paged", "plan_paged_csr", "PagedDecodePlan",
    "PagedCache", "as_paged_cache", "empty_paged_cache", "mla_decode_paged_reference", "append_kv",
    "distributed",
]
