# Session 28, call 1 (carry .whl): the two-warpgroup MXFP4 study (pp_free, pp_turns) beside the shipped
# kernel, small shapes first (a deadlock in the turns would hang: short limit), then the whole GPU
# suite on the tree with the online-softmax helper (never run on a GPU before).
set -u
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
export PYTHONPATH=$PWD/src
P=$OUT/pp; mkdir -p $P
TRITON_INTERPRET=0 python bench/studies/hopper_pingpong_mxfp4.py $P/src > $P/write.log 2>&1
timeout 90 python bench/studies/hopper_variants.py $P/small $P/src/pp_free.py $P/src/pp_turns.py --shapes 4x1024,32x1024 > $P/small.log 2>&1; echo "pp small rc=$?"
tail -4 $P/small.log
timeout 200 python bench/studies/hopper_variants.py $P/large $P/src/pp_free.py $P/src/pp_turns.py --shapes 256x8192,64x8192,256x1024 > $P/large.log 2>&1; echo "pp large rc=$?"
tail -8 $P/large.log
PYTEST_WORKERS=8 TESTS_TIMEOUT=270 OUT=$OUT/tests timeout 290 bash bench/reliability_h200.sh tests > $OUT/tests.txt 2>&1; echo "tests rc=$?"
tail -6 $OUT/tests.txt
