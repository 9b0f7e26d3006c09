# Round 2: the host-path tests on main and on the one-call repeat, then host_cost of both trees alternated twice.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target .peers .whl/*.whl 2>&1 | tail -1
R=$OUT/r2; mkdir -p $R
for tree in main patch; do
  if [ $tree = main ]; then S=$PWD/src; T=tests; else S=$PWD/.trees/patch/src; T=.trees/patch/tests; fi
  PYTHONPATH=$PWD/.peers:$S timeout 200 python -m pytest -q -n 4 -rfE --tb=short -p no:cacheprovider \
    $T/test_host_path.py $T/test_launch.py $T/test_graphs.py > $R/tests-$tree.log 2>&1
  echo "tests $tree rc=$?: $(tail -1 $R/tests-$tree.log)"
done
sleep 20
for i in 1 2; do
  for tree in main patch; do
    if [ $tree = main ]; then S=$PWD/src; else S=$PWD/.trees/patch/src; fi
    PYTHONPATH=$PWD/.peers:$S MIXMLA_SOURCE_COMMIT=$1-$tree timeout 150 python bench/host_cost.py --out $R/host-$tree-$i \
      --calls 80 --shapes 4x1024,64x1024,256x1024 > $R/host-$tree-$i.log 2>&1
    echo "host $tree $i rc=$?"
  done
done
for f in $R/host-*.log; do echo "== $f"; grep -E " (plan|mla_decode) {3}" $f | awk "{print \$1, \$2, \$3, \$4}" | tr "\n" ";"; echo; done
cd $OUT && tar czf r2.tgz r2 && rm -rf r2
