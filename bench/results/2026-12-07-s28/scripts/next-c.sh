# For a later device call (no carry): what the MXFP4 loop's per-tile maximum costs (the fixedmax bound,
# bench/studies/hopper_fixedmax_variant.py) beside the shipped kernel. About 2 minutes.
set -u
export PYTHONPATH=$PWD/src
F=$OUT/fixedmax; mkdir -p $F
(cd bench/studies && TRITON_INTERPRET=0 python hopper_fixedmax_variant.py $F/src > /dev/null 2>&1)
timeout 200 python bench/studies/hopper_variants.py $F $F/src/var_fixedmax.py --shapes 256x8192,64x8192,32x1024 > $F/fixedmax.log 2>&1; echo "fixedmax rc=$?"
tail -7 $F/fixedmax.log
rm -rf $F/src
