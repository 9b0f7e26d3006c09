"""Constants both kernel backends compile in (Triton and Gluon share the constexpr type).

Format codes: which decoder a kernel specialization uses (one per cache encoding). LOG2E, LN2: the
kernels keep scores in base 2 (``exp2`` is one instruction) and report natural-log log-sum-exps.
"""

import triton.language as tl

FMT_BF16 = tl.constexpr(0)
FMT_FP8 = tl.constexpr(1)  #: e4m3fn
FMT_MXFP4 = tl.constexpr(2)
FMT_FP8_FNUZ = tl.constexpr(3)  #: AMD's e4m3fnuz

LOG2E = tl.constexpr(1.4426950408889634)
LN2 = tl.constexpr(0.6931471805599453)
