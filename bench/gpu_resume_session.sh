#!/usr/bin/env bash
# bench/gpu_resume_session.sh DIR [procs]: stop + resume on GPUs against the uninterrupted run, the
# final state.safetensors and exported drafter compared byte for byte (docs/pipeline.md "Stop and
# resume"). DIR holds xz-compressed dflc_gpu and pipeline_gpu and optionally cache/*.cubin.xz.
#   default: examples/tiny.dfl on one GPU, nano-gpu-pipeline.dfl as two logical devices of GPU 0,
#            pipeline_gpu (its part (h) is the same check);
#   procs:   two processes per launch (torchrun-style env, NCCL; 2 GPUs): the replicas of
#            nano-gpu-replicas.dfl, and nano-gpu-pipeline.dfl target rank 0 -> drafter rank 1.
# Writes $OUT/resume.txt and one log per run.
set -o pipefail
cd "$(dirname "$0")/.."
B=${1:?usage: bench/gpu_resume_session.sh DIR [procs]}
. bench/gpu_unpack.sh "$B"
export DFL_NCCL_TIMEOUT_S=20
NCCL=$(ldconfig -p | grep -o '/[^ ]*libnccl.so.2$' | head -1); [ -n "$NCCL" ] && export DFL_NCCL_LIB=$NCCL
unset CUDA_VISIBLE_DEVICES DFL_GPU_MAP
cmpr() { if cmp -s "$1" "$2"; then echo "SAME $3"; else echo "DIFFER $3"; fi; }
PORT=29611
# one run: tag, then dflc train's arguments; two ranks when procs
run() {
  local tag=$1; shift
  if [ "$MODE" = procs ]; then
    PORT=$((PORT + 1))
    for r in 0 1; do
      RANK=$r LOCAL_RANK=$r WORLD_SIZE=2 LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$PORT \
        timeout 100 /tmp/dflc_gpu train "$@" > $OUT/$tag.rank$r.log 2>&1 &
    done
    wait
  else
    timeout 150 /tmp/dflc_gpu train "$@" > $OUT/$tag.log 2>&1
  fi
  echo "-- $tag: $(cat $OUT/$tag*.log | grep -E 'resumed|done|checkpoint:|exported|rror|refused' | tr '\n' '|')"
}
# full 6 steps, 3 steps, resumed 3..6: the same bytes
cut_and_resume() {
  local spec=$1 D=/tmp/resume-$1; shift; rm -rf $D
  run $spec-full examples/$spec.dfl --steps 6 --out $D/full "$@"
  run $spec-cut examples/$spec.dfl --steps 6 --stop-at 3 --out $D/cut "$@"
  run $spec-res examples/$spec.dfl --resume $D/cut/ckpt --out $D/cut "$@"
  cmpr $D/full/ckpt/step-00000006/state.safetensors $D/cut/ckpt/step-00000006/state.safetensors "$spec state"
  cmpr $D/full/drafter/model.safetensors $D/cut/drafter/model.safetensors "$spec export"
}
MODE=${2:-one}
{
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
if [ "$MODE" = procs ]; then
  cut_and_resume nano-gpu-replicas
  cut_and_resume nano-gpu-pipeline
else
  cut_and_resume tiny --no-eval
  DFL_GPU_MAP=0,0 cut_and_resume nano-gpu-pipeline
  ( timeout 240 /tmp/pipeline_gpu; echo "pipeline_gpu rc $?" ) > $OUT/pipeline_gpu.log 2>&1
  grep -E "^\((a|h)\) |PASS|failure|rc " $OUT/pipeline_gpu.log | grep -v "^(a) step"
fi
} > $OUT/resume.txt 2>&1
cat $OUT/resume.txt
