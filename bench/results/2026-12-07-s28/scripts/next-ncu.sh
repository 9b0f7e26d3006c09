# For a later device call (no carry): which binds the column-split trio (design log step 117), issue
# slots or shared memory: ncu --set full of the shipped MXFP4 kernel and of the trio at 256x8192,
# one launch each (hopper_ncu.py's stalls.txt: issue rate, pipe use, shared-memory wavefronts).
set -u
export PYTHONPATH=$PWD/src
N=$OUT/ncu; mkdir -p $N
TRITON_INTERPRET=0 python bench/studies/hopper_column_groups.py $N/src > /dev/null 2>&1
timeout 240 python bench/studies/hopper_ncu.py $N mxfp4 256 8192 > $N/shipped.log 2>&1; echo "shipped rc=$?"
timeout 240 python bench/studies/hopper_ncu.py $N mxfp4 256 8192 $N/src/trio.py > $N/trio.log 2>&1; echo "trio rc=$?"
rm -rf $N/src $N/*.ncu-rep $N/*-source.csv
grep -h "inst_executed.avg.per_cycle\|wavefronts_mem_shared\|gpu__time" $N/*-stalls.txt
