#!/usr/bin/env bash
# Reliability run on a CUDA GPU (written for the H200): GPU tests, then compute-sanitizer.
#
# Usage, from the repository root (no pip install needed, no network needed):
#     OUT=/path/to/results bash bench/reliability_h200.sh [all|tests|sanitize]
#   all       (default) both stages; each stage is sized to finish within 10 minutes, so on a
#             machine with a per-command limit run `tests` and `sanitize` as two commands
#   tests     1. python3 -m pytest -m gpu tests/            (every GPU-marked test of the suite)
#             2. tests/test_validate.py, test_reliability.py, test_property.py, test_kernel_configs.py in full (their
#                unmarked tests then run on the GPU too)
#   sanitize  3. bench/sanitize_driver.py once plainly (compiles the kernels, checks results)
#             4. compute-sanitizer memcheck (full matrix), racecheck, initcheck and synccheck
#                (--quick subset) over the same driver, with PYTORCH_NO_CUDA_MEMORY_CACHING=1
# Writes at most 9 files into $OUT (default bench/out/reliability) and prints a summary last;
# exits non-zero if any step failed. Per-tool time limits (seconds) can be set with
# MEMCHECK_TIMEOUT, RACECHECK_TIMEOUT, INITCHECK_TIMEOUT, SYNCCHECK_TIMEOUT, TESTS_TIMEOUT.
# PYTEST_WORKERS=N runs the test stage's pytest in N processes (pytest-xdist, importable or in
# .whl/ as wheels: docs/DEVELOPING.md), spreading the kernels' compiles over N processes; the tests
# marked `timing` (they assert a measured time, which N processes sharing the GPU would stretch)
# then run in one process after the others.
set -u
cd "$(dirname "$0")/.."
STAGE=${1:-all}
OUT=${OUT:-bench/out/reliability}
mkdir -p "$OUT"
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
SUMMARY="$OUT/summary.txt"
: >"$SUMMARY"
commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
dirty=$(git status --porcelain 2>/dev/null | grep -q . && echo " (+ uncommitted changes)" || true)
gpu=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)
{
  echo "mixmla reliability run $(date -u +%Y-%m-%dT%H:%MZ), commit $commit$dirty"
  echo "gpu: ${gpu:-unknown}; torch $(python3 -c 'import torch;print(torch.__version__, torch.version.cuda)' 2>/dev/null); triton $(python3 -c 'import triton;print(triton.__version__)' 2>/dev/null)"
} >>"$SUMMARY"
status=0
note() { echo "$*" >>"$SUMMARY"; }

XDIST=""
if [ -n "${PYTEST_WORKERS:-}" ]; then
  if ! python3 -c "import xdist" 2>/dev/null && compgen -G ".whl/pytest_xdist-*.whl" > /dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target .peers .whl/pytest_xdist-*.whl \
      .whl/execnet-*.whl && export PYTHONPATH="$PWD/.peers:$PYTHONPATH"
  fi
  if python3 -c "import xdist" 2>/dev/null; then XDIST="-n $PYTEST_WORKERS"; else note "PYTEST_WORKERS: pytest-xdist not found, one process"; fi
fi

pytest_line() {  # the final "N passed, M skipped ..." line of a pytest log
  grep -E ' in [0-9.]+s|no tests ran' "$1" | tail -1 | sed 's/=//g; s/^ *//'
}

