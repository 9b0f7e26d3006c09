"""Kernel backends behind one interface (``backend``): ``triton/``, the portable Triton kernels
(GPUs and Triton's CPU interpreter), and ``gluon/``, the Hopper kernels; ``ptx`` holds the NVIDIA
inline PTX both use."""
