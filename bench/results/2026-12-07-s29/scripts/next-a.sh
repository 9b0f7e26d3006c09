# For the next session's first device call (no carry): design log steps 122 (lagearly, with the
# fixedmax / mxf16 references) and 121 (pf3: the small-page prefetch a tile further ahead), one call.
# About 8 minutes on an H100 SXM.
bash bench/results/2026-12-07-s29/scripts/next-lagearly.sh
bash bench/results/2026-12-07-s29/scripts/next-pf3.sh
