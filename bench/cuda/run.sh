#!/usr/bin/env bash
# bench/cuda/run.sh DIR: the GPU session of the hybrid kernels. DIR holds xz-compressed cuda_ops and
# bench_gdn built on the build machine (strip, xz), cubins (DIR/cache/*.cubin.xz, from `dflc build
# examples/tiny.dfl -o X --arch sm_90a` there: nothing compiles its kernels here) and DIR/whl/*.whl
# (fla-core, for flash-linear-attention's chunk_gated_delta_rule). It runs cuda_ops (DFL_OPS_ONLY=text:
# only those cases), then at the hybrid test model's shape (64 x 512 tokens, Hk 2, Hv 6, d 64) and the
# Qwen3.6-27B's (12 x 4096, Hk 16, Hv 48, d 128) FLA (bench/cuda/gdn_fla.py: inputs and its time) and
# dflc's GATED_DELTA on the same inputs (bench_gdn: time, and o against FLA's; every DIR/bench_gdn*.xz, so
# that a variant built from other kernel sources runs beside it, with its cubin in DIR/cache; ncu's time per
# kernel where ncu is installed, unless NO_NCU is set). GDN_SHAPES="B T HK HV D" runs only that shape.
# Logs go to $OUT.
set -o pipefail
H=$(cd "$(dirname "$0")" && pwd)   # gdn_fla.py beside this script
B=${1:?usage: bench/cuda/run.sh DIR}
. "$H/../gpu_unpack.sh" "$B"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site $B/whl/*.whl && export PYTHONPATH=/tmp/site
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader > $OUT/session.txt 2>&1
( time timeout ${OPS_T:-120} /tmp/cuda_ops; echo "rc $?" ) > $OUT/ops.log 2>&1
grep -E "FAIL|cases|rc " $OUT/ops.log | tail -25
SHAPES=("64 512 2 6 64" "12 4096 16 48 128")
[ -n "$GDN_SHAPES" ] && SHAPES=("$GDN_SHAPES")
for sh in "${SHAPES[@]}"; do
  d=/tmp/gdn_$(echo $sh | tr ' ' _)
  ( PYTHONUNBUFFERED=1 timeout ${FLA_T:-150} python3 $H/gdn_fla.py $d $sh; echo "fla rc $?"
    for b in /tmp/bench_gdn*; do echo "== $(basename $b)"; timeout 60 $b $d $sh 20; echo "dflc rc $?"; done
    # the op's kernels one by one (prep, scan), where the profiler is installed
    NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
    [ -n "$NCU" ] && [ -z "$NO_NCU" ] && timeout 120 $NCU --kernel-name regex:gdn --launch-count 6 --metrics gpu__time_duration.sum \
      /tmp/bench_gdn $d $sh 2 2>&1 | grep -E "dfl_gdn|gpu__time" ) >> $OUT/bench.log 2>&1
  rm -rf $d
done
cat $OUT/bench.log | grep -vE "^\s*$" | tail -20
