# Round 1 (prepared in the twenty-third session, which had no device: not run). Design log steps
# 103-104: the MXFP4 variants with an e4m3 value tile (bench/studies/hopper_mxe4_variant.py: f16
# products; hopper_mxe4x_variant.py: e4m3 products) beside the shipped kernel, same inputs and
# run, the strict check where the reference is affordable (up to 65536 tokens: 4x8192 is the long-context check). About 6 minutes on a
# started machine. Carry nothing special. r3.sh (the cluster form) patches the tree: run it last.
set -u
R=$OUT/r1; mkdir -p $R
export PYTHONPATH=$PWD/src:$PWD/bench/studies:$PWD/tests
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw --format=csv > $R/gpu.txt 2>&1
for v in hopper_mxe4_variant hopper_mxe4x_variant; do
  python bench/studies/$v.py --compile > $R/compile-$v.log 2>&1; echo "$v compile rc=$?"; tail -n 1 $R/compile-$v.log
done
timeout 540 python bench/studies/hopper_variants.py $R/var bench/studies/hopper_mxe4_variant.py bench/studies/hopper_mxe4x_variant.py \
  --shapes 4x1024,4x8192,32x1024,64x1024,256x1024,32x8192,64x8192,256x8192 > $R/var.log 2>&1; echo "variants rc=$?"
tail -9 $R/var.log
cd $OUT && tar czf r1.tgz r1 && rm -rf r1
