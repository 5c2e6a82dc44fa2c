#!/usr/bin/env bash
# bench/gpu_session.sh DIR: the GPU-machine session used for issue 6 (docs/performance.md). DIR holds
# xz-compressed dflc_gpu, cuda_ops, cuda_step, train_cuda and cuda_init built on the build machine (strip, xz);
# it runs the CUDA checks (cuda_ops, the fixtures on the GPU, cuda_step, train_cuda, cuda_init), then the
# attention benchmark (if carried), the 8B bench and, with RUN27=1, the 27B drafter-alone bench, each with the per-op profile (--ops);
# OPS_ASCC="80 86": cuda_ops' attention cases as those rows choose; STEPS8/STEPS27: the benches' steps (20, 10);
# with CMP_OVERLAP=1 also the 8B bench with compile { overlap = false } (the optimizer after its own step: the overlap's before/after);
# with CMP_ENV="VAR=value ..." the 8B bench again under each assignment (an experiment's temporary switch),
# and with RUN27=1 the 27B bench too.
# with CMP_F32GRADS=1 the 8B (and with RUN27=1 the 27B) bench again from its spec without `grads = bf16` (into extra.log),
# with EXTRA_SPECS="a.dfl b.dfl" each spec benched the same way after it (e.g. examples/qwen3-8b-fp8.dfl), and a carried
# bench_fp8_gemm runs before the benches.
# A carried dflc_old (the previous commit's dflc_gpu) benches the 8B (and with RUN27=1 the 27B) again
# in the same call, into old.log: a before/after of a change that has no switch. A carried
# bench_optim runs the optimizer kernels alone at both drafters' shapes (BENCH_OPT_V: its variants);
# bench_memops the memory-bound row kernels at the steps' shapes against copies (BENCH_MEM_V: variants).
# Serial: nothing overlaps a bench. Logs go to $OUT (the device tool's output folder).
set -o pipefail   # "rc" below is the program's status, not tail's
cd "$(dirname "$0")/.."
B=${1:?usage: bench/gpu_session.sh DIR}
. bench/gpu_unpack.sh "$B"
OPSF=${OPSF:---ops}   # OPSF=--gemms: the per-op rows and the GEMMs by shape
# carried kernels (DIR/cache/*.cubin.xz, from `dflc build examples/tiny.dfl -o X --arch sm_90a` here, one per
# binary): no binary compiles its kernels on the GPU machine (about 22 s each otherwise)
# at most 8 files come back from $OUT: the GPU and the times share session.txt, cuda_ops goes into checks.log
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv,noheader > $OUT/session.txt 2>&1
ts() { echo "$1 $(date +%s.%N)" >> $OUT/session.txt; }
ts start
# SMI=1: the SM clock, power and temperature every second while it runs (throttling shows as clocks below max)
[ -n "${SMI:-}" ] && { nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu,clocks_throttle_reasons.active --format=csv,noheader -l 1 > $OUT/smi.log 2>&1 & SMIPID=$!; }
( timeout 90 /tmp/cuda_ops; echo "rc $?" ) > $OUT/checks.log 2>&1; ts cuda_ops
# OPS_ASCC="80 86": the attention cases again as each older row would choose its kernels (--as-cc)
for cc in ${OPS_ASCC:-}; do ( DFL_OPS_ONLY=attention timeout 90 /tmp/cuda_ops --as-cc $cc 2>&1 | tail -3; echo "as-cc $cc rc $?" ) >> $OUT/checks.log 2>&1; done
( for fx in dflash_step_public dflash_step_public_b; do for p in fp32 bf16; do
  timeout 25 /tmp/dflc_gpu verify tests/fixtures/$fx.json --cuda --$p 2>&1 | tail -2; echo "rc $?"
done; timeout 25 /tmp/dflc_gpu verify tests/fixtures/$fx.json --cuda --bf16 --grads-bf16 2>&1 | tail -2; echo "grads-bf16 rc $?"
done; timeout 40 /tmp/cuda_step 2>&1 | tail -3; echo "cuda_step rc $?"; timeout 60 /tmp/train_cuda 2>&1 | tail -3; echo "train rc $?"; timeout 60 /tmp/cuda_init 2>&1 | tail -6; echo "init rc $?" ) >> $OUT/checks.log 2>&1; ts checks
[ -x /tmp/bench_attention ] && ( DFL_SEED=12345 timeout 90 /tmp/bench_attention 10; echo "rc $?" ) > $OUT/attention.log 2>&1; ts attention
[ -x /tmp/bench_optim ] && ( for sh in 27b 8b; do timeout 150 /tmp/bench_optim $sh 15; echo "rc $?"; done ) > $OUT/optim.log 2>&1; ts optim
[ -x /tmp/bench_fp8_gemm ] && ( timeout 60 /tmp/bench_fp8_gemm 30; echo "rc $?" ) > $OUT/fp8gemm.log 2>&1; ts fp8gemm
[ -x /tmp/bench_memops ] && ( timeout 240 /tmp/bench_memops 21; echo "rc $?" ) > $OUT/memops.log 2>&1; ts memops
[ -x /tmp/dflc_old ] && { echo "== old 8B"; timeout ${BENCH_T:-240} /tmp/dflc_old bench examples/qwen3-8b.dfl --steps ${STEPS8:-20} 2>&1 |
  grep -E "steps:|step time|MFU|positions/s|^  (target forward|drafter forward|loss|backward|optimizer) |memory|energy|rc|error"; } > $OUT/old.log 2>&1 && ts old8b
