# Session 27, call 2 (carry .whl for pytest-xdist): MXFP4 pools with codes and scales in one row
# (bench/studies/paged_mxfp4_rows.py), then the whole GPU suite in 8 processes, the tests marked
# `timing` after it in one process.
set -u
nvidia-smi --query-gpu=name --format=csv,noheader
R=$OUT/rows; mkdir -p $R
PYTHONPATH=$PWD/src timeout 200 python bench/studies/paged_mxfp4_rows.py --out $R --rounds 2 > $R/rows.log 2>&1; echo "rows rc=$?"
tail -22 $R/rows.log
PYTEST_WORKERS=8 TESTS_TIMEOUT=300 OUT=$OUT/tests timeout 380 bash bench/reliability_h200.sh tests > $OUT/tests.txt 2>&1; echo "tests rc=$?"
tail -8 $OUT/tests.txt
