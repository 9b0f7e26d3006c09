#!/bin/bash
# Session 7 round C: pg3 (L1 page-entry prefetch; append_kv load order), paged8, host8, vs main.
export PYTHONUNBUFFERED=1
R=$PWD; mkdir -p /tmp/rC
if [ -d .trees/pg3 ]; then
( cd .trees/pg3 && export PYTHONPATH=$PWD/src MIXMLA_SOURCE_COMMIT=$(cat COMMIT 2>/dev/null)
  timeout 150 python3 bench/studies/paged_triton.py --out /tmp/rC/pg3 --baseline bench/studies/paged_triton_baseline_main.py --quick > /tmp/rC/pg3.out 2>&1; echo "pg3 rc=$?"; grep -v "^\[" /tmp/rC/pg3.out | tail -52 )
fi
if [ -d .trees/paged8 ]; then
( cd .trees/paged8 && export PYTHONPATH=$PWD/src
  timeout 150 python3 bench/studies/paged_triton.py --out /tmp/rC/paged8 --baseline bench/studies/paged_triton_baseline_main.py --quick > /tmp/rC/paged8.out 2>&1; echo "paged8 rc=$?"; grep -v "^\[" /tmp/rC/paged8.out | tail -52 )
fi
for i in 1 2; do
  ( export PYTHONPATH=$R/src; timeout 40 python3 bench/studies/append_kv_study.py --out /tmp/rC/ap_main$i > /tmp/rC/ap_main$i.out 2>&1; echo "ap_main$i rc=$?"; tail -8 /tmp/rC/ap_main$i.out )
  ( cd .trees/pg3 && export PYTHONPATH=$PWD/src; timeout 40 python3 bench/studies/append_kv_study.py --out /tmp/rC/ap_pg3_$i > /tmp/rC/ap_pg3_$i.out 2>&1; echo "ap_pg3_$i rc=$?"; tail -8 /tmp/rC/ap_pg3_$i.out )
done
if [ -d .trees/host8 ]; then
HC="bench/host_cost.py --shapes 4x1024,64x1024 --formats bf16,fp8 --calls 200 --paged --paged-shapes 4x1024 --page-sizes 1,64"
for i in 1 2; do
  ( export PYTHONPATH=$R/src; timeout 60 python3 $HC --out /tmp/rC/main$i > /tmp/rC/main$i.out 2>&1; echo "main$i rc=$?"; grep -v "^ *[0-9x/]* *\(bf16\|fp8\)" /tmp/rC/main$i.out | tail -22 )
  ( cd .trees/host8 && export PYTHONPATH=$PWD/src; timeout 60 python3 $HC --out /tmp/rC/host8_$i > /tmp/rC/host8_$i.out 2>&1; echo "host8_$i rc=$?"; grep -v "^ *[0-9x/]* *\(bf16\|fp8\)" /tmp/rC/host8_$i.out | tail -22 )
done
fi
( export PYTHONPATH=$R/src:$R/bench/studies; timeout 150 python3 bench/studies/hopper_timeline.py --out /tmp/rC/tl --shapes 32x8192,64x8192,256x8192 > /tmp/rC/tl.out 2>&1; echo "tl rc=$?"; grep "^|" /tmp/rC/tl.out )
tar czf $OUT/rC.tgz -C /tmp rC; echo done
