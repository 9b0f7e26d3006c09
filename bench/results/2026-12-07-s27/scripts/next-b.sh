# For the next session's second device call (carry .whl), best on an H200: host cost (issue 12),
# the bench with FlashInfer and the device-aware 'auto' of steps 108 and 114 (issue 13), the paged
# bench (issue 14). This session's m1.sh, which ran on an H100 SXM.
bash bench/results/2026-12-07-s27/scripts/m1.sh
