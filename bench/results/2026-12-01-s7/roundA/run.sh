#!/bin/bash
# Session 7 round A: vreg7 variant vs shipped (main 653fa02), small7 one-launch study.
export PYTHONUNBUFFERED=1 PYTORCH_NO_CUDA_MEMORY_CACHING=1
R=$PWD; mkdir -p /tmp/rA
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader
( export PYTHONPATH=$R/src MIXMLA_SOURCE_COMMIT=653fa02+vreg7-07c8be3
  timeout 200 python3 bench/studies/hopper_variants.py /tmp/rA/vreg .trees/hopper_vreg_variant.py --paged 1,64 > /tmp/rA/vreg.out 2>&1; echo "vreg rc=$?"; tail -40 /tmp/rA/vreg.out )
( cd .trees/small7 && export PYTHONPATH=$PWD/src MIXMLA_SOURCE_COMMIT=f85472f
  timeout 200 python3 bench/studies/small_onelaunch.py --out /tmp/rA/small7 > /tmp/rA/small7.out 2>&1; echo "small7 rc=$?"; tail -40 /tmp/rA/small7.out )
tar czf $OUT/rA.tgz -C /tmp rA; echo done
