#!/usr/bin/env bash
# bench/gpu_target27_session.sh DIR [MODE]: the GPU-machine session of issue 44 (the Qwen3.6-27B target
# forward; docs/performance.md). DIR holds xz-compressed dflc_gpu, cuda_ops and bench_attention built here
# (strip, xz), optionally DIR/cache/*.cubin.xz (kernels compiled here: nothing compiles there) and
# DIR/wheels/*.whl (flash-linear-attention 0.6.0, fla-core 0.6.0, einops, from PyPI, for the anchor).
# MODE checks: cuda_ops (every op against the CPU, the hd-256 attention included), bench_attention at the
#   27B target's attention shape (against the CUDA-core kernel), dflc golden --cuda on nano-hybrid (and
#   examples/models/hybrid when present), the target forward alone (--target-only --ops).
# MODE anchor: dflc's target forward and the Hugging Face + flash-linear-attention forward
#   (bench/hf_qwen36_target.py) back to back in one call.
# MODE all: both, in that order (one call of about 7 minutes).
# MODE gdn: bench/cuda/run.sh (cuda_ops, the gated delta rule against flash-linear-attention), the goldens,
#   then the target forward with DIR's dflc_gpu and, when DIR holds dflc_gpu_old.xz (a build of the previous
#   kernels, its cubin in DIR/cache too), with that one: before and after in the same call; GDN_THEN=hf
#   then runs the anchor (bench/hf_qwen36_target.py) after them. BENCH27_OPS=--gemms: each GEMM shape too.
# MODE gemm: cuBLASLt's candidate algorithms and PyTorch's matmul at the forward's GEMM shapes, the bf16
#   forward with its clocks sampled, the FP8 forward, cuda_golden (the FP8 golden errors on the GPU).
# Logs under $OUT.
set -o pipefail
cd "$(dirname "$0")/.."
B=${1:?usage: bench/gpu_target27_session.sh DIR [checks|anchor]}
MODE=${2:-checks}
. bench/gpu_unpack.sh "$B"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,power.limit --format=csv,noheader > $OUT/session.txt 2>&1
ts() { echo "$1 $(date +%s.%N)" >> $OUT/session.txt; }
bench27() { ( time timeout ${BENCH27_T:-240} /tmp/dflc_gpu$1 bench examples/qwen36-27b-target.dfl --target-only --steps 3 \
              --warmup 1 --phase-steps 1 ${BENCH27_OPS:---ops} --json $OUT/target27$1.json; echo "bench rc $?" ) > $OUT/target27$1.log 2>&1; }
ts start
golden() {
  ( for m in nano-hybrid hybrid; do [ -d examples/models/$m ] || continue
      timeout 60 /tmp/dflc_gpu golden examples/models/$m examples/models/$m/golden_forward.safetensors --cuda; echo "golden $m rc $?"
    done ) > $OUT/golden.log 2>&1; ts golden
}
if [ "$MODE" = gemm ]; then
  # cuBLASLt's candidates at the forward's GEMM shapes (bench_gemm) and PyTorch's matmul on the same shapes,
  # then the bf16 forward (each GEMM shape: --gemms) with the SM clock and power sampled every 100 ms, the
  # FP8 forward, and cuda_golden (nano, tiny when its shards travelled, nano-hybrid: bf16, fp8, fp8_fast)
  for b in bench_gemm; do [ -f $B/$b.xz ] && xz -dc $B/$b.xz > /tmp/$b && chmod +x /tmp/$b; done
  ( timeout 240 /tmp/bench_gemm 20; echo "bench_gemm rc $?" ) > $OUT/gemm.log 2>&1; ts gemm
  ( timeout 120 python3 bench/cuda/gemm_torch.py 20; echo "torch rc $?" ) > $OUT/gemm_torch.log 2>&1; ts gemm_torch
  nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu --format=csv,noheader -lms 100 > $OUT/clocks.csv 2>&1 &
  SMI=$!
  BENCH27_OPS=--gemms bench27 ""; ts target27
  kill $SMI
  sed 's/^  dtype      = bf16/  dtype      = bf16\n  quantize   = fp8/' examples/qwen36-27b-target.dfl > /tmp/qwen36-27b-target-fp8.dfl
  ( time timeout ${BENCH27_T:-240} /tmp/dflc_gpu bench /tmp/qwen36-27b-target-fp8.dfl --target-only --steps 3 --warmup 1 \
      --phase-steps 1 --ops; echo "bench rc $?" ) > $OUT/target27_fp8.log 2>&1; ts target27_fp8
  [ -f $B/cuda_golden.xz ] && { ( timeout 200 /tmp/cuda_golden; echo "cuda_golden rc $?" ) > $OUT/golden.log 2>&1; ts cuda_golden; }
  grep -E "best|sustained|rc " $OUT/gemm.log; cat $OUT/gemm_torch.log
  grep -E "^forward|^memory|matmul|gated|rc " $OUT/target27_fp8.log
  grep -vE "^  *(hidden|logits)" $OUT/golden.log | tail -20
  MODE=done
