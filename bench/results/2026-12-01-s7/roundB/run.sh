#!/bin/bash
# Session 7 round B: paged7 windowed gather vs main's kernel; plan7 vs main host cost, alternated.
export PYTHONUNBUFFERED=1
R=$PWD; mkdir -p /tmp/rB
( cd .trees/paged7 && export PYTHONPATH=$PWD/src MIXMLA_SOURCE_COMMIT=74cb341
  timeout 220 python3 bench/studies/paged_triton.py --out /tmp/rB/paged7 --baseline bench/studies/paged_triton_baseline_main.py --quick > /tmp/rB/paged7.out 2>&1; echo "paged7 rc=$?"; tail -45 /tmp/rB/paged7.out )
HC="bench/host_cost.py --shapes 4x1024,64x1024 --formats bf16,fp8 --calls 200 --paged --paged-shapes 4x1024 --page-sizes 64"
for i in 1 2; do
  ( export PYTHONPATH=$R/src MIXMLA_SOURCE_COMMIT=653fa02; timeout 60 python3 $HC --out /tmp/rB/main$i > /tmp/rB/main$i.out 2>&1; echo "main$i rc=$?"; tail -14 /tmp/rB/main$i.out )
  ( cd .trees/plan7 && export PYTHONPATH=$PWD/src MIXMLA_SOURCE_COMMIT=9237ba6; timeout 60 python3 $HC --out /tmp/rB/plan7_$i > /tmp/rB/plan7_$i.out 2>&1; echo "plan7_$i rc=$?"; tail -14 /tmp/rB/plan7_$i.out )
done
tar czf $OUT/rB.tgz -C /tmp rB; echo done
