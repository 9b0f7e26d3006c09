#!/bin/bash
# Session 7 round E: Hopper merge variants (one part per step, prefetched; + next request's q/rows prefetch).
export PYTHONUNBUFFERED=1 PYTORCH_NO_CUDA_MEMORY_CACHING=1
R=$PWD; mkdir -p /tmp/rE
( export PYTHONPATH=$R/src MIXMLA_SOURCE_COMMIT=$(git rev-parse --short HEAD 2>/dev/null || echo main)
  timeout 300 python3 bench/studies/hopper_variants.py /tmp/rE/var .trees/var_merge.py .trees/var_merge_qpf.py --shapes 32x8192,64x8192,256x8192,32x1024,4x1024 > /tmp/rE/var.out 2>&1; echo "var rc=$?"; grep "^|" /tmp/rE/var.out )
tar czf $OUT/rE.tgz -C /tmp rE; echo done
