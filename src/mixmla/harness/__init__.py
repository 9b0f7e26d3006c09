"""Measurement: timing, the HBM ceiling, peers, ``mixmla bench`` and ``mixmla eval``.

One idea per module (nothing is imported here, so ``import mixmla.harness`` stays cheap and does
not pull in Triton):

- ``stats``     pure statistics: mean/std/stderr summary, the original harness's stopping rule, geomean
- ``timing``    timers (CUDA events + L2 flush, or wall clock), call latency, GPU time
- ``ceiling``   the HBM streaming-read ceiling, measured in the same run
- ``cases``     benchmark shapes, their inputs, references and minimum byte counts
- ``verify``    strict and loose checks of one output, also for outputs of unknown format
- ``peers``     other implementations: plain PyTorch, FlashInfer, FlashMLA (each optional)
- ``report``    results.json (schema + validation), the text table, markdown, the PNG chart
- ``measure``   one implementation on one case: check, then time; the exit status
- ``bench``     ``mixmla bench``
- ``demo``      the CPU interpreter demo ``mixmla bench`` runs when no GPU is present
- ``evaluate``  ``mixmla eval test|benchmark|leaderboard``
- ``selftest``  ``mixmla test``
- ``env``       device detection, versions, the date
"""
