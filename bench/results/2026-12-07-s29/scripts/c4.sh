# Session 29, call 4 (no carry): ncu of the column-split trio against the shipped kernel (step 117):
# the twenty-eighth session's next-ncu.sh.
bash bench/results/2026-12-07-s28/scripts/next-ncu.sh