if [ "$STAGE" = all ] || [ "$STAGE" = tests ]; then
  set -o pipefail
  if [ -n "$XDIST" ]; then
    timeout "${TESTS_TIMEOUT:-280}" python3 -m pytest -m "gpu and not timing" tests/ -q -rfEx -p no:cacheprovider \
      $XDIST 2>&1 | tee "$OUT/pytest_gpu.log" | tail -5
    rc=$?
    note "pytest -m 'gpu and not timing' tests/ ($XDIST): rc=$rc; $(pytest_line "$OUT/pytest_gpu.log")"
    [ $rc -eq 0 ] || status=1
    timeout 120 python3 -m pytest -m "gpu and timing" tests/ -q -rfEx -p no:cacheprovider 2>&1 \
      | tee "$OUT/pytest_timing.log" | tail -5
    rc=$?
    note "pytest -m 'gpu and timing' tests/ (one process): rc=$rc; $(pytest_line "$OUT/pytest_timing.log")"
  else
    timeout "${TESTS_TIMEOUT:-280}" python3 -m pytest -m gpu tests/ -q -rfEx -p no:cacheprovider 2>&1 \
      | tee "$OUT/pytest_gpu.log" | tail -5
    rc=$?
    note "pytest -m gpu tests/: rc=$rc; $(pytest_line "$OUT/pytest_gpu.log")"
  fi
  [ $rc -eq 0 ] || status=1
  timeout "${TESTS_TIMEOUT:-280}" python3 -m pytest tests/test_validate.py tests/test_reliability.py \
    tests/test_property.py tests/test_kernel_configs.py -q -rfEx -p no:cacheprovider $XDIST 2>&1 | tee "$OUT/pytest_reliability.log" | tail -5
  rc=$?
  note "pytest test_validate/test_reliability/test_property/test_kernel_configs (all, on the GPU): rc=$rc; $(pytest_line "$OUT/pytest_reliability.log")"
  [ $rc -eq 0 ] || status=1
  set +o pipefail
fi

if [ "$STAGE" = all ] || [ "$STAGE" = sanitize ]; then
  python3 bench/sanitize_driver.py >"$OUT/driver.log" 2>&1
  rc=$?
  note "sanitize_driver (plain): rc=$rc; $(tail -1 "$OUT/driver.log")"
  [ $rc -eq 0 ] || status=1

  SAN=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer /opt/nvidia/*/compute-sanitizer 2>/dev/null | head -1)
  if [ -z "$SAN" ]; then
    note "compute-sanitizer: NOT FOUND on this machine; sanitizer steps skipped"
    status=1
  else
    export PYTORCH_NO_CUDA_MEMORY_CACHING=1
    run_tool() {  # tool, timeout, log, driver args...
      local tool=$1 limit=$2 log=$3; shift 3
      timeout "$limit" "$SAN" --tool "$tool" --error-exitcode 99 --print-limit 200 \
        python3 bench/sanitize_driver.py "$@" >"$log" 2>&1
      local rc=$?
      local verdict sumline
      sumline=$(grep -E '(ERROR|RACECHECK) SUMMARY' "$log" | tail -1 | sed 's/^=* *//')
      if grep -q -E 'Device not supported' "$log"; then
        verdict="UNAVAILABLE (the sanitizer cannot instrument this GPU/runtime)"
      elif [ $rc -eq 124 ]; then
        verdict="TIMEOUT after ${limit}s"
      elif [ $rc -eq 0 ]; then
        verdict="clean"
      else
        verdict="FAIL (rc=$rc)"
      fi
      [ "$verdict" = clean ] || status=1
      local kernels
      kernels=$(grep -oE 'in (mla_[a-z_]+|[A-Za-z_]*kernel[A-Za-z_0-9]*)' "$log" | sort | uniq -c | tr '\n' ';')
      note "compute-sanitizer --tool $tool $*: $verdict; ${sumline:-no summary line}; $(grep -o 'sanitize_driver:.*' "$log" | tail -1)${kernels:+ reported in: $kernels}"
    }
    run_tool memcheck "${MEMCHECK_TIMEOUT:-240}" "$OUT/memcheck.log"
    run_tool racecheck "${RACECHECK_TIMEOUT:-150}" "$OUT/racecheck.log" --quick
    run_tool initcheck "${INITCHECK_TIMEOUT:-100}" "$OUT/initcheck.log" --quick
    run_tool synccheck "${SYNCCHECK_TIMEOUT:-60}" "$OUT/synccheck.log" --quick
  fi
fi

note "overall: $([ $status -eq 0 ] && echo PASS || echo 'FAIL (see the logs beside this file)')"
echo
echo "===== reliability summary ====="
cat "$SUMMARY"
exit $status
