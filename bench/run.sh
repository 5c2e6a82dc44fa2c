#!/usr/bin/env bash
# bench/run.sh: the training benchmark (issue 5) on one GPU.
#   bench/run.sh [SPEC] [STEPS] [dflc bench options...]   defaults: examples/qwen3-8b.dfl, 20 steps
#   bench/run.sh examples/qwen36-27b-drafter.dfl 8 --drafter-only    the drafter alone (issue 6)
# Builds dflc if needed (build/), prints `dflc bench` (sequence tokens/s, step time split by phase
# from a separate CUDA-event timing run, TFLOP/s and MFU against 989 TFLOP/s, device memory planned
# and measured, graph launches per step) and writes bench/results/<spec>-<date>.json.
# DFLC=path/to/dflc overrides the binary (e.g. build/dflc_gpu on machines without OpenBLAS).
set -euo pipefail
cd "$(dirname "$0")/.."
SPEC=${1:-examples/qwen3-8b.dfl}
STEPS=${2:-20}
DFLC=${DFLC:-build/dflc}
if [ ! -x "$DFLC" ]; then
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build build --target dflc -j"$(nproc)"
fi
mkdir -p bench/results
NAME=$(basename "$SPEC" .dfl)
OUT=bench/results/$NAME-$(date +%Y%m%d-%H%M%S).json
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
echo "command: $DFLC bench $SPEC --steps $STEPS --json $OUT ${*:3}"
"$DFLC" bench "$SPEC" --steps "$STEPS" --json "$OUT" "${@:3}"
echo "results: $OUT"
