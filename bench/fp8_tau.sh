#!/usr/bin/env bash
# What the FP8 target costs a drafter (docs/fp8.md, "Fast accumulation"): trains the nano example on one
# GPU in bf16 with the target unquantized, `quantize = fp8` and `quantize = fp8_fast`, for three seed
# pairs (nine runs of 800 steps), then evaluates each drafter against the unquantized target.
#   usage: bash bench/fp8_tau.sh DFLC OUTDIR [EVAL_DFLC]
# DFLC trains (a CUDA build), EVAL_DFLC evaluates (default DFLC; any build: eval runs on the CPU).
# Writes OUTDIR/tau.log (train tails, then one JSON line per drafter) and OUTDIR/runs/<name>/drafter.
set -u
D=${1:?usage: fp8_tau.sh DFLC OUTDIR [EVAL_DFLC]}; O=${2:?usage: fp8_tau.sh DFLC OUTDIR [EVAL_DFLC]}; E=${3:-$1}
mkdir -p "$O/specs" "$O/runs"
root=$(cd "$(dirname "$0")/.." && pwd)
for q in none fp8 fp8_fast; do
  for sd in "1 0" "2 2" "3 3"; do
    set -- $sd
    n=nano-$q-$1$2; sf=$O/specs/$n.dfl
    qline=""; [ "$q" != none ] && qline="  quantize = $q"
    # the README's spec, in bf16, with the seeds, absolute paths and one GPU
    sed -e '/^topology/,$d' -e "s/^  dtype = fp32/  dtype = bf16\n$qline/" -e "s/^  precision    = fp32/  precision    = bf16/" \
        -e "s/^  seed       = 1/  seed       = $1/" -e "s/^  seed    = 0/  seed    = $2/" \
        -e "s|\"models/nano\"|\"$root/examples/models/nano\"|" -e "s|\"data/|\"$root/examples/data/|" \
        "$root/examples/nano.dfl" > "$sf"
    printf 'topology {\n  gpus = 1\n  target = gpu0\n  drafter = gpu0\n  colocate = true\n}\n' >> "$sf"
    { echo "== $n"; "$D" train "$sf" --cuda --no-eval --quiet --out "$O/runs/$n" 2>&1 | tail -3; } >> "$O/tau.log"
  done
done
for r in "$O"/runs/*/drafter; do
  "$E" eval "$root/examples/nano.dfl" --drafter "$r" 2>&1 | tail -1 >> "$O/tau.log"
done