fi
if [ "$MODE" = gdn ]; then
  bash bench/cuda/run.sh $B; ts gdn
  golden
  bench27 ""; ts target27
  [ -x /tmp/dflc_gpu_old ] && { bench27 _old; ts target27_old; grep -E "^forward|gated_delta|matmul" $OUT/target27_old.log; }
  grep -E "PASS|FAIL|rc " $OUT/golden.log
  MODE=${GDN_THEN:-done} # GDN_THEN=hf: the Hugging Face + fla anchor next, in the same call
fi
if [ "$MODE" != anchor ] && [ "$MODE" != done ] && [ "$MODE" != hf ]; then
  ( timeout 200 /tmp/cuda_ops; echo "cuda_ops rc $?" ) > $OUT/checks.log 2>&1; ts cuda_ops
  [ "$MODE" = checks ] && { ( timeout 120 /tmp/bench_attention 10 "causal S4096 hd256 (27B target)"; echo "bench_attention rc $?" ) > $OUT/attention.log 2>&1; ts attention; }
  golden
  [ -f $B/cuda_golden.xz ] && { ( timeout 150 /tmp/cuda_golden; echo "cuda_golden rc $?" ) >> $OUT/golden.log 2>&1; ts cuda_golden; }
  bench27 ""; ts target27
  # the same forward with the FP8 target (quantize = fp8: the GEMMs in FP8 with per-row scales)
  sed 's/^  dtype      = bf16/  dtype      = bf16\n  quantize   = fp8/' examples/qwen36-27b-target.dfl > /tmp/qwen36-27b-target-fp8.dfl
  ( time timeout ${BENCH27_T:-240} /tmp/dflc_gpu bench /tmp/qwen36-27b-target-fp8.dfl --target-only --steps 3 --warmup 1 \
      --phase-steps 1 --ops; echo "bench rc $?" ) > $OUT/target27_fp8.log 2>&1; ts target27_fp8
  grep -E "cases|attention-tc causal.*hd 256|gated_delta|FAIL|rc " $OUT/checks.log | tail -30
  [ -f $OUT/attention.log ] && tail -8 $OUT/attention.log
  grep -E "^forward|^memory|matmul|rc " $OUT/target27_fp8.log
  grep -E "PASS|FAIL|rc |rel L2|fp8|FP8" $OUT/golden.log | tail -30
fi
if [ "$MODE" != checks ] && [ "$MODE" != done ]; then
  for w in $B/wheels/*.whl; do [ -f "$w" ] && { python3 -m pip install --no-deps --no-index "$w" >/dev/null 2>&1 ||
      python3 -m pip install --no-deps --no-index --break-system-packages "$w" > /dev/null 2>&1 || echo "pip: $w not installed"; }; done
  [ "$MODE" = anchor ] && { bench27 ""; ts target27; }
  ( time PYTHONUNBUFFERED=1 timeout ${HF_T:-300} python3 bench/hf_qwen36_target.py; echo "hf rc $?" ) > $OUT/hf.log 2>&1; ts hf
  tail -8 $OUT/hf.log
fi
grep -vE "^  target forward +[a-z_0-9]+ +[0-9]+ " $OUT/target27.log | tail -12; grep -E "^  target forward" $OUT/target27.log | head -16
cat $OUT/session.txt
true
