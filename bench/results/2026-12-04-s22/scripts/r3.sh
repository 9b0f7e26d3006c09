# Round 3: the cluster-merge probe (design log step 100).
set -u
R=$OUT/r3; mkdir -p $R
PYTHONPATH=$PWD/src timeout 200 python bench/studies/cluster_merge_probe.py $R > $R/probe.log 2>&1; echo "probe rc=$?"
cat $R/probe.log | tail -30
cd $OUT && tar czf r3.tgz r3 && rm -rf r3
