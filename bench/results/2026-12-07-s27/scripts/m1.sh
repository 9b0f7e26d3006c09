# Session 27, call 1 (carry .whl): the state of issues 12-14 on whatever machine came:
# host cost per call (issue 12), the bench with FlashInfer (issue 13), the paged bench (issue 14).
set -u
export MIXMLA_SOURCE_COMMIT=${MIXMLA_SOURCE_COMMIT:-unknown}
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
H=$OUT/host; mkdir -p $H
PYTHONPATH=$PWD/src timeout 150 python bench/host_cost.py --out $H --calls 80 --shapes 4x1024,64x1024,256x1024 > $H/host.log 2>&1; echo "host rc=$?"
tail -22 $H/host.log
OUT=$OUT/bench timeout 200 bash bench/run_h200.sh --quick > /dev/null 2>&1; echo "bench rc=$?"
tail -14 $OUT/bench/bench.log
OUT=$OUT/paged timeout 230 bash bench/run_h200.sh --paged --quick > /dev/null 2>&1; echo "paged rc=$?"
grep -A40 "paged / contiguous\|x contiguous" $OUT/paged/bench.log | head -45
