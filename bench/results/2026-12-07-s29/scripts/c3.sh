# Session 29, call 3 (no carry): what the MXFP4 loop's per-tile maximum costs, and whether step 77's
# shorter f16 decode pays once that exchange is gone: fixedmax and fixedmax_f16
# (bench/studies/hopper_fixedmax_variant.py) beside the shipped kernel. About 4 minutes on an H100 SXM.
set -u
export PYTHONPATH=$PWD/src
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
F=$OUT/fixedmax; mkdir -p $F
(cd bench/studies && TRITON_INTERPRET=0 python hopper_fixedmax_variant.py $F/src > /dev/null 2>&1)
timeout 260 python bench/studies/hopper_variants.py $F $F/src/var_fixedmax.py $F/src/var_fixedmax_f16.py --shapes 256x8192,64x8192,32x1024 > $F/fixedmax.log 2>&1; echo "fixedmax rc=$?"
tail -12 $F/fixedmax.log
rm -rf $F/src
