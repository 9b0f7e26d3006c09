# For the next device call (no carry): design log step 122. First the staircase inputs (scores
# rising by up to 30 between tiles) through lagearly (expected: NaN rows where it would need its slow
# path) and lagsafe (its slow path: expected to pass the strict check); then lagearly / lagsafe /
# lagearly_f16 (each tile's maxima read back at the end of that tile, so nothing waits for the
# exchange before P) beside the shipped kernel, with fixedmax / fixedmax_f16 (the bounds, step 119)
# and mxf16 in the same process, 256x8192, 64x8192, 32x1024 (strict check there). About 4 minutes on
# an H100 SXM.
set -u
export PYTHONPATH=$PWD/src
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
F=$OUT/lagearly; mkdir -p $F
(cd bench/studies && TRITON_INTERPRET=0 python hopper_lagmax_variant.py $F/src > /dev/null 2>&1 \
  && TRITON_INTERPRET=0 python hopper_fixedmax_variant.py $F/src > /dev/null 2>&1 \
  && TRITON_INTERPRET=0 python hopper_mxf16_variant.py $F/src > /dev/null 2>&1)
timeout 120 python bench/studies/hopper_variants.py --staircase $F/src/var_lagearly.py $F/src/var_lagsafe.py > $F/staircase.log 2>&1
echo "staircase rc=$?"; cat $F/staircase.log | grep staircase
timeout 280 python bench/studies/hopper_variants.py $F $F/src/var_lagearly.py $F/src/var_lagsafe.py $F/src/var_lagearly_f16.py \
  $F/src/var_fixedmax.py $F/src/var_fixedmax_f16.py $F/src/var_mxf16.py --shapes 256x8192,64x8192,32x1024 > $F/variants.log 2>&1
echo "variants rc=$?"
tail -7 $F/variants.log
rm -rf $F/src
