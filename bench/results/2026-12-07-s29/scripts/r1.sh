# Session 29, call 1 (no carry): the MXFP4 loop's per-tile maximum. fixedmax / fixedmax_f16
# (bench/studies/hopper_fixedmax_variant.py: the exchange removed, a bound; on the shipped and on step
# 77's f16 decode) and lagmax / lagmax_f16 (bench/studies/hopper_lagmax_variant.py: each tile shifted
# by the previous tiles' maximum, the exchange off the path to P, one barrier fewer), beside the
# shipped kernel, one process. About 8 minutes on an H100 SXM.
set -u
export PYTHONPATH=$PWD/src
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
F=$OUT/maxvar; mkdir -p $F
(cd bench/studies && TRITON_INTERPRET=0 python hopper_fixedmax_variant.py $F/src > /dev/null 2>&1 && TRITON_INTERPRET=0 python hopper_lagmax_variant.py $F/src > /dev/null 2>&1)
ls $F/src
timeout 540 python bench/studies/hopper_variants.py $F $F/src/var_fixedmax.py $F/src/var_fixedmax_f16.py $F/src/var_lagmax.py $F/src/var_lagmax_f16.py --shapes 256x8192,64x8192,32x1024 > $F/variants.log 2>&1; echo "variants rc=$?"
tail -24 $F/variants.log
rm -rf $F/src
