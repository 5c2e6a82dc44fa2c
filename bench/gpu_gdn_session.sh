#!/usr/bin/env bash
# bench/gpu_gdn_session.sh DIR [hf]: the gated delta rule's session on the GPU machine. DIR holds
# xz-compressed dflc_gpu, dflc_old (the build before the change, for the same-call comparison), cuda_ops
# and bench_gdn built here (bench_gdn_old: from the sources before the change, run beside it), and DIR/cache/*.cubin.xz (both builds' library cubins); .whl/ holds
# flash-linear-attention 0.6.0, fla-core 0.6.0 and einops (carried: the machine has no registry).
# It runs cuda_ops' gated delta cases, FLA's chunk_gated_delta_rule and dflc's GATED_DELTA on the same
# Qwen3.6-27B inputs (bench/cuda/gdn_fla.py, bench_gdn; ncu's per-kernel times where ncu is installed),
# then the 27B target forward with this build and the previous one (--ops: the split). OPS="a b": the
# cuda_ops cases whose names hold a or b (default gated_delta; all: every case). GDN=0: without the
# kernel-alone comparison (FLA, bench_gdn); T27RUN=0: without the forwards; OLD_OPS=1: the previous
# build's forward with --ops too; NCU_SECTIONS=1: ncu's sections on its kernels. With `hf` it runs
# the Hugging Face + fla anchor (bench/hf_qwen36_target.py), then both builds' forwards, instead of the FLA comparison; KEEP=0 drops
# the kept hidden states (an 80 GB card). ASCC="CC:name ...": cuda_ops' cases holding name again with
# --as-cc CC; GOLDEN=1: dflc golden --cuda on nano-hybrid (and hybrid, from DIR/hybrid); FP8=1 (with hf): the
# FP8 target's forward too. Logs in $OUT.
set -o pipefail
cd "$(dirname "$0")/.."
B=${1:?usage: bench/gpu_gdn_session.sh DIR [hf]}
. bench/gpu_unpack.sh "$B"
[ -d $B/hybrid ] && [ ! -e examples/models/hybrid ] && cp -r $B/hybrid examples/models/hybrid && xz -d examples/models/hybrid/*.xz 2>/dev/null
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.max.sm --format=csv,noheader > $OUT/session.txt 2>&1
F="forward:|kernel launches|step time|tokens/s|rc|error|refus|GiB"
T27="examples/qwen36-27b-target.dfl --target-only --steps 3 --warmup 1 --phase-steps 1 --ops"
if [ "$2" = hf ]; then
  ( PYTHONUNBUFFERED=1 timeout 300 python3 bench/hf_qwen36_target.py 62 12 4096 ${KEEP:-1}; echo "hf rc $?" ) > $OUT/hf.log 2>&1
  ( timeout 170 /tmp/dflc_gpu bench $T27; echo "rc $?" ) > $OUT/t27_new.log 2>&1
  [ -x /tmp/dflc_old ] && ( timeout 120 /tmp/dflc_old bench ${T27% --ops}; echo "rc $?" ) > $OUT/t27_old.log 2>&1
  # FP8=1: the same forward with the FP8 target (quantize = fp8)
  if [ "${FP8:-0}" = 1 ]; then
    sed 's/^  dtype      = bf16/  dtype      = bf16\n  quantize   = fp8/' examples/qwen36-27b-target.dfl > /tmp/qwen36-27b-target-fp8.dfl
    ( timeout 120 /tmp/dflc_gpu bench /tmp/qwen36-27b-target-fp8.dfl ${T27#examples/qwen36-27b-target.dfl}; echo "rc $?" ) > $OUT/t27_fp8.log 2>&1
  fi
  for f in hf t27_new t27_old t27_fp8; do [ -f $OUT/$f.log ] && { echo "== $f"; grep -E "hf anchor|$F" $OUT/$f.log | head -12; }; done
  [ "${GOLDEN:-0}" = 1 ] && { for m in nano-hybrid hybrid; do [ -d examples/models/$m ] || continue
    timeout 90 /tmp/dflc_gpu golden examples/models/$m examples/models/$m/golden_forward.safetensors --cuda 2>&1 | tail -4
    echo "golden $m rc $?"; done > $OUT/golden.log 2>&1; grep -E "PASS|FAIL|rc " $OUT/golden.log; }
  exit 0
fi
# OPS: the cuda_ops cases run first, by name substring (DFL_OPS_ONLY), one run each; "all": every case
for o in ${OPS:-gated_delta}; do
  if [ "$o" = all ]; then ( timeout 300 /tmp/cuda_ops; echo "rc $?" ); else ( DFL_OPS_ONLY=$o timeout 90 /tmp/cuda_ops; echo "rc $?" ); fi
done > $OUT/ops_gdn.log 2>&1
# ASCC="80:norm_gate ...": those cases again as that row chooses its kernels (--as-cc: sm_80 has no cluster)
for a in ${ASCC:-}; do ( DFL_OPS_ONLY=${a#*:} timeout 90 /tmp/cuda_ops --as-cc ${a%%:*} 2>&1 | grep -E "FAIL|cases"; echo "as-cc $a rc $?" ); done >> $OUT/ops_gdn.log 2>&1
grep -E "FAIL|cases|rc " $OUT/ops_gdn.log | tail -12
# GOLDEN=1: dflc golden --cuda on the hybrid models carried (nano-hybrid; hybrid from DIR/hybrid)
[ "${GOLDEN:-0}" = 1 ] && { for m in nano-hybrid hybrid; do [ -d examples/models/$m ] || continue
  timeout 90 /tmp/dflc_gpu golden examples/models/$m examples/models/$m/golden_forward.safetensors --cuda 2>&1 | tail -4
  echo "golden $m rc $?"; done > $OUT/golden.log 2>&1; grep -E "PASS|FAIL|rc " $OUT/golden.log; }
d=/tmp/gdn27
[ "${GDN:-1}" = 1 ] && ( PYTHONUNBUFFERED=1 timeout 120 python3 bench/cuda/gdn_fla.py $d 12 4096 16 48 128; echo "fla rc $?"
  for b in /tmp/bench_gdn /tmp/bench_gdn_old; do [ -x $b ] && { echo "== $(basename $b)"; timeout 60 $b $d 12 4096 16 48 128 20; echo "dflc rc $?"; }; done
  NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
  [ -n "$NCU" ] && timeout 60 $NCU --kernel-name regex:gdn --launch-count 4 --metrics gpu__time_duration.sum \
    /tmp/bench_gdn $d 12 4096 16 48 128 2 2>&1 | grep -E "dfl_gdn|gpu__time"
  # NCU=1: the prep's and the scan's throughput, occupancy and stall reasons in $OUT/ncu_gdn.txt
  [ -n "$NCU" ] && [ "${NCU_SECTIONS:-0}" = 1 ] && timeout 120 $NCU --kernel-name regex:gdn --launch-count 2 \
    --section SpeedOfLight --section Occupancy --section WarpStateStats --section MemoryWorkloadAnalysis \
    --section ComputeWorkloadAnalysis --section LaunchStats /tmp/bench_gdn $d 12 4096 16 48 128 1 > $OUT/ncu_gdn.txt 2>&1 ) > $OUT/gdn.log 2>&1
grep -vE "^\s*$" $OUT/gdn.log | tail -14
[ "${T27RUN:-1}" = 0 ] && exit 0
( timeout 170 /tmp/dflc_gpu bench $T27; echo "rc $?" ) > $OUT/t27_new.log 2>&1
# OLD_OPS=1: the previous build's split too (--ops), for per-op before/after figures
( timeout 170 /tmp/dflc_old bench $([ "${OLD_OPS:-0}" = 1 ] && echo "$T27" || echo "${T27% --ops}"); echo "rc $?" ) > $OUT/t27_old.log 2>&1
for f in t27_new t27_old; do echo "== $f"; grep -E "$F" $OUT/$f.log | head -10
  grep -E "^ +[a-z_ ]+ +(gated_delta|conv1d_silu|attention|rmsnorm|swiglu|norm_gate) " $OUT/$f.log; done
