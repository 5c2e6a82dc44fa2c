#!/usr/bin/env bash
# bench/kd_8b_gpu.sh [DFLC] [STEPS]: what soft labels (issue 32, docs/training.md) cost per step at the 8B
# shape on one GPU: `dflc bench examples/qwen3-8b.dfl` with hard labels, then the same spec with
# `labels = soft` (the target's distribution, forward KL), back to back in one call. Random weights; the
# losses printed are not comparable between the two (different objectives), the step times are.
set -o pipefail
cd "$(dirname "$0")/.."
D=${1:-./build/dflc_gpu}
N=${2:-10}
sed 's/^  metrics     = \[accuracy, tau\]$/  metrics     = [accuracy, tau]\n  labels      = soft/' examples/qwen3-8b.dfl > /tmp/qwen3-8b-soft.dfl
grep -q "labels      = soft" /tmp/qwen3-8b-soft.dfl || { echo "kd_8b_gpu: could not set labels = soft"; exit 1; }
for s in examples/qwen3-8b.dfl /tmp/qwen3-8b-soft.dfl; do
  echo "== $s"
  timeout 240 $D bench $s --steps $N 2>&1 | grep -vE "^step [0-9]+/" | grep -E "bench:|memory|step time|tokens/s|FLOPs|launches|loss|rc|error"
  echo "rc $?"
done
