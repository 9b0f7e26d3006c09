# Round 1 of the twenty-fourth session (short: the session's device time was spent on refused
# starts): the small shapes' cold-code study (bench/studies/cold_code.py, design log step 106),
# then the twenty-third session's r1 (design log steps 103-104: the MXFP4 e4m3 variants beside the
# shipped kernel) at 256x8192 and 4x8192 (the long-context strict check). Each part under its own
# timeout; rows print as they come.
set -u
export PYTHONPATH=$PWD/src:$PWD/bench/studies:$PWD/tests
C=$OUT/cold; mkdir -p $C
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw --format=csv > $C/gpu.txt 2>&1; cat $C/gpu.txt
timeout 110 python bench/studies/cold_code.py $C --reps 100 --shapes 4x1024,32x1024,4x8192 --backends auto,gluon > $C/cold.log 2>&1; echo "cold rc=$?"
cat $C/cold.log | grep -v Warning | tail -12
R=$OUT/r1; mkdir -p $R
timeout 240 python bench/studies/hopper_variants.py $R/var bench/studies/hopper_mxe4_variant.py bench/studies/hopper_mxe4x_variant.py \
  --shapes 256x8192,4x8192 > $R/var.log 2>&1; echo "variants rc=$?"
grep -h "shape" $R/var.log | cut -c1-400
cd $OUT && tar czf r1.tgz r1 && rm -rf r1
