"""Triton kernels: tile loaders per format, the online softmax, the decode and combine kernels."""
