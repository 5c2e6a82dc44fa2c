#!/usr/bin/env bash
# bench/gpu_pipeline_session.sh DIR: the multi-device regression check on 2 GPUs (issue 6 session 2: a check on 2 x H200 of the multi-device code with this session's
# kernels): pipeline_gpu --topo (2 GPU replicas over NCCL in one process; target GPU 0 ->
# drafter GPU 1 across processes), pipeline_gpu (logical devices on one GPU, queue depth 1,
# against the single-device GPU trainer), and the tiny example trained on one GPU (device memory flat).
set -o pipefail
cd "$(dirname "$0")/.."
B=${1:?usage: bench/gpu_pipeline_session.sh DIR (xz-compressed dflc_gpu and pipeline_gpu)}
for b in dflc_gpu pipeline_gpu; do xz -dc $B/$b.xz > /tmp/$b && chmod +x /tmp/$b; done
export DFL_CACHE_DIR=/tmp/dflc-cache DFL_NCCL_TIMEOUT_S=20
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > $OUT/gpu.txt 2>&1
NCCL=$(ldconfig -p | grep -o '/[^ ]*libnccl.so.2$' | head -1)
[ -z "$NCCL" ] && NCCL=$(find / -xdev -name 'libnccl.so.2*' 2>/dev/null | head -1)
[ -n "$NCCL" ] && export DFL_NCCL_LIB=$NCCL
echo "DFL_NCCL_LIB=$DFL_NCCL_LIB" >> $OUT/gpu.txt
( time timeout 60 /tmp/pipeline_gpu --topo; echo "rc $?" ) > $OUT/topo.log 2>&1
( time timeout 60 /tmp/pipeline_gpu; echo "rc $?" ) > $OUT/test.log 2>&1
( time timeout 90 /tmp/dflc_gpu train examples/tiny.dfl --steps 12 --out /tmp/tinyrun; echo "rc $?" ) > $OUT/tiny.log 2>&1
grep -v "rows were longer\|rows, .* tokens" $OUT/topo.log | tail -25
echo ====; grep -v "rows were longer\|rows, .* tokens" $OUT/test.log | tail -25
echo ====; tail -12 $OUT/tiny.log; cat $OUT/gpu.txt
