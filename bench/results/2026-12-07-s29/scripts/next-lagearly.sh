# For the next device call (no carry): design log step 122. First the safety inputs (scores rising by
# up to 30 between tiles; block exponents far outside [-13, 13]) through lagearly and lagearly_f16
# (no slow path: expected to fail there, with NaN rows on the staircase) and lagsafe, lagsafe_f16
# (with it: expected to pass the strict check); then the four beside the shipped kernel with
# fixedmax / fixedmax_f16 (the bounds, step 119), 256x8192, 64x8192, 32x1024 (strict check there).
# About 5 minutes on an H100 SXM.
set -u
export PYTHONPATH=$PWD/src
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
F=$OUT/lagearly; mkdir -p $F
(cd bench/studies && TRITON_INTERPRET=0 python hopper_lagmax_variant.py $F/src > /dev/null 2>&1 \
  && TRITON_INTERPRET=0 python hopper_fixedmax_variant.py $F/src > /dev/null 2>&1 \
  && TRITON_INTERPRET=0 python hopper_mxf16_variant.py $F/src > /dev/null 2>&1)
timeout 150 python bench/studies/hopper_variants.py --safety $F/src/var_lagearly.py $F/src/var_lagsafe.py \
  $F/src/var_lagearly_f16.py $F/src/var_lagsafe_f16.py > $F/safety.log 2>&1
echo "safety rc=$?"; grep "programs" $F/safety.log
timeout 260 python bench/studies/hopper_variants.py $F $F/src/var_lagearly.py $F/src/var_lagsafe.py $F/src/var_lagearly_f16.py \
  $F/src/var_lagsafe_f16.py $F/src/var_fixedmax.py $F/src/var_fixedmax_f16.py --shapes 256x8192,64x8192,32x1024 > $F/variants.log 2>&1
echo "variants rc=$?"
tail -7 $F/variants.log
rm -rf $F/src
