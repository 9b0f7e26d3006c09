#!/bin/bash
# Session 7 round D: Hopper timeline with per-piece probes; paged order study (timing, ncu); paged8 if present.
export PYTHONUNBUFFERED=1
R=$PWD; mkdir -p /tmp/rD
( export PYTHONPATH=$R/src:$R/bench/studies; timeout 170 python3 bench/studies/hopper_timeline.py --out /tmp/rD/tl --shapes 32x8192,64x8192,256x8192,4x8192 > /tmp/rD/tl.out 2>&1; echo "tl rc=$?"; grep "^|" /tmp/rD/tl.out )
( export PYTHONPATH=$R/src; timeout 120 python3 bench/studies/paged_order_study.py --out /tmp/rD/order > /tmp/rD/order.out 2>&1; echo "order rc=$?"; tail -13 /tmp/rD/order.out )
( export PYTHONPATH=$R/src; timeout 150 ncu --clock-control none --kernel-name mla_decode_kernel --launch-count 6 --section SpeedOfLight --section WarpStateStats --section MemoryWorkloadAnalysis --section SchedulerStats --metrics lts__t_sector_hit_rate.pct,l1tex__t_sector_hit_rate.pct,dram__bytes_read.sum python3 bench/studies/paged_order_study.py --ncu --shapes 256x1024 --out /tmp/rD/ncu > /tmp/rD/ncu.txt 2>&1; echo "ncu rc=$?"; grep -E "mla_decode_kernel|Duration|DRAM Throughput|Memory Throughput|Stall|hit_rate|dram__bytes|Issued Warp|No Eligible|Eligible Warps|Warp Cycles Per Issued" /tmp/rD/ncu.txt | head -90 )
if [ -d .trees/paged8 ]; then
( cd .trees/paged8 && export PYTHONPATH=$PWD/src
  timeout 150 python3 bench/studies/paged_triton.py --out /tmp/rD/paged8 --baseline bench/studies/paged_triton_baseline_main.py --quick > /tmp/rD/paged8.out 2>&1; echo "paged8 rc=$?"; grep -v "^\[" /tmp/rD/paged8.out | tail -52 )
fi
tar czf $OUT/rD.tgz -C /tmp rD; echo done
