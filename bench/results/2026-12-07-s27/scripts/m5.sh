# Session 27, call 3: MXFP4 pages with an L2 line prefetch of the tile after next's rows
# (hopper_mxpf_variant.py, design log step 112), two rounds beside the shipped kernel.
set -u
nvidia-smi --query-gpu=name --format=csv,noheader
export PYTHONPATH=$PWD/src:$PWD/bench/studies
D=$OUT/mxpf; mkdir -p $D
python bench/studies/hopper_mxpf_variant.py $D/src > /dev/null || exit 1
for round in $(seq 1 ${ROUNDS:-2}); do
  timeout 250 python bench/studies/hopper_variants.py $D/r$round $D/src/var_mxpf.py $D/src/var_mxpfc.py \
    --shapes 256x8192,64x8192 --paged 1,64 > $D/r$round.log 2>&1; echo "round $round rc=$?"
  grep -E "^\|" $D/r$round.log
done
rm -rf $D/src  # copies of decode.py: hopper_mxpf_variant.py writes them again
# The paged rows' call latency now timed through plan_paged(...).run (harness/peers.py), two shapes.
OUT=$OUT/paged2 timeout 120 bash bench/run_h200.sh --paged --quick --shape 4,1,1024 --shape 64,1,1024 > /dev/null 2>&1; echo "paged rc=$?"
grep -E "^call/GPU|^mixmla|^flashinfer" $OUT/paged2/bench.log | head -24
