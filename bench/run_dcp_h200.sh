#!/usr/bin/env bash
# Decode context parallelism on N GPUs of one host (issue 17), in one command; no network needed.
#
#   bash bench/run_dcp_h200.sh N [extra `mixmla bench --dcp` options]
#
# N = 1: the dry run, a group of one without torchrun (the whole path: shard, check, NCCL, time).
# N >= 2: `torchrun --standalone --nproc-per-node N -m mixmla bench --dcp`, one GPU per rank.
# Default shapes: single requests of 131072, 524288 and 1048576 tokens and docs/SPEC.md's 8 shapes,
# every format, both schedules; pass --shape/--paths/--schedules/--interleave/--reps/--check-only/
# --graph-step/--budget-s to change that. NVLink multicast stays off (the machine's notes):
# NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1.
# Writes dcp.json, dcp.md and dcp.log into $OUT (default bench/out/dcp-h200x<N>-<timestamp>);
# rank 0 writes dcp.json after every case, so a run cut short keeps what it measured.
# Exit status: that of `mixmla bench --dcp` (0 when every case passed its checks).
set -uo pipefail
cd "$(dirname "$0")/.."
N="${1:?usage: bash bench/run_dcp_h200.sh N [mixmla bench --dcp options]}"
shift
OUT="${OUT:-bench/out/dcp-h200x$N-$(date +%Y%m%d-%H%M%S)}"
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 PYTHONUNBUFFERED=1
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"

{
  command -v nvidia-smi > /dev/null && nvidia-smi --query-gpu=index,name,driver_version,memory.total \
    --format=csv,noheader | sed 's/^/gpu: /' && nvidia-smi topo -m
  python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'nccl', \
'.'.join(map(str, torch.cuda.nccl.version())), 'gpus', torch.cuda.device_count())"
} 2>&1 | tee "$OUT/dcp.log"

if [ "$N" = 1 ]; then
  python3 -m mixmla bench --dcp --out "$OUT" "$@" 2>&1 | tee -a "$OUT/dcp.log"
else
  python3 -m torch.distributed.run --standalone --nproc-per-node "$N" -m mixmla bench --dcp --out "$OUT" "$@" \
    2>&1 | tee -a "$OUT/dcp.log"
fi
exit "${PIPESTATUS[0]}"
