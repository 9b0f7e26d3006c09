"""Paged KV caches: decode over a pool of pages through a page table (block-table or CSR form),
its argument checks, and batches laid out in shuffled pages for tests and benchmarks."""

from ..kernels.backend import PageTable
from .api import PagedDecodePlan, mla_decode_paged, mla_decode_paged_csr, plan_paged, plan_paged_csr
from .layout import PagedBatch, scatter_to_pages

__all__ = ["PageTable", "PagedDecodePlan", "plan_paged", "plan_paged_csr", "mla_decode_paged", "mla_decode_paged_csr",
           "PagedBatch", "scatter_to_pages"]
