#!/usr/bin/env bash
# bench/gpu_codegen_evidence.sh DIR: issue 41's evidence in one GPU call: kernel launches and each op's time
# (--ops, so the non-GEMM time) of the 8B step, the 8B FP8 step, the 27B drafter step and the 27B hybrid
# target forward, for the build before code generation (DIR/dflc_pre.xz: d737c64^, its library cubin in
# DIR/cache) and this build (DIR/dflc_gpu.xz), alternately, each in its own process. Logs in $OUT.
# RUNS: the cases to run (8b 8bfp8 d27 t27), default all; NEW: the binary of this build (default dflc_gpu).
set -o pipefail
cd "$(dirname "$0")/.."
B=${1:?usage: bench/gpu_codegen_evidence.sh DIR}
. bench/gpu_unpack.sh "$B"
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,power.limit --format=csv,noheader > $OUT/session.txt 2>&1
F="forward:|kernel launches|step time|ms/step|in all|rc |error|refus"
run() { # NAME BIN ARGS...
  local n=$1 b=$2; shift 2; local t0=$(date +%s)
  timeout ${MAXS:-150} /tmp/$b bench "$@" > $OUT/$n-$b.log 2>&1; echo "rc $? took $(( $(date +%s) - t0 )) s" >> $OUT/$n-$b.log
  echo "== $n $b"; grep -E "$F" $OUT/$n-$b.log | head -8
  # non-GEMM time: every op row of --ops that is not a matmul
  awk '/^ops \(/{on=1; next} on && NF>=7 && $(NF-2) ~ /%$/ { if ($(NF-5) ~ /matmul|gemm/) g+=$(NF-3); else o+=$(NF-3) } END { if (g>0) printf "  gemm %.1f ms, non-gemm %.1f ms (%.1f%% of the GEMMs)\n", g, o, 100*o/g }' $OUT/$n-$b.log
}
for c in ${RUNS:-8b 8bfp8 d27 t27}; do for b in dflc_pre ${NEW:-dflc_gpu}; do case $c in
  8b)    run 8b $b examples/qwen3-8b.dfl --steps 10 --ops ;;
  8bfp8) run 8bfp8 $b examples/qwen3-8b-fp8.dfl --steps 10 --ops ;;
  d27)   run d27 $b examples/qwen36-27b-drafter.dfl --drafter-only --steps 10 --warmup 2 --ops ;;
  t27)   run t27 $b examples/qwen36-27b-target.dfl --target-only --steps 2 --warmup 1 --ops ;;
esac; done; done 2>&1 | tee $OUT/evidence.txt
