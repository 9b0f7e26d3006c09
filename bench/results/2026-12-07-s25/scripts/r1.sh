# Round 1 of the twenty-fifth session: the twenty-fourth session's r1 (not run there) with the
# twenty-third session's eight shapes for the MXFP4 e4m3 variants (design log steps 103-104) after
# the small shapes' cold-code study (step 106), which also times the Triton plan with one stage of
# 32-token tiles (less code). Each part under its own timeout; rows print as they come.
set -u
export PYTHONPATH=$PWD/src:$PWD/bench/studies:$PWD/tests
C=$OUT/cold; mkdir -p $C
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw --format=csv > $C/gpu.txt 2>&1; cat $C/gpu.txt
timeout 200 python bench/studies/cold_code.py $C --reps 100 --shapes 4x1024,32x1024,4x8192 \
  --backends auto,gluon,triton/block_t=32/num_stages=1 > $C/cold.log 2>&1; echo "cold rc=$?"
grep -v Warning $C/cold.log | tail -30
R=$OUT/r1; mkdir -p $R
timeout 340 python bench/studies/hopper_variants.py $R/var bench/studies/hopper_mxe4_variant.py bench/studies/hopper_mxe4x_variant.py \
  --shapes 256x8192,4x8192,4x1024,32x1024,64x1024,256x1024,32x8192,64x8192 > $R/var.log 2>&1; echo "variants rc=$?"
grep -v Warning $R/var.log | tail -12 | cut -c1-400
cd $OUT && tar czf r1.tgz r1 cold && rm -rf r1 cold
