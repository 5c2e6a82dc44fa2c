#!/usr/bin/env bash
# bench/gpu_verify_session.sh DIR: what waits for a GPU after 2026-12-06 (seventh session), in one call,
# most important first, so that a call cut short still brings the first answers back. DIR holds
# xz-compressed cuda_ops, cuda_gemm_tune and dflc_gpu from this build, bench_rope (nvcc -O3 -std=c++17
# -arch=sm_90a -I. bench/cuda/bench_rope.cu), the library cubin in DIR/cache (dflc build examples/tiny.dfl
# --arch sm_90a with DFL_CACHE_DIR), and for the last step what bench/gpu_codegen_evidence.sh needs.
#   1. bench_rope: the library's dfl_rope_pn against the variants of the same arithmetic (occupancy; build
#      it with kernels/hybrid.cuh at the setting to try, its header says how)
#   2. cuda_ops' row groups, partial RoPE and conv cases (the harness fixed for row groups: not yet run)
#   3. cuda_gemm_tune (its CPU oracle fixed: not yet run) and dflc golden --cuda on nano-hybrid
#   4. bench/gpu_codegen_evidence.sh (issue 41's before/after), RUNS as there
# Logs in $OUT.
set -o pipefail
cd "$(dirname "$0")/.."
B=${1:?usage: bench/gpu_verify_session.sh DIR}
for b in bench_rope cuda_ops cuda_gemm_tune dflc_gpu; do [ -f $B/$b.xz ] && xz -dc $B/$b.xz > /tmp/$b && chmod +x /tmp/$b; done
export DFL_CACHE_DIR=/tmp/dflc-cache
mkdir -p $DFL_CACHE_DIR
for f in $B/cache/*.cubin.xz; do xz -dc "$f" > $DFL_CACHE_DIR/$(basename "$f" .xz); done
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,power.limit --format=csv,noheader > $OUT/session.txt 2>&1
timeout 60 /tmp/bench_rope > $OUT/rope.txt 2>&1; cat $OUT/rope.txt
for o in "row group" "rope partial" "conv1d_silu"; do
  DFL_OPS_ONLY="$o" timeout 100 /tmp/cuda_ops > "$OUT/ops-${o// /_}.log" 2>&1; echo "$o: rc $?"; grep -E "FAIL|cases" "$OUT/ops-${o// /_}.log"
done
timeout 100 /tmp/cuda_gemm_tune > $OUT/gemm_tune_test.log 2>&1; echo "cuda_gemm_tune: rc $?"; grep -E "FAIL|^y[0-9]" $OUT/gemm_tune_test.log
timeout 60 /tmp/dflc_gpu golden examples/models/nano-hybrid examples/models/nano-hybrid/golden_forward.safetensors --cuda > $OUT/golden.log 2>&1
grep -E "PASS|FAIL" $OUT/golden.log
bash bench/gpu_codegen_evidence.sh $B > $OUT/evidence.out 2>&1; cat $OUT/evidence.out
