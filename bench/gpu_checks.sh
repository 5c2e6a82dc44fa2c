#!/usr/bin/env bash
# bench/gpu_checks.sh DIR: the CUDA checks alone on the GPU machine (no benchmark): cuda_ops, the
# fixtures on the GPU (fp32, bf16, bf16 gradients), cuda_step, train_cuda, cuda_init, from binaries
# built here and carried xz-compressed in DIR (with DIR/cache/*.cubin.xz: the library's cubin), as
# bench/gpu_session.sh runs them before its benchmarks. Logs in $OUT/checks.log.
set -o pipefail
cd "$(dirname "$0")/.."
B=${1:?usage: bench/gpu_checks.sh DIR}
. bench/gpu_unpack.sh "$B"
{ timeout 120 /tmp/cuda_ops 2>&1 | tail -3; echo "cuda_ops rc $?"
  for fx in dflash_step_public dflash_step_public_b; do for p in fp32 bf16; do
    timeout 40 /tmp/dflc_gpu verify tests/fixtures/$fx.json --cuda --$p 2>&1 | tail -1; echo "$fx $p rc $?"; done
    timeout 40 /tmp/dflc_gpu verify tests/fixtures/$fx.json --cuda --bf16 --grads-bf16 2>&1 | tail -1; echo "$fx grads-bf16 rc $?"; done
  timeout 60 /tmp/cuda_step 2>&1 | tail -2; echo "cuda_step rc $?"
  timeout 60 /tmp/train_cuda 2>&1 | tail -2; echo "train_cuda rc $?"
  timeout 60 /tmp/cuda_init 2>&1 | tail -2; echo "cuda_init rc $?"; } > $OUT/checks.log 2>&1
grep -E "cases|FAIL|rc " $OUT/checks.log
