#!/usr/bin/env bash
# bench/gpu_hybrid_session.sh DIR: the GPU-machine session of the hybrid target (docs/targets.md,
# docs/performance.md). DIR holds xz-compressed dflc_gpu, cuda_ops and cuda_golden built here (strip,
# xz), DIR/cache/*.cubin.xz (so that nothing compiles kernels there) and, optionally, DIR/hybrid (the
# 21 M `hybrid` model, copied to examples/models/hybrid) and DIR/bench_gdn* (the chunk kernel against
# flash-linear-attention, bench/cuda/). Runs: cuda_ops (every op against the CPU, the hybrid's
# included), dflc golden --cuda on nano-hybrid and hybrid, cuda_golden (all targets in bf16 and FP8),
# the Qwen3.6-27B target forward alone (--target-only --ops), a drafter trained on `hybrid` (TRAIN_STEPS,
# default 2000) with its eval, and the GDN bench if carried. Logs under $OUT (8 files come back).
set -o pipefail
cd "$(dirname "$0")/.."
B=${1:?usage: bench/gpu_hybrid_session.sh DIR}
. bench/gpu_unpack.sh "$B"
[ -d $B/hybrid ] && [ ! -e examples/models/hybrid ] && cp -r $B/hybrid examples/models/hybrid
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,power.limit --format=csv,noheader > $OUT/session.txt 2>&1
ts() { echo "$1 $(date +%s.%N)" >> $OUT/session.txt; }
ts start
( timeout 120 /tmp/cuda_ops; echo "cuda_ops rc $?" ) > $OUT/checks.log 2>&1; ts cuda_ops
( for m in nano-hybrid hybrid; do [ -d examples/models/$m ] || continue
    timeout 60 /tmp/dflc_gpu golden examples/models/$m examples/models/$m/golden_forward.safetensors --cuda; echo "golden $m rc $?"
  done; timeout 120 /tmp/cuda_golden; echo "cuda_golden rc $?" ) > $OUT/golden.log 2>&1; ts golden
( time timeout ${BENCH27_T:-240} /tmp/dflc_gpu bench examples/qwen36-27b-target.dfl --target-only --steps 3 --warmup 1 \
    --phase-steps 1 --ops --json $OUT/target27.json; echo "bench rc $?" ) > $OUT/target27.log 2>&1; ts target27
for g in $B/bench_gdn*; do [ -f "$g" ] || continue; ( bash $g; echo "gdn rc $?" ) > $OUT/gdn.log 2>&1; ts gdn; done
if [ -d examples/models/hybrid ]; then
  ( time timeout ${TRAIN_T:-200} /tmp/dflc_gpu train examples/hybrid.dfl --steps ${TRAIN_STEPS:-2000} --out /tmp/run-hybrid \
      --no-export 2>&1 | grep -vE "^step [0-9]+/[0-9]+ " ; echo "train rc $?"
    grep -E '"step": *(1|500|1000|1500|2000)[,}]' /tmp/run-hybrid/metrics.jsonl | head -8 ) > $OUT/train_hybrid.log 2>&1; ts train
fi
grep -E "cases|hybrid|conv|delta|gate|l2norm|FAIL|rc " $OUT/checks.log | tail -30
cat $OUT/golden.log | grep -E "PASS|FAIL|rc |rel L2" | tail -40
grep -vE "^  target forward +[a-z_0-9]+ +[0-9]+ " $OUT/target27.log | tail -12; grep -E "^  target forward" $OUT/target27.log | head -14
[ -f $OUT/gdn.log ] && tail -20 $OUT/gdn.log
[ -f $OUT/train_hybrid.log ] && tail -14 $OUT/train_hybrid.log
cat $OUT/session.txt
true
