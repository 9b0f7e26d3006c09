#!/usr/bin/env bash
# The whole comparison on a GPU (written for the H200), in one command; works without network.
#
#   bash bench/run_h200.sh [extra `mixmla bench` options, e.g. --quick or --shape 32,1,8192]
#
# - Installs the peers' wheels from .whl/ (FlashInfer; see docs/DEVELOPING.md)
#   into .peers/ when .whl/ is present; without it FlashInfer is reported as "not installed".
# - Runs `mixmla bench` (docs/SPEC.md's 8 shapes x bf16/fp8/mxfp4/auto + torch, FlashInfer, FlashMLA),
#   which must finish within its 480 s budget, writing results.json, summary.md, bench.png and
#   bench.log into $OUT (default bench/out/h200-<timestamp>).
# - Prints the short table last.
# Exit status: that of `mixmla bench` (0 when every mixmla path passed its strict check).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-bench/out/h200-$(date +%Y%m%d-%H%M%S)}"
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"

if compgen -G ".whl/*.whl" > /dev/null; then
  echo "installing $(ls .whl/*.whl | wc -l) peer wheels from .whl/ into .peers/ ($(du -sh .whl | cut -f1))"
  if python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target .peers .whl/*.whl; then
    export PYTHONPATH="$PWD/.peers:$PYTHONPATH"
  else
    echo "WARNING: the peer wheels did not install; FlashInfer will be reported as not installed"
  fi
else
  echo "no .whl/ folder: FlashInfer will be reported as not installed (docs/PERF.md: how to bring the wheels)"
fi

command -v nvidia-smi > /dev/null && nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem,memory.total \
  --format=csv,noheader 2>/dev/null | sed 's/^/gpu: /'
python3 - <<'PY' 2>/dev/null
import importlib.util
for m in ("flashinfer", "flash_mla"):
    spec = importlib.util.find_spec(m)
    print(f"peer module {m}: {'found at ' + spec.origin if spec else 'absent'}")
PY

python3 -m mixmla bench --budget-s 480 --out "$OUT" "$@" 2>&1 | tee "$OUT/bench.log"
rc=${PIPESTATUS[0]}

echo
echo "=== short table (call latency mean / GPU time, us) ==="
if [ -f "$OUT/results.json" ]; then
  python3 -m mixmla.harness.report "$OUT/results.json" --short
else
  echo "no results.json was written (exit status $rc)"
fi
exit "$rc"
