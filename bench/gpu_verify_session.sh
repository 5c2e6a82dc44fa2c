#!/usr/bin/env bash
# bench/gpu_verify_session.sh DIR: what waits for a GPU, in one call, most important first, so that a call cut
# short still brings the first answers back. DIR holds xz-compressed binaries built here (strip, xz) and the
# library cubins they need in DIR/cache (dflc build examples/tiny.dfl --arch sm_90a with DFL_CACHE_DIR):
#   bench_rope, bench_gdn_scan   nvcc -O3 -std=c++17 -arch=sm_90a -I. bench/cuda/bench_{rope,gdn_scan}.cu
#   cuda_ops, cuda_gemm_tune, dflc_gpu, bench_gdn      this build
#   dflc_old, bench_gdn_old                            the build to compare with (its cubin in DIR/cache too)
#   whl/*.whl         fla-core, flash-linear-attention, einops (gdn_fla.py writes the gated delta's inputs)
# Steps (STEPS selects, default all but anchor, in this order): gdnscan (bench_gdn_scan), rope (bench_rope), ops (cuda_ops' gated delta, row group, partial RoPE and
# conv cases), gdn (the gated delta rule at the 27B shape: FLA, then bench_gdn and bench_gdn_old on the
# same inputs, and ncu's time per kernel), t27 (the 27B target forward, --ops: dflc_old then dflc_gpu, or the binaries T27BINS names),
# golden (dflc golden --cuda on nano-hybrid, cuda_gemm_tune), evidence (bench/gpu_codegen_evidence.sh, RUNS as
# there), anchor (the Hugging Face + fla forward, bench/hf_qwen36_target.py without kept states for an 80 GB
# card, then dflc_gpu's bf16 and FP8 forwards in the same call). Logs in $OUT.
set -o pipefail
cd "$(dirname "$0")/.."
B=${1:?usage: bench/gpu_verify_session.sh DIR}
STEPS=${STEPS:-gdnscan rope ops t27 gdn golden evidence}
. bench/gpu_unpack.sh "$B"
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,power.limit --format=csv,noheader > $OUT/session.txt 2>&1
cat $OUT/session.txt
has() { case " $STEPS " in *" $1 "*) return 0 ;; esac; return 1; }
if has gdnscan; then timeout 90 /tmp/bench_gdn_scan > $OUT/gdn_scan.txt 2>&1; echo "bench_gdn_scan rc $?"; cat $OUT/gdn_scan.txt; fi
if has rope; then timeout 60 /tmp/bench_rope > $OUT/rope.txt 2>&1; cat $OUT/rope.txt; fi
if has ops; then
  for o in "gated_delta" "row group" "rope partial" "conv1d_silu"; do
    DFL_OPS_ONLY="$o" timeout 100 /tmp/cuda_ops > "$OUT/ops-${o// /_}.log" 2>&1; echo "$o: rc $?"
    grep -E "FAIL|cases" "$OUT/ops-${o// /_}.log" | tail -6
  done
fi
if has t27; then
  for b in ${T27BINS:-dflc_old dflc_gpu}; do
    timeout ${MAXS:-150} /tmp/$b bench examples/qwen36-27b-target.dfl --target-only --steps 2 --warmup 1 --ops > $OUT/t27-$b.log 2>&1
    echo "== t27 $b rc $?"; grep -E "forward:|kernel launches|ms/step|gated_delta|rope" $OUT/t27-$b.log | head -8
  done
fi
if has gdn; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site $B/whl/*.whl && export PYTHONPATH=/tmp/site
  d=/tmp/gdn27; sh="12 4096 16 48 128"
  ( PYTHONUNBUFFERED=1 timeout 150 python3 bench/cuda/gdn_fla.py $d $sh; echo "fla rc $?"
    for b in bench_gdn_old bench_gdn bench_gdn_old bench_gdn; do echo "== $b"; timeout 60 /tmp/$b $d $sh 20; echo "rc $?"; done
    NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
    for b in bench_gdn_old bench_gdn; do
      [ -n "$NCU" ] && echo "== ncu $b" && timeout 90 $NCU --kernel-name regex:gdn --launch-count 4 --metrics \
        gpu__time_duration.sum,launch__registers_per_thread,sm__warps_active.avg.pct_of_peak_sustained_active /tmp/$b $d $sh 2 2>&1 |
        grep -E "dfl_gdn|gpu__time|registers|warps_active"
    done
    # where the new build's two kernels stall (the full sections in gdn_ncu.txt)
    [ -n "$NCU" ] && timeout 120 $NCU --kernel-name regex:gdn --launch-count 2 --section SpeedOfLight --section WarpStateStats \
      --section Occupancy --section MemoryWorkloadAnalysis /tmp/bench_gdn $d $sh 1 > $OUT/gdn_ncu.txt 2>&1 ) > $OUT/gdn.log 2>&1
  grep -vE "^\s*$" $OUT/gdn.log | tail -30
  rm -rf $d
fi
if has golden; then
  timeout 60 /tmp/dflc_gpu golden examples/models/nano-hybrid examples/models/nano-hybrid/golden_forward.safetensors --cuda > $OUT/golden.log 2>&1
  grep -E "PASS|FAIL" $OUT/golden.log
  timeout 100 /tmp/cuda_gemm_tune > $OUT/gemm_tune_test.log 2>&1; echo "cuda_gemm_tune: rc $?"; grep -E "FAIL|^y[0-9]" $OUT/gemm_tune_test.log
fi
if has evidence; then
  bash bench/gpu_codegen_evidence.sh $B > $OUT/evidence.out 2>&1; cat $OUT/evidence.out
fi
if has anchor; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site $B/whl/*.whl && export PYTHONPATH=/tmp/site
  ( PYTHONUNBUFFERED=1 timeout 300 python3 bench/hf_qwen36_target.py 62 12 4096 0; echo "hf rc $?" ) > $OUT/hf.log 2>&1
  grep -E "hf anchor|median|tokens|peak|rc " $OUT/hf.log | tail -5
  sed 's/^  dtype      = bf16/  dtype      = bf16\n  quantize   = fp8/' examples/qwen36-27b-target.dfl > /tmp/qwen36-27b-target-fp8.dfl
  for s in examples/qwen36-27b-target.dfl /tmp/qwen36-27b-target-fp8.dfl; do
    n=$(basename $s .dfl); timeout ${MAXS:-150} /tmp/dflc_gpu bench $s --target-only --steps 3 --warmup 1 > $OUT/a-$n.log 2>&1
    echo "== $n rc $?"; grep -E "forward:|kernel launches" $OUT/a-$n.log
  done
fi