( time timeout ${BENCH_T:-240} /tmp/dflc_gpu bench examples/qwen3-8b.dfl --steps ${STEPS8:-20} $OPSF --json $OUT/bench8b.json; echo "bench rc $?" ) > $OUT/bench8b.log 2>&1; ts bench8b
for sp in ${EXTRA_SPECS:-}; do n=$(basename $sp .dfl)
  ( time timeout ${BENCH_T:-240} /tmp/dflc_gpu bench $sp --steps 20 $OPSF; echo "bench rc $?" ) > $OUT/$n.log 2>&1; ts $n
done
[ -n "${CMP_OVERLAP:-}" ] && { cat examples/qwen3-8b.dfl; printf '\ncompile { overlap = false }\n'; } > /tmp/qwen3-8b-nooverlap.dfl &&
  ( timeout ${BENCH_T:-240} /tmp/dflc_gpu bench /tmp/qwen3-8b-nooverlap.dfl --steps 20; echo "bench rc $?" ) > $OUT/bench8b_nooverlap.log 2>&1 && ts bench8b_nooverlap
# CMP_ENV="A=1 B=2,C=3": the 8B bench again once per entry (commas join assignments), same binary (a
# before/after in one call); CMP_OPS=1 adds --ops and keeps its memory-bound rows
CMPF=; CMPR='^$'
[ -n "${CMP_OPS:-}" ] && CMPF=--ops && CMPR='^  [a-z ]+ +(rmsnorm|rmsnorm_bwd|adamw|sumsq_acc|rope|swiglu|swiglu_bwd) '
[ -n "${CMP_ENV:-}" ] && for v in $CMP_ENV; do echo "== $v"; env ${v//,/ } timeout ${BENCH_T:-240} /tmp/dflc_gpu bench examples/qwen3-8b.dfl --steps 20 $CMPF 2>&1 |
  grep -E "steps:|step time|^  (target forward|drafter forward|loss|backward|optimizer) |energy|rc|error|$CMPR"; done > $OUT/extra.log 2>&1 && ts cmp8b
[ -n "${RUN27:-}" ] && ( time timeout ${BENCH27_T:-200} /tmp/dflc_gpu bench examples/qwen36-27b-drafter.dfl --drafter-only --steps ${STEPS27:-10} --warmup 2 --phase-steps 2 $OPSF; echo "bench rc $?" ) > $OUT/bench27.log 2>&1; ts bench27
[ -n "${RUN27:-}" ] && [ -x /tmp/dflc_old ] && { echo "== old 27B"; timeout ${BENCH27_T:-200} /tmp/dflc_old bench examples/qwen36-27b-drafter.dfl --drafter-only --steps ${STEPS27:-10} --warmup 2 --phase-steps 2 2>&1 |
  grep -E "steps:|step time|MFU|positions/s|^  (target forward|drafter forward|loss|backward|optimizer) |memory|energy|rc|error"; } >> $OUT/old.log 2>&1 && ts old27b
# RUN27=1 with CMP_ENV: the 27B bench again under each assignment (appended to extra.log)
# CMP_F32GRADS=1: the 8B (and with RUN27 the 27B) bench again from a copy of its spec without `grads = bf16`
if [ -n "${CMP_F32GRADS:-}" ]; then
  sed '/^  grads /d' examples/qwen3-8b.dfl > examples/_f32grads-8b.dfl
  sed '/^  grads /d' examples/qwen36-27b-drafter.dfl > examples/_f32grads-27b.dfl
  { echo "== 8B, grads f32"; timeout ${BENCH_T:-240} /tmp/dflc_gpu bench examples/_f32grads-8b.dfl --steps 20 2>&1 |
      grep -E "steps:|step time|^  (target forward|drafter forward|loss|backward|optimizer) |memory|energy|rc|error"
    [ -n "${RUN27:-}" ] && { echo "== 27B, grads f32"; timeout ${BENCH27_T:-200} /tmp/dflc_gpu bench examples/_f32grads-27b.dfl --drafter-only --steps ${STEPS27:-10} --warmup 2 --phase-steps 2 2>&1 |
      grep -E "steps:|step time|MFU|positions/s|^  (drafter forward|loss|backward|optimizer) |memory|energy|rc|error"; }
  } >> $OUT/extra.log 2>&1; ts f32grads
fi
[ -n "${RUN27:-}" ] && [ -n "${CMP_ENV:-}" ] && for v in $CMP_ENV; do echo "== 27B $v"; env ${v//,/ } timeout ${BENCH27_T:-200} /tmp/dflc_gpu bench examples/qwen36-27b-drafter.dfl --drafter-only --steps 10 --warmup 2 --phase-steps 2 $CMPF 2>&1 |
  grep -E "steps:|step time|MFU|positions/s|^  (drafter forward|loss|backward|optimizer) |energy|rc|error|$CMPR"; done >> $OUT/extra.log 2>&1 && ts bench27_cmp
grep -E "fwd:|bwd:|rc " $OUT/attention.log 2>/dev/null; grep -E "cases|PASS|FAIL|rc" $OUT/checks.log; cat $OUT/session.txt
grep -vE "^\s+(target forward|drafter forward|loss|backward|optimizer) +[a-z_]+ " $OUT/bench8b.log | tail -30
if [ -n "${CMP_OVERLAP:-}" ]; then grep -E "steps:|rc " $OUT/bench8b_nooverlap.log; fi
[ -f $OUT/extra.log ] && cat $OUT/extra.log
[ -f $OUT/old.log ] && cat $OUT/old.log
[ -f $OUT/optim.log ] && grep -vE "^$" $OUT/optim.log
[ -f $OUT/fp8gemm.log ] && cat $OUT/fp8gemm.log
for sp in ${EXTRA_SPECS:-}; do n=$(basename $sp .dfl); echo "== $sp"
  grep -vE "^\s+(target forward|drafter forward|loss|backward|optimizer) +[a-z_]+ " $OUT/$n.log | tail -30; done
[ -n "${SMIPID:-}" ] && kill $SMIPID
true
