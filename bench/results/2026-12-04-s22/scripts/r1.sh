set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target .peers .whlx/*.whl 2>&1 | tail -1
R=$OUT/r1; mkdir -p $R
nvidia-smi --query-gpu=name,clocks.sm --format=csv,noheader > $R/gpu.txt
for tree in main patch; do
  if [ $tree = main ]; then S=$PWD/src; T=tests; else S=$PWD/.trees/patch/src; T=.trees/patch/tests; fi
  start=$(date +%s)
  PYTHONPATH=$PWD/.peers:$S timeout 250 python -m pytest -q -n 4 -rfE --tb=long -p no:cacheprovider \
    --junitxml=$R/$tree.xml $T/test_host_path.py $T/test_launch.py $T/test_graphs.py > $R/$tree.log 2>&1
  echo "$tree rc=$? $(( $(date +%s) - start )) s: $(tail -1 $R/$tree.log)"
done
grep -h -A3 "^FAILED\|^ERROR" $R/*.log | head -20
cd $OUT && tar czf r1.tgz r1 && rm -rf r1
