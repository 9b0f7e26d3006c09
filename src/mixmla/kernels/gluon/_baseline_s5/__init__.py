"""STUDY COPY, to be deleted after the H200 comparison: the Hopper kernel (decode.py, mxfp4.py,
paging.py) as shipped at main c36e4c2, for ``bench/studies/hopper_variants.py _baseline_s5``
against the branch's kernel. Nothing in the library imports it."""

from .decode import mla_decode_hopper_kernel  # noqa: F401
