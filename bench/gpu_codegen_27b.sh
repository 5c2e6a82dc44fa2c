set -o pipefail
B=build-gpu8
. bench/gpu_unpack.sh "$B"
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader > $OUT/session.txt
F="steps:|forward:|kernel launches|step time|MFU|positions/s|memory|energy|rc|error|refus|GiB"
( timeout 170 /tmp/dflc_gpu bench examples/qwen36-27b-target.dfl --target-only --steps 3 --warmup 1 --phase-steps 1 --ops; echo "rc $?" ) > $OUT/t27_new.log 2>&1
( timeout 150 /tmp/dflc_old bench examples/qwen36-27b-target.dfl --target-only --steps 3 --warmup 1; echo "rc $?" ) > $OUT/t27_old.log 2>&1
( timeout 120 /tmp/dflc_gpu bench examples/qwen36-27b-drafter.dfl --drafter-only --steps 10 --warmup 2 --phase-steps 2; echo "rc $?" ) > $OUT/d27_new.log 2>&1
( timeout 120 /tmp/dflc_old bench examples/qwen36-27b-drafter.dfl --drafter-only --steps 10 --warmup 2 --phase-steps 2; echo "rc $?" ) > $OUT/d27_old.log 2>&1
for f in t27_new t27_old d27_new d27_old; do echo "== $f"; grep -E "$F" $OUT/$f.log | head -12; done
grep -E "^  +[a-z ]+ +(gdn_gates|sigmoid_mul|swiglu|gated_delta|conv1d_silu|attention) " $OUT/t27_new.log
