set -o pipefail
B=build-gpu8
. bench/gpu_unpack.sh "$B"
( timeout 60 /tmp/cuda_step 2>&1 | tail -4; echo "cuda_step rc $?" ) > $OUT/step.log 2>&1
F="steps:|kernel launches|step time|MFU|positions/s|memory|energy|rc|error|fail"
( timeout 120 /tmp/dflc_gpu bench examples/qwen36-27b-drafter.dfl --drafter-only --steps 10 --warmup 2 --phase-steps 2 --ops; echo "rc $?" ) > $OUT/d27_new.log 2>&1
( timeout 120 /tmp/dflc_old bench examples/qwen36-27b-drafter.dfl --drafter-only --steps 10 --warmup 2 --phase-steps 2; echo "rc $?" ) > $OUT/d27_old.log 2>&1
cat $OUT/step.log; for f in d27_new d27_old; do echo "== $f"; grep -E "$F" $OUT/$f.log | head -12; done
grep -E "^  +[a-z ]+ +(swiglu|swiglu_bwd|add|accum|sigmoid_mul|gdn_gates) " $OUT/d27_new.log
