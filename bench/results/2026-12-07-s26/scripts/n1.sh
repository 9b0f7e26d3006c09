# Session 26, call 1 (carry .whl): the whole bench with FlashInfer beside it (the device-aware
# 'auto'), then the cluster round (step 101), which patches the device's copy and so runs last.
set -u
export MIXMLA_SOURCE_COMMIT=${MIXMLA_SOURCE_COMMIT:-38c79c0}
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
OUT=$OUT/bench timeout 330 bash bench/run_h200.sh --quick > /dev/null 2>&1; echo "bench rc=$?"
grep -E "^\| (4|32|64|256)x" $OUT/bench/summary.md | grep -E "mixmla|flashinfer" | cut -d'|' -f2-3,6,10 | head -48
tail -14 $OUT/bench/bench.log
git apply bench/studies/patches/triton_clusters.patch || exit 1
R=$OUT/r5; mkdir -p $R
PYTHONPATH=$PWD/src:$PWD/bench/studies timeout 200 python bench/studies/cluster_timing.py $R --rounds 2 \
  --shapes 4x1024,32x1024,64x1024,32x8192 > $R/timing.log 2>&1; echo "clusters rc=$?"
tail -16 $R/timing.log
git apply -R bench/studies/patches/triton_clusters.patch
