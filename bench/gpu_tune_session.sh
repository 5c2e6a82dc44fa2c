#!/usr/bin/env bash
# bench/gpu_tune_session.sh DIR [tune|anchor]: compile { gemm_tune } on the GPU machine. DIR holds
# xz-compressed dflc_gpu, cuda_ops and cuda_gemm_tune built here, and DIR/cache/*.cubin.xz (the library's
# cubin); DIR/gemm.tgz, if there, is an earlier call's GEMM picks (the cache's gemm/ folder).
#   tune:   cuda_gemm_tune, cuda_ops' GEMM and loss-head cases, then the 27B target forward and the 8B step
#           with gemm_tune = false and true alternately (off, on, off, on: the first "on" times the
#           candidates, the second reads the picks), each in its own process; the picks go back as
#           $OUT/gemm.tgz. KD=1 (both modes): tiny's soft labels at equal time (below); ORDER8: the 8B runs.
#           DIR/dflc_gpu_old.xz, if there (an earlier commit's build, its cubin in DIR/cache too): its 27B
#           forward first, gemm_tune off, as the same call's baseline; OPS: cuda_ops' case filters;
#           GOLDEN=1: dflc golden --cuda on nano-hybrid after them. RUNS27: the 27B runs as BIN:SPEC
#           (BIN dflc_gpu or dflc_gpu_old; SPEC /tmp/t27-off.dfl, /tmp/t27-on.dfl, /tmp/t27-fp8.dfl).
#   anchor: the Hugging Face + fla anchor (bench/hf_qwen36_target.py; wheels in .whl/), then dflc's 27B
#           forward (bf16, then quantize = fp8) with the default gemm_tune, dflc golden --cuda on
#           nano-hybrid, and with KD=1 bench/kd_nano.sh on tiny at equal time (hard@STEPS*1.108, soft).
#           ANCHOR27: dflc's specs instead (/tmp/t27-on.dfl: gemm_tune on); GOLDEN=0 skips the golden.
# Logs in $OUT.
set -o pipefail
cd "$(dirname "$0")/.."
B=${1:?usage: bench/gpu_tune_session.sh DIR [tune|anchor]}
. bench/gpu_unpack.sh "$B"
[ -f $B/gemm.tgz ] && tar -xzf $B/gemm.tgz -C $DFL_CACHE_DIR
nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.max.sm,power.limit --format=csv,noheader > $OUT/session.txt 2>&1
F="forward:|kernel launches|step time|tokens/s|gemm_tune|rc |error|refus|GiB|took"
T27="examples/qwen36-27b-target.dfl"
tune() { awk -v v=$3 '1; END { print "compile {\n  gemm_tune = " v "\n}" }' $1 > $2; }
off() { tune $1 $2 false; }
on() { tune $1 $2 true; }
timed() { local t0=$(date +%s); "$@"; echo "rc $? took $(( $(date +%s) - t0 )) s"; }
# KD=1: tiny at equal time: hard labels given the steps soft labels' +10.8% at the 8B shape buys
kd() {
  local S=${KDSTEPS:-600}
  DFLC=/tmp/dflc_gpu NAME=tiny J=6 CONFIGS="hard@$(( S * 1108 / 1000 )) soft" timed bash bench/kd_nano.sh /tmp/kd $S "1 2 3" > $OUT/kd.log 2>&1
  cat $OUT/kd.log
}
if [ "${2:-tune}" = tune ]; then
  timed timeout 120 /tmp/cuda_gemm_tune > $OUT/gemm_tune_test.log 2>&1
  tail -8 $OUT/gemm_tune_test.log
  for o in ${OPS:-matmul fp8 linear_ce}; do DFL_OPS_ONLY=$o timed timeout 120 /tmp/cuda_ops 2>&1 | grep -E "FAIL|cases|rc "; done > $OUT/ops.log 2>&1
  cat $OUT/ops.log
  if [ "${GOLDEN:-0}" = 1 ]; then
    timed timeout 90 /tmp/dflc_gpu golden examples/models/nano-hybrid examples/models/nano-hybrid/golden_forward.safetensors --cuda > $OUT/golden.log 2>&1
    grep -E "PASS|FAIL|rc " $OUT/golden.log
  fi
  off $T27 /tmp/t27-off.dfl
  on $T27 /tmp/t27-on.dfl
  off examples/qwen3-8b.dfl /tmp/8b-off.dfl
  on examples/qwen3-8b.dfl /tmp/8b-on.dfl
  sed 's/^  dtype      = bf16/  dtype      = bf16\n  quantize   = fp8/' $T27 > /tmp/t27-fp8.dfl
  runs="dflc_gpu:/tmp/t27-off.dfl dflc_gpu:/tmp/t27-on.dfl dflc_gpu:/tmp/t27-off.dfl dflc_gpu:/tmp/t27-on.dfl"
  [ -x /tmp/dflc_gpu_old ] && runs="dflc_gpu_old:/tmp/t27-off.dfl dflc_gpu:/tmp/t27-off.dfl dflc_gpu:/tmp/t27-on.dfl dflc_gpu:/tmp/t27-on.dfl"
  for r in ${RUNS27:-$runs}; do
    echo "== 27B target ${r%%:*} ${r#*:}"
    timed timeout ${T27MAX:-200} /tmp/${r%%:*} bench ${r#*:} --target-only --steps ${STEPS27:-2} --warmup 1 ${OPS27:-} 2>&1 | grep -E "$F${OPSRE:-}"
  done > $OUT/t27.log 2>&1
  cat $OUT/t27.log
  [ "${KD:-0}" = 1 ] && kd
  for s in ${ORDER8:-/tmp/8b-off.dfl /tmp/8b-on.dfl /tmp/8b-off.dfl /tmp/8b-on.dfl}; do
    [ "${RUN8B:-1}" = 1 ] || break
    echo "== 8B step $s"; timed timeout 150 /tmp/dflc_gpu bench $s --steps ${STEPS8:-10} 2>&1 | grep -vE "^step [0-9]+/" | grep -E "$F"
  done > $OUT/8b.log 2>&1
  cat $OUT/8b.log
  (cd $DFL_CACHE_DIR && tar -czf $OUT/gemm.tgz gemm && for f in gemm/*.algo; do sed -n '1p;3p' $f; done) > $OUT/picks.txt 2>&1
  exit 0
fi
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
( PYTHONUNBUFFERED=1 timed timeout 300 python3 bench/hf_qwen36_target.py 62 12 4096 0 ) > $OUT/hf.log 2>&1
grep -E "hf anchor|ms|rc " $OUT/hf.log | tail -6
sed 's/^  dtype      = bf16/  dtype      = bf16\n  quantize   = fp8/' $T27 > /tmp/t27-fp8.dfl
on $T27 /tmp/t27-on.dfl
for s in ${ANCHOR27:-$T27 /tmp/t27-fp8.dfl}; do
  echo "== 27B target $s"; timed timeout 200 /tmp/dflc_gpu bench $s --target-only --steps 3 --warmup 1 2>&1 | grep -E "$F"
done > $OUT/t27a.log 2>&1
cat $OUT/t27a.log
if [ "${GOLDEN:-1}" = 1 ]; then
  timed timeout 90 /tmp/dflc_gpu golden examples/models/nano-hybrid examples/models/nano-hybrid/golden_forward.safetensors --cuda > $OUT/golden.log 2>&1
  grep -E "PASS|FAIL|rc " $OUT/golden.log
fi
[ "${KD:-0}" = 1 ] && kd
