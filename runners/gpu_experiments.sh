#!/bin/bash
# The GPU runs behind sample_traces/ and benchmarks/RESULTS.md, as one command
# for a 2-GPU host (each launch is runners.launch = torchrun, one process per GPU).
#
# usage (repo root, on the GPU host):  OUT=/some/dir bash runners/gpu_experiments.sh [STEP...]
# STEP names: env smoke1 nvfuser-import thunder four-ranks grid4 grid2-rs gemm-speed sweep-rs rs-chunks rs-tuned-steps app-run sweep-symm sweep-ag ag-gate ag-tuned-steps ag-base ag-tuned ag-tune-nccl ag-tune-steps gemm-rs
#             symm-fused symm-two fsdp-main fsdp-prefetch symm-all symm-all-reversed fsdp-all nsys smoke-gemm-rs
#             smoke-symm smoke-fsdp check
#             (default: the list below, which made the older sample sets; the ag-gemm tuned sets came
#             from: env sweep-ag ag-tuned-steps check, ag-gate sweep-ag check, nsys check; the gemm-rs and
#             symm-mem sweeps from: env rs-chunks sweep-rs app-run rs-tuned-steps, then sweep-rs
#             sweep-symm app-run)
# Every step writes under $OUT/r/<step>/ and the whole tree is re-tarred to $OUT/results.tgz after
# each step, so a call cut short still returns what was done. BUDGET_S stops starting new steps.
set -u
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
export LD_LIBRARY_PATH="$PWD/.nsys-libs:${LD_LIBRARY_PATH:-}"
export NSYS="${NSYS:-/opt/nvidia/nsight-compute/2025.3.1/host/target-linux-x64/nsys}"
OUT="${OUT:?set OUT}"
R="$OUT/r"
BUDGET_S="${BUDGET_S:-540}"
NPROC="${NPROC:-2}"
mkdir -p "$R"
T0=$(date +%s)
L() { python3 -m runners.launch "$@" --nproc "$NPROC" --timeout 240; }

step() {  # step NAME: run function s_NAME unless the time budget is spent
    local now=$(( $(date +%s) - T0 ))
    if (( now > BUDGET_S )); then echo "=== skip $1 (elapsed ${now}s > budget ${BUDGET_S}s)"; return; fi
    echo "=== $1 (t=${now}s)"
    "s_$1" 2>&1 | tee "$R/$1.log" | grep -v -e '^\s*$' -e Warning -e warn | tail -40
    tar czf "$OUT/results.tgz" -C "$OUT" r
}

