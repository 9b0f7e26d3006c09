"""Drop-in entry points with a peer's argument names and output shapes, for code that calls
FlashMLA or FlashInfer today (docs/SERVING.md maps vLLM's and SGLang's MLA backends onto them).

- ``flash_mla_with_kvcache`` / ``get_mla_metadata``: FlashMLA's dense decode (block table).
- ``BatchMLAPagedAttentionWrapper``: FlashInfer's MLA wrapper (CSR pages, split q and cache).

Both read mixmla's fp8 and MXFP4 pools as well as bf16 ones, and run on the Triton kernels.
"""

from .flashinfer import BatchMLAPagedAttentionWrapper
from .flashmla import MlaMetadata, flash_mla_with_kvcache, get_mla_metadata

__all__ = ["flash_mla_with_kvcache", "get_mla_metadata", "MlaMetadata", "BatchMLAPagedAttentionWrapper"]
