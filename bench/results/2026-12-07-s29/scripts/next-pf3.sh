# For a later device call (no carry): the small-page MXFP4 prefetch one tile further ahead
# (bench/studies/hopper_pfdist_variant.py, var_pf3) beside the shipped kernel, contiguous and in
# shuffled pages of 1 and 64, 256x8192 and 64x8192. About 3 minutes on an H100 SXM.
set -u
export PYTHONPATH=$PWD/src
F=$OUT/pf3; mkdir -p $F
(cd bench/studies && TRITON_INTERPRET=0 python hopper_pfdist_variant.py $F/src > /dev/null 2>&1)
timeout 180 python bench/studies/hopper_variants.py $F $F/src/var_pf3.py --shapes 256x8192,64x8192 --paged 1,64 > $F/variants.log 2>&1; echo "pf3 rc=$?"
tail -6 $F/variants.log
rm -rf $F/src
