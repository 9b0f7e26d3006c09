# For the next session's first device call (carry .whl): the whole GPU suite and the sanitizers on the
# tree with step 118's small-page MXFP4 prefetch (never run on a GPU): the twenty-seventh session's
# next-a.sh, about 6 minutes on an H100 SXM.
bash bench/results/2026-12-07-s27/scripts/next-a.sh
