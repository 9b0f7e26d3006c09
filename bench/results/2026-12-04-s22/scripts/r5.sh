# Round 5 (prepared in the twenty-second session, not run: no device time left): the cluster form's
# timing with a real two-launch baseline, the driver's count of clusters that fit at once, and the
# two-launch plan's decode launched in clusters (design log step 101). Applies the patch to the
# device's copy of the tree first; about two minutes on a started machine.
set -u
git apply bench/studies/patches/triton_clusters.patch || { echo "the patch does not apply"; exit 1; }
R=$OUT/r5; mkdir -p $R
export PYTHONPATH=$PWD/src:$PWD/bench/studies
timeout 300 python bench/studies/cluster_timing.py $R --rounds 2 --shapes 4x1024,32x1024,64x1024,32x8192,64x8192 \
  > $R/timing.log 2>&1; echo "timing rc=$?"
tail -16 $R/timing.log
grep -o '"max_active_clusters": [^,}]*\|"clusters_launched": [0-9]*' $R/cluster_timing.jsonl | paste - - | head -20
cd $OUT && tar czf r5.tgz r5 && rm -rf r5
