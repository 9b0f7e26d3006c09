# Session 27, call 4: the online-softmax step as one helper (patches/softmax_tile.patch's decode.py
# part, hopper_softmax_variant.py), beside the shipped MXFP4 kernel in one process, three rounds.
set -u
nvidia-smi --query-gpu=name --format=csv,noheader
export PYTHONPATH=$PWD/src:$PWD/bench/studies
D=$OUT/softmax; mkdir -p $D
python bench/studies/hopper_softmax_variant.py $D/src > /dev/null || exit 1
for round in $(seq 1 ${ROUNDS:-3}); do
  timeout 110 python bench/studies/hopper_variants.py $D/r$round $D/src/var_softmax.py \
    --shapes 256x8192,64x8192,32x8192,256x1024 --paged 1,64 > $D/r$round.log 2>&1; echo "round $round rc=$?"
  grep -E "^\| [0-9]+x[0-9]+ \| mxfp4" $D/r$round.log
done
rm -rf $D/src
