# Session 29, call 2 (carry .whl): the whole GPU suite and the sanitizers on the tree with step 118
# (its first GPU run): the twenty-seventh session's next-a.sh.
bash bench/results/2026-12-07-s27/scripts/next-a.sh
