# Session 29, call 3 (carry .whl): the paged bench (step 118's small-page MXFP4 prefetch, its first GPU
# run) and the bench, both --quick with FlashInfer.
export MIXMLA_SOURCE_COMMIT=96eb6d3; nvidia-smi --query-gpu=name --format=csv,noheader; OUT=$OUT/paged timeout 250 bash bench/run_h200.sh --paged --quick > /dev/null 2>&1; echo "paged rc=$?"; grep -A40 "paged / contiguous\|x contiguous" $OUT/paged/bench.log | head -45; rm -f $OUT/paged/results.json; OUT=$OUT/bench timeout 200 bash bench/run_h200.sh --quick > /dev/null 2>&1; echo "bench rc=$?"; tail -14 $OUT/bench/bench.log
