#!/bin/bash
export PYTHONUNBUFFERED=1 PYTORCH_NO_CUDA_MEMORY_CACHING=1
R=$PWD; mkdir -p /tmp/rH
( export PYTHONPATH=$R/src
  timeout 150 python3 bench/studies/hopper_variants.py /tmp/rH/var .trees/var_merge4.py .trees/var_m4_l2.py .trees/var_m4_l2_q.py --shapes 32x8192,64x8192,256x8192,32x1024 > /tmp/rH/var.out 2>&1; echo "var rc=$?"; grep "^|" /tmp/rH/var.out )
( cd .trees/paged8 && export PYTHONPATH=$PWD/src
  timeout 120 python3 bench/studies/paged_triton.py --out /tmp/rH/paged8 --baseline bench/studies/paged_triton_baseline_main.py --quick > /tmp/rH/paged8.out 2>&1; echo "paged8 rc=$?"; grep -v "^\[" /tmp/rH/paged8.out | tail -75 )
tar czf $OUT/rH.tgz -C /tmp rH; echo done
