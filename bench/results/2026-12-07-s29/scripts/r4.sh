# Session 29, call 4 (no carry): the paged bench's one outlier again (4x8192 bf16 in pages of 64:
# GPU 230.2 us against a call latency of 39.2 us in call 3), three times, then call 1's MXFP4
# variants once more at 256x8192 and 64x8192 (a second round of fixedmax / fixedmax_f16 / lagmax).
set -u
export PYTHONPATH=$PWD/src
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
for i in 1 2 3; do
  timeout 60 python -m mixmla bench --paged --quick --shape 4,1,8192 --paths bf16 --peers none --out $OUT/p64-$i > $OUT/p64-$i.log 2>&1; echo "p64 run $i rc=$?"
  grep "4x8192" $OUT/p64-$i.log | grep "gpu" ; rm -f $OUT/p64-$i/bench.png
done
F=$OUT/maxvar2; mkdir -p $F
(cd bench/studies && TRITON_INTERPRET=0 python hopper_fixedmax_variant.py $F/src > /dev/null 2>&1 && TRITON_INTERPRET=0 python hopper_lagmax_variant.py $F/src > /dev/null 2>&1)
timeout 200 python bench/studies/hopper_variants.py $F $F/src/var_fixedmax.py $F/src/var_fixedmax_f16.py $F/src/var_lagmax.py --shapes 256x8192,64x8192 > $F/variants.log 2>&1; echo "variants rc=$?"
tail -4 $F/variants.log
rm -rf $F/src
