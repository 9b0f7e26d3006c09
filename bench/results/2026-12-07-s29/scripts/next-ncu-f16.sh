# For a later device call (no carry): ncu --set full of the 2x2 of design log step 119 at 256x8192
# (shipped, mxf16, fixedmax, fixedmax_f16; one launch each): where step 77's shorter decode's saving
# goes with the exchange (stall reasons, issue rate, the instructions that collect the samples).
# About 6 minutes on an H100 SXM.
set -u
export PYTHONPATH=$PWD/src
N=$OUT/ncu2x2; mkdir -p $N
(cd bench/studies && TRITON_INTERPRET=0 python hopper_fixedmax_variant.py $N/src > /dev/null 2>&1 \
  && TRITON_INTERPRET=0 python hopper_mxf16_variant.py $N/src > /dev/null 2>&1)
for v in "" $N/src/var_mxf16.py $N/src/var_fixedmax.py $N/src/var_fixedmax_f16.py; do
  timeout 120 python bench/studies/hopper_ncu.py $N mxfp4 256 8192 $v > /dev/null 2>&1; echo "ncu ${v:-shipped} rc=$?"
done
rm -rf $N/src $N/*.ncu-rep $N/*-source.csv
for f in $N/*-stalls.txt; do echo "== $f"; head -12 $f; grep -h "inst_executed.avg.per_cycle\|gpu__time" $f; done
