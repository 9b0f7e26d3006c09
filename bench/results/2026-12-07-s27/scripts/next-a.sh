# For the next session's first device call (carry .whl): the whole GPU suite on the tree with the
# online-softmax helper (PERF step 113; never run on a GPU) in 8 processes, its `timing` tests
# after it in one process, then the four sanitizers. About 5 minutes on an H100 SXM.
set -u
nvidia-smi --query-gpu=name --format=csv,noheader
PYTEST_WORKERS=8 TESTS_TIMEOUT=300 OUT=$OUT/tests timeout 340 bash bench/reliability_h200.sh tests > $OUT/tests.txt 2>&1; echo "tests rc=$?"
tail -6 $OUT/tests.txt
OUT=$OUT/san timeout 220 bash bench/reliability_h200.sh sanitize > $OUT/sanitize.txt 2>&1; echo "sanitize rc=$?"
tail -7 $OUT/sanitize.txt
