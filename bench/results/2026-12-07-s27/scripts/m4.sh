# Session 27, first call that ran: MXFP4 pools with codes and scales in one row
# (paged_mxfp4_rows.py, step 110), then the descriptor variants (m3.sh, step 111).
set -u
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
R=$OUT/rows; mkdir -p $R
PYTHONPATH=$PWD/src timeout 150 python bench/studies/paged_mxfp4_rows.py --out $R --rounds 2 > $R/rows.log 2>&1; echo "rows rc=$?"
tail -22 $R/rows.log
bash bench/results/2026-12-07-s27/scripts/m3.sh
