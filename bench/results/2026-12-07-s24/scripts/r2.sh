# Round 2 (prepared in the twenty-fourth session, which got no device machine: not run). Design
# log step 105's bounds (the twenty-third session's r2.sh, about three minutes), then step 107:
# bench/studies/patches/softmax_tile.patch (the online-softmax step both Hopper kernels repeat,
# folded into decode._softmax_tile; ptxas allocates registers differently in 25 of the 64 shipped
# Gluon kernels) timed against the tree without it, alternated, fp8 and MXFP4 on the Hopper
# shapes. About eight minutes on a started machine. Applies and reverts the patch on the device's
# copy (a cut run can leave it applied): run it last.
set -u
bash bench/results/2026-12-04-s23/scripts/r2.sh
R=$OUT/r2p; mkdir -p $R
export PYTHONPATH=$PWD/src
for round in 1 2; do
  for tree in main patch; do
    if [ $tree = patch ]; then git apply bench/studies/patches/softmax_tile.patch; fi
    timeout 100 python -m mixmla bench --quick --peers none --paths fp8,mxfp4 --shape 256,1,8192 --shape 64,1,8192 --shape 256,1,1024 \
      --shape 32,1,8192 --out $R/$tree-$round > $R/$tree-$round.log 2>&1; echo "$tree $round rc=$?"
    if [ $tree = patch ]; then git apply -R bench/studies/patches/softmax_tile.patch; fi
    grep -E 'mixmla (fp8|mxfp4) ' $R/$tree-$round.log | head -8
  done
done
cd $OUT && tar czf r2p.tgz r2p && rm -rf r2p