s_env() {
    nvidia-smi -L; nvidia-smi topo -m | head -5
    python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "gpus", torch.cuda.device_count(), "nccl", torch.cuda.nccl.version())'
    "$NSYS" --version
}
# `overlapscope sweep` itself, the acceptance command of the runners issue: its analyzer needs
# msgspec/typer/rich/sqlite-utils, which the host lacks: carry .pydeps (runners/pack_host_deps.sh).
OSC() { PYTHONPATH="$PWD/.pydeps:$PWD:${PYTHONPATH:-}" COLUMNS=220 python3 -m overlapscope "$@"; }
s_sweep-ag() {
    OSC sweep ag-gemm M=16384 K=8192 N=8192 steps=4 dtype=bf16 --out "$R/sweep-ag" --timeout 400
    OSC analyze "$R/sweep-ag/tuned" --no-diagnose
    OSC analyze "$R/sweep-ag/tuned" --no-diagnose --steps 1
}
# gemm-rs: the acceptance sweep, then the findings on the tuned and fused-ref traces
s_sweep-rs() {
    OSC sweep gemm-rs M=16384 K=16384 N=8192 steps=4 dtype=bf16 --out "$R/sweep-rs" --timeout 400
    for v in tuned fused-ref; do OSC analyze "$R/sweep-rs/$v" | sed -n '/^findings/,$p'; done
}
s_rs-chunks() { for s in 4 2 8; do python3 benchmarks/gemm_chunks.py 16384 8192 8192 $s; done; }
s_rs-tuned-steps() {
    for s in 2 8; do L gemm-rs --variants tuned,fused-ref --set steps=$s --profiler none --out "$R/rs-steps$s"; done
}
# the app's Run page, headless (streamlit AppTest), its button reproducing a recorded sample on the GPUs
s_app-run() {
    PYTHONPATH="$PWD:${PYTHONPATH:-}" python3 benchmarks/app_run_page.py "$PWD/sample_traces" "${APP_SAMPLE:-gemm-rs/ring}" \
        "$R/app-runs" "$R/app-run.json"
}
s_ag-tuned-steps() {  # the tuned schedule at S=2 and S=8, traced (the S=4 one is in the sweep)
    for s in 2 8; do
        L ag-gemm --variants tuned --set steps=$s --profiler torch --out "$R/tuned-steps$s"
        OSC analyze "$R/tuned-steps$s" --no-diagnose
    done
}
s_ag-gate() {  # the barrier/GEMM dispatch race: tuned with and without the gate, inside full sweeps
    local i=0
    for g in 0 16000 0 16000; do
        i=$((i + 1)); local d="$R/gate$g-run$i"
        OSC sweep ag-gemm M=16384 K=8192 N=8192 steps=4 dtype=bf16 comm_first=$g profile_steps=10 \
            --out "$d" --timeout 400 > "$d.log" 2>&1; grep -E "^│ (tuned|fused-ref) " "$d.log"
        OSC analyze "$d/tuned" --no-diagnose --no-align -f json | python3 -c "import json, sys
for r in json.load(sys.stdin)['ranks']:
    steps = ' '.join('%.2f' % i['overlap_ratio'] for i in r['iterations'])
    print('comm_first $g: rank', r['rank'], 'whole %.3f' % r['overlap_ratio'], 'steps', steps)"
    done
}
s_ag-base()  { L ag-gemm --variants baseline,sync-in-loop,sync-before-loop,host-sync --profiler torch --out "$R/ag-gemm"; }
# one GEMM alone on each GPU, over fresh buffer sets and rounds: the ag-gemm step GEMM and the
# gemm-rs 32768 x 4096 x 8192 grid shape's per-rank GEMM (benchmarks/gemm_speed_probe.py says why)
s_gemm-speed() {
    local g shape
    for shape in "4096 8192 8192" "32768 2048 8192"; do
        for g in $(seq 0 $((NPROC - 1))); do
            nvidia-smi -i "$g" --query-gpu=index,clocks.sm,clocks.max.sm,power.draw,power.limit,temperature.gpu,clocks_throttle_reasons.active --format=csv,noheader
            python3 benchmarks/gemm_speed_probe.py $shape --sets 8 --rounds 10 --device "$g"
        done
    done
}
s_ag-tuned() { L ag-gemm --variants tuned,fused-ref --profiler torch --out "$R/ag-gemm-tuned"; }
s_ag-tune-nccl() {
    L ag-gemm --variants tuned,sync-before-loop --set tuned_comm=nccl --profiler none --out "$R/tune-nccl-default"
    for c in 4 8 16; do
        L ag-gemm --variants tuned,sync-before-loop --set tuned_comm=nccl --set nccl_max_ctas=$c --profiler none \
          --out "$R/tune-nccl-ctas$c"
    done
}
s_ag-tune-steps() {
    for s in 2 8; do L ag-gemm --variants tuned,sync-before-loop --set steps=$s --profiler none --out "$R/tune-steps$s"; done
}
s_gemm-rs()     { L gemm-rs --variants all --profiler torch --out "$R/gemm-rs"; }
s_symm-fused()  { L symm-mem --variants fused-ag-matmul,fused-matmul-rs --profiler torch --out "$R/symm-mem"; }
s_symm-two()    { L symm-mem --variants two-stream,two-stream-sleep --profiler torch --out "$R/symm-mem-two"; }
s_fsdp-main()   { L fsdp --variants baseline,zero3,zero2,front-loaded --profiler torch --out "$R/fsdp"; }
s_fsdp-prefetch() { L fsdp --variants zero3-no-prefetch,zero3-prefetch,zero2-no-prefetch --profiler torch --out "$R/fsdp-prefetch"; }
# every variant of one algorithm in one launch (sample_traces/symm-mem, sample_traces/fsdp and their second
# recordings in benchmarks/recordings), with each GPU's SM clock, power and temperature sampled every 100 ms
# beside it ($R/clocks-STEP.csv)
CLOCKS() {  # CLOCKS NAME COMMAND...: run the command while nvidia-smi samples the GPUs
    local name=$1; shift
    nvidia-smi --query-gpu=index,timestamp,clocks.sm,power.draw,temperature.gpu --format=csv,noheader -lms 100 \
        > "$R/clocks-$name.csv" &
    local smi=$!
    "$@"; local rc=$?
    kill "$smi"; return $rc
}
FSDP_ALL=baseline,front-loaded,zero2,zero2-no-prefetch,zero3,zero3-no-prefetch,zero3-prefetch
s_symm-all() { CLOCKS symm-all L symm-mem --variants all --profiler torch --out "$R/symm-mem"; }
s_symm-all-reversed() {
    CLOCKS symm-all-reversed L symm-mem --variants two-stream-sleep,two-stream,fused-matmul-rs,fused-ag-matmul \
        --profiler torch --out "$R/symm-mem-reversed"
}
s_fsdp-all() { CLOCKS fsdp-all L fsdp --variants "$FSDP_ALL" --set iters=15 --profiler torch --out "$R/fsdp"; }
# every other algorithm's variants at the current runners, timings and correctness only (the
# traced samples of these come from the default list)
s_sweep-symm() { OSC sweep symm-mem M=16384 K=16384 N=8192 dtype=bf16 --out "$R/sweep-symm" --timeout 400; }
s_smoke-gemm-rs() { L gemm-rs --variants all --profiler none --out "$R/smoke-gemm-rs"; }
s_smoke-symm()    { L symm-mem --variants all --profiler none --out "$R/smoke-symm-mem"; }
s_smoke-fsdp()    { L fsdp --variants all --profiler none --out "$R/smoke-fsdp"; }
# one rank of each FSDP runner, every variant at 2 blocks (their shared step: runners/training.py); .pydeps
# carries lightning-thunder for the second; each bounded to 60 s
s_smoke1() {
    NPROC=1 timeout -k 5 60 python3 -m runners.launch fsdp --variants all --set layers=2 --profiler none \
        --out "$R/smoke1-fsdp" --nproc 1 --timeout 55
    PYTHONPATH="$PWD/.pydeps:$PWD:${PYTHONPATH:-}" timeout -k 5 60 python3 -m runners.launch thunder-fsdp \
        --variants all --set layers=2 --profiler none --out "$R/smoke1-thunder" --nproc 1 --timeout 55
}
s_nsys() {
    L ag-gemm --variants sync-in-loop,sync-before-loop --profiler nsys --no-nsys-rep --out "$R/ag-gemm-nsys"
}
# Does nvFuser's wheel import on this host? NVFUSER_TXZ: the nvfuser-cu130-torch210 wheel unpacked without its
# bundled libnvrtc (109 MB; the host's torch brings libnvrtc.so.13) and packed with xz to fit a device call
# (docs/seeds.md says how it is made); its libnvrtc name is linked to the host's copy.
s_nvfuser-import() {
    local d=/tmp/nvfuser-site
    rm -rf "$d" && mkdir -p "$d" && tar xJf "${NVFUSER_TXZ:-.nvfuser/nvfuser-no-nvrtc.tar.xz}" -C "$d"
    local nvrtc
    nvrtc=$(python3 -c 'import glob, os, nvidia
print(sorted(f for p in nvidia.__path__ for f in glob.glob(os.path.join(p, "**", "libnvrtc.so.13*"), recursive=True))[0])')
    ls "$d"; echo "host nvrtc: $nvrtc"
    ln -sf "$nvrtc" "$d/nvfuser_cu130_torch210.libs/libnvrtc-a49e67e8.so.13.0.88"
    python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'
    PYTHONPATH="$d:${PYTHONPATH:-}" python3 -c 'import nvfuser_direct; print("nvfuser_direct imported:", nvfuser_direct.__file__)'
    echo "import exit code: $?"
}
# Thunder's own FSDP (runners/thunder_fsdp.py), `overlapscope sweep` with its analysis: .pydeps made by
# `bash runners/pack_host_deps.sh 3.12 thunder` carries lightning-thunder 0.2.6 beside the analyzer's deps
s_thunder() {
    OSC sweep thunder-fsdp profile_steps=2 --nproc "${THUNDER_NPROC:-2}" --out "$R/thunder-fsdp" --timeout 480
}
# one 4-rank set per algorithm (run with NPROC=4): 2 profiled steps each, the FSDP models at 2 blocks
s_four-ranks() {
    L ag-gemm --variants tuned --set profile_steps=2 --profiler torch --out "$R/four/ag-gemm"
    L gemm-rs --variants tuned --set profile_steps=2 --profiler torch --out "$R/four/gemm-rs"
    L symm-mem --variants two-stream --set profile_steps=2 --profiler torch --out "$R/four/symm-mem"
    L fsdp --variants zero3 --set profile_steps=2 --set layers=2 --profiler torch --out "$R/four/fsdp"
    PYTHONPATH="$PWD/.pydeps:${PYTHONPATH:-}" L thunder-fsdp --variants zero3-block --set profile_steps=2 \
        --set layers=2 --profiler torch --out "$R/four/thunder-fsdp"
}
# the tuned grid on 4 GPUs (benchmarks/RESULTS.md): the search, then the cached choices in a fresh process group
# search run, then cached run (each cached choice confirmed in that run); the cache and its search rounds
# are kept under $R/cache; GRID4_LIMITS="SEARCH_S CACHED_S" bounds each run (default 330 200); GRID4_ARGS
# (default "--iters 30") cuts rounds where time is short, e.g. "--iters 20 --tune-budget-s 3"
s_grid4() {
    local limits=(${GRID4_LIMITS:-330 200})
    local args=(${GRID4_ARGS:---iters 30})
    export OVERLAPSCOPE_CACHE_DIR="$R/cache"
    NPROC=4 OUT="$R/grid4" timeout -k 10 "${limits[0]}" bash benchmarks/tune_grid.sh benchmarks/grids/four_gpus.json \
        "${args[@]}" --tune retune
    NPROC=4 OUT="$R/grid4-cached" timeout -k 10 "${limits[1]}" bash benchmarks/tune_grid.sh \
        benchmarks/grids/four_gpus.json "${args[@]}"
}
# the same gemm-rs shapes on 2 of the GPUs: which schedule (ring or direct) the search picks per world size
s_grid2-rs() {
    NPROC=2 OUT="$R/grid2-rs" bash benchmarks/tune_grid.sh benchmarks/grids/four_gpus.json --iters 30 --tune retune \
        --algos gemm-rs
}
s_check() {
    python3 benchmarks/runners_overlap.py $(find "$R" -name 'rank0.json.gz' -o -name 'rank0.sqlite' | xargs -r -n1 dirname | sort)
}

STEPS=("$@")
if (( ${#STEPS[@]} == 0 )); then
    STEPS=(env ag-base ag-tuned gemm-rs symm-fused symm-two fsdp-main nsys ag-tune-nccl ag-tune-steps fsdp-prefetch check)
fi
for s in "${STEPS[@]}"; do step "$s"; done
# the check runs last even when the budget skipped it above
[[ " ${STEPS[*]} " == *" check "* ]] && [[ ! -s "$R/check.log" ]] && { s_check | tee "$R/check.log"; tar czf "$OUT/results.tgz" -C "$OUT" r; }
echo "=== done in $(( $(date +%s) - T0 ))s"; ls -la "$OUT"
