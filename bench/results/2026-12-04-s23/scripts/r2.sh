# Round 2 (prepared in the twenty-third session, not run): design log step 105, bounds of the
# shipped MXFP4 loop's shared-memory side. About 3 minutes on a started machine.
set -u
R=$OUT/r2; mkdir -p $R
export PYTHONPATH=$PWD/src:$PWD/bench/studies:$PWD/tests
# The shipped MXFP4 loop without its value-tile stores, its value products, or
# both (bounds, wrong by design: their "ok" columns are False).
python bench/studies/hopper_smem_bounds.py $R/bounds > /dev/null
timeout 240 python bench/studies/hopper_variants.py $R/bnd $R/bounds/var_nostore.py $R/bounds/var_novalue.py \
  $R/bounds/var_neither.py --shapes 256x1024,64x8192,256x8192 > $R/bounds.log 2>&1; echo "bounds rc=$?"
tail -4 $R/bounds.log
cd $OUT && tar czf r2.tgz r2 && rm -rf r2
