# For the next session (carry .whl), on an H200 if one is lent: host cost (issue 12), the bench with FlashInfer (issue 13), the
# paged bench (issue 14, step 118's small-page MXFP4 prefetch): the twenty-seventh session's m1.sh.
bash bench/results/2026-12-07-s27/scripts/m1.sh
