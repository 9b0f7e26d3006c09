# Session 28, call 3 (no carry needed): MXFP4 with each tile's columns split between the warpgroups of a
# program (bench/studies/hopper_column_groups.py): pair (2 warpgroups, 2 programs per SM, 128 registers,
# spills) and trio (3 warpgroups, 1 program per SM, 168 registers) beside the shipped kernel.
set -u
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
export PYTHONPATH=$PWD/src
G=$OUT/groups; mkdir -p $G
TRITON_INTERPRET=0 python bench/studies/hopper_column_groups.py $G/src > $G/write.log 2>&1
timeout 90 python bench/studies/hopper_variants.py $G/small $G/src/pair.py $G/src/trio.py --shapes 4x1024,32x1024 > $G/small.log 2>&1; echo "small rc=$?"
tail -4 $G/small.log
timeout 150 python bench/studies/hopper_variants.py $G/large $G/src/pair.py $G/src/trio.py --shapes 256x8192 > $G/large.log 2>&1; echo "large rc=$?"
tail -7 $G/large.log
rm -rf $G/src
