# Round 4: the cluster form of the Triton path: its GPU tests, then its timing against decode + combine.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target .peers .whlx/*.whl 2>&1 | tail -1
R=$OUT/r4; mkdir -p $R
export PYTHONPATH=$PWD/.peers:$PWD/src:$PWD/bench/studies
timeout 240 python -m pytest -q -n 8 -rfE --tb=short -p no:cacheprovider tests/test_clusters.py tests/test_launch.py \
  tests/test_graphs.py -m gpu > $R/tests.log 2>&1; echo "tests rc=$?: $(tail -1 $R/tests.log)"
grep -h -A25 "^____" $R/tests.log | head -60
timeout 200 python bench/studies/cluster_timing.py $R --rounds 2 > $R/timing.log 2>&1; echo "timing rc=$?"
tail -22 $R/timing.log
cd $OUT && tar czf r4.tgz r4 && rm -rf r4
