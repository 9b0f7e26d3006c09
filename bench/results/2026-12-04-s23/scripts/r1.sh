# Round 1 (prepared in the twenty-third session, which had no device: not run). Design log step
# 103: the MXFP4 variant with an e4m3 value tile (bench/studies/hopper_mxe4_variant.py) beside the
# shipped kernel, same inputs and run; then the twenty-second session's round 5 (the cluster form,
# which applies a patch to the device's copy of the tree, so it runs last). About 5 minutes on a
# started machine. Carry nothing special.
set -u
R=$OUT/r1; mkdir -p $R
export PYTHONPATH=$PWD/src:$PWD/bench/studies:$PWD/tests
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw --format=csv > $R/gpu.txt 2>&1
python bench/studies/hopper_mxe4_variant.py --compile > $R/compile.log 2>&1; echo "compile rc=$?"; tail -2 $R/compile.log
timeout 420 python bench/studies/hopper_variants.py $R/var bench/studies/hopper_mxe4_variant.py \
  --shapes 4x1024,32x1024,64x1024,256x1024,32x8192,64x8192,256x8192 > $R/var.log 2>&1; echo "variants rc=$?"
tail -9 $R/var.log
cd $OUT && tar czf r1.tgz r1 && rm -rf r1
