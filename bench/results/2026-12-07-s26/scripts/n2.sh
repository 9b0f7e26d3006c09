# The next session's second call (carry .whl for pytest-xdist): the whole GPU suite in 8
# processes (the twenty-fifth session's single-process run reached a third of it in 330 s).
set -u
PYTEST_WORKERS=8 TESTS_TIMEOUT=520 OUT=$OUT timeout 560 bash bench/reliability_h200.sh tests > $OUT/tests.txt 2>&1; echo "tests rc=$?"
tail -15 $OUT/tests.txt
