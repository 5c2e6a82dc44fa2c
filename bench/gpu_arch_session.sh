#!/usr/bin/env bash
# bench/gpu_arch_session.sh DIR: issue 33 on the GPU machine (an H200): the kernels another architecture
# gets, forced on this GPU (--as-cc, docs/gpus.md), against the CPU reference op by op (cuda_ops) and on a
# whole training step (cuda_step), and their speed beside the Hopper path (bench_attention: each attention
# kernel against the CUDA-core one; dflc bench on the 8B step and the 27B drafter alone). DIR holds
# xz-compressed dflc_gpu, cuda_ops, cuda_step and bench_attention built here (strip, xz) and
# DIR/cache/*.cubin.xz (the sm_90a kernels compiled here). CHECK_CCS="0 80 120 100": the rows checked (0: the
# device's own); BENCH_CCS="0 80 120": the rows benched (either may be empty, to split the session over two
# calls); RUN27=0: the 8B bench only. Logs under $OUT.
set -o pipefail
cd "$(dirname "$0")/.."
B=${1:?usage: bench/gpu_arch_session.sh DIR}
. bench/gpu_unpack.sh "$B"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,power.limit --format=csv,noheader > $OUT/arch.txt 2>&1
ts() { echo "$1 $(date +%s.%N)" >> $OUT/arch.txt; }
ts start
for cc in ${CHECK_CCS-0 80 120 100}; do
  f=(); [ "$cc" != 0 ] && f=(--as-cc $cc)
  ( echo "== cuda_ops ${f[*]}"; timeout 150 /tmp/cuda_ops "${f[@]}" 2>&1 | grep -E "cases|FAIL|skip|kernels|rc |sm_" | tail -12; echo "rc $?"
    echo "== cuda_step ${f[*]}"; timeout 60 /tmp/cuda_step "${f[@]}" 2>&1 | tail -4; echo "rc $?" ) >> $OUT/arch_checks.log 2>&1
  ts "checks$cc"
done
for cc in ${BENCH_CCS-0 80 120}; do
  f=(); [ "$cc" != 0 ] && f=(--as-cc $cc)
  [ -x /tmp/bench_attention ] && ( echo "== bench_attention ${f[*]}"; DFL_SEED=7 timeout 150 /tmp/bench_attention "${f[@]}" 5 2>&1 |
      grep -E "as-cc|fwd:|bwd:|FAIL|OK"; echo "rc $?" ) >> $OUT/arch_bench.log 2>&1
  ( echo "== 8B ${f[*]}"; timeout 200 /tmp/dflc_gpu bench examples/qwen3-8b.dfl --steps 10 --warmup 2 --phase-steps 2 "${f[@]}" 2>&1 |
      grep -E "kernels|steps:|step time|MFU|^  (target forward|drafter forward|loss|backward|optimizer) |memory|rc|error"
    [ "${RUN27:-1}" = 0 ] || echo "== 27B drafter ${f[*]}"; [ "${RUN27:-1}" = 0 ] || timeout 200 /tmp/dflc_gpu bench examples/qwen36-27b-drafter.dfl --drafter-only --steps 6 --warmup 2 \
      --phase-steps 2 "${f[@]}" 2>&1 | grep -E "kernels|steps:|step time|MFU|positions/s|memory|rc|error" ) >> $OUT/arch_bench.log 2>&1
  ts "bench$cc"
done
cat $OUT/arch_checks.log $OUT/arch_bench.log $OUT/arch.txt 2>/dev/null
true
