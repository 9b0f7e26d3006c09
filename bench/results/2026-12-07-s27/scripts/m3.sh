# Session 27, call 3: the MXFP4 loop's descriptor variants (hopper_desc_variants.py) beside the
# shipped kernel, two rounds on the four shapes of >= 262144 tokens (fp8's shipped kernel in the
# same run, for the ordering).
set -u
nvidia-smi --query-gpu=name --format=csv,noheader
export PYTHONPATH=$PWD/src:$PWD/bench/studies
D=$OUT/desc; mkdir -p $D
python bench/studies/hopper_desc_variants.py $D/src > /dev/null || exit 1
for round in 1 2; do
  timeout 200 python bench/studies/hopper_variants.py $D/r$round $D/src/var_valias_qpair.py $D/src/var_valias.py \
    $D/src/var_qpair.py --shapes 256x8192,64x8192,32x8192,256x1024 > $D/r$round.log 2>&1; echo "round $round rc=$?"
  tail -12 $D/r$round.log
done
rm -rf $D/src  # copies of decode.py: hopper_desc_variants.py writes them again
