# Round 5 (prepared in the twenty-second session, not run: no device time left): the cluster form's
# timing with a real two-launch baseline, and the two-launch plan's decode launched in clusters.
# Run from a tree with bench/studies/patches/triton_clusters.patch applied.
set -u
R=$OUT/r5; mkdir -p $R
export PYTHONPATH=$PWD/src:$PWD/bench/studies
timeout 200 python bench/studies/cluster_timing.py $R --rounds 2 --shapes 4x1024,32x1024,64x1024,32x8192 > $R/timing.log 2>&1; echo "timing rc=$?"
tail -16 $R/timing.log
cd $OUT && tar czf r5.tgz r5 && rm -rf r5
