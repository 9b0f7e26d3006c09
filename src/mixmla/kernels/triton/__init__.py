"""The portable Triton kernels (CUDA and AMD GPUs, Triton's CPU interpreter).

``decode`` (the split-K decode kernel) and ``combine`` (the merge of its partial results) are
built from ``tiles`` (a tile of cached tokens in any format: ``bf16``, ``fp8``, ``mxfp4`` hold
each format's loading and decoding, ``pieces`` the columns each piece holds) and ``softmax`` (the
online softmax both use). ``configs`` holds the tuned kernel shapes, ``launch`` the argument lists,
``backend`` the plan/run side, ``compile`` compilation for a GPU target on any machine.
"""
