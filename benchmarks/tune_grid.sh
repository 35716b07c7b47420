#!/bin/bash
# The tuned variants' shape grid on one GPU host (benchmarks/RESULTS.md, "Tuned schedules on a shape grid"),
# one rank per GPU: NPROC of them (default 2; NPROC=4 with benchmarks/grids/four_gpus.json).
# usage (repository root, on the GPU host): [NPROC=4] OUT=/some/dir bash benchmarks/tune_grid.sh [GRID_FILE] [extra runners.grid args]
set -u
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
OUT="${OUT:?set OUT}"
NPROC="${NPROC:-2}"
GRID="${1:-benchmarks/grids/two_gpus.json}"
shift || true
mkdir -p "$OUT"
nvidia-smi -L | tee "$OUT/gpus.txt"
python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "nccl", torch.cuda.nccl.version())' \
    | tee -a "$OUT/gpus.txt"
python3 -m torch.distributed.run --standalone --nproc-per-node "$NPROC" -m runners.grid --grid "$GRID" --out "$OUT" "$@" 2>&1 \
    | grep -v -e Warning -e 'warnings.warn' -e 'return func' | tee "$OUT/grid.log"
