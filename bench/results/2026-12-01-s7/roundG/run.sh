#!/bin/bash
export PYTHONUNBUFFERED=1 PYTORCH_NO_CUDA_MEMORY_CACHING=1
R=$PWD; mkdir -p /tmp/rG
( export PYTHONPATH=$R/src
  timeout 240 python3 bench/studies/hopper_variants.py /tmp/rG/var .trees/var_merge.py .trees/var_merge4.py --shapes 32x8192,64x8192,256x8192,4x8192,32x1024,4x1024 > /tmp/rG/var.out 2>&1; echo "var rc=$?"; grep "^|" /tmp/rG/var.out )
( export PYTHONPATH=$R/src:$R/bench/studies; timeout 200 python3 bench/studies/hopper_timeline.py --out /tmp/rG/tl --kernels shipped,.trees/var_merge4.py --shapes 32x8192,256x8192 > /tmp/rG/tl.out 2>&1; echo "tl rc=$?"; grep "^|" /tmp/rG/tl.out | cut -d'|' -f2-5,16- )
tar czf $OUT/rG.tgz -C /tmp rG; echo done
