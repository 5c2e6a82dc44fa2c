#!/bin/bash
# test_bench_drafter.sh DFLC: `dflc bench --drafter-only` (issue 6) on the CPU backend with a nano
# drafter (random ids, fresh seed each run): it completes, reports drafter positions/s, its JSON is
# consistent (positions/s = anchors x block x batch / step time; the peer's FLOP count = dflc's +
# one 2 x positions x hidden x vocab GEMM (the frozen head's dW) + the two vocabulary GEMMs of the
# anchor rows dflc leaves out, 4 x anchors x batch x hidden x vocab + the drafter rows dflc skips (the
# same count as the plain graph's, compile { block_rows = false }, whose FLOPs are dflc's + those); no target forward: fewer FLOPs than the colocated
# step); `--ops` lists the time per (phase, op kind) adding up to its total, and `--gemms` the GEMMs by shape
# adding up to the matmul rows; an FP8 target says so
# in the header and the JSON; the CPU run reports no energy (the JSON's -1); and the 27B drafter spec
# checks, plans, and is refused cleanly on the CPU.
# Run from the repository root (ctest does).
set -u
DFLC=${1:?usage: test_bench_drafter.sh PATH/TO/dflc}
DFLC=$(realpath "$DFLC") || exit 2
[ -f examples/nano.dfl ] || { echo "run from the repository root (no examples/nano.dfl)"; exit 2; }
ROOT=$(pwd)
T=$(mktemp -d "${TMPDIR:-/tmp}/dfl_benchd_XXXXXX") || exit 2
trap 'rm -rf "$T"' EXIT
SEED=$(( $(date +%s%N) % 1000000007 ))
echo "seed $SEED"
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

# nano.dfl with absolute paths, synthetic ids and this run's seeds
sed -e "s|\"models/nano\"|\"$ROOT/examples/models/nano\"|" -e "s|^  train *=.*|  format = random|" \
    -e "/^  eval *=/d" -e "s|^  seed *= *0|  seed = $SEED|" -e "s|^  seed *= *1|  seed = $((SEED + 1))|" \
    -e "s|\"../runs/nano\"|\"$T/ckpt\"|" examples/nano.dfl > "$T/nano.dfl"
grep -q "format = random" "$T/nano.dfl" || fail "could not rewrite nano.dfl"

(cd "$T" && "$DFLC" bench nano.dfl --drafter-only --cpu --steps 3 --warmup 1 --phase-steps 1 --json d.json) > "$T/d.log" 2>&1
rc=$?; cat "$T/d.log"
[ $rc -eq 0 ] || fail "drafter-only bench exited $rc"
grep -Eq "^drafter positions/s: [0-9]+" "$T/d.log" || fail "no 'drafter positions/s' line"
grep -q "drafter alone" "$T/d.log" || fail "the header does not say drafter alone"
grep -q "^  target forward" "$T/d.log" && fail "a target forward phase in drafter-only mode"
# the plain drafter graph (compile { block_rows = false }: no rows skipped) for the peer count's consistency below
{ cat "$T/nano.dfl"; printf '\ncompile { block_rows = false }\n'; } > "$T/nano0.dfl"
(cd "$T" && "$DFLC" bench nano0.dfl --drafter-only --cpu --steps 2 --warmup 1 --phase-steps 1 --json d0.json) \
  > "$T/d0.log" 2>&1 || fail "drafter-only bench with block_rows = false exited $?"
(cd "$T" && "$DFLC" bench nano.dfl --cpu --steps 4 --warmup 1 --phase-steps 1 --json c.json --gemms --floor) > "$T/c.log" 2>&1 \
  || fail "colocated bench exited $?"
# --ops: one row per (phase, op kind), the GEMMs of every phase among them, rows adding up to the total
for row in "target forward +matmul" "drafter forward +matmul" "backward +matmul" "loss +linear_ce" "optimizer +adamw"; do
  grep -Eq "^  $row +[0-9]+ +[0-9.]+ " "$T/c.log" || fail "--ops has no '$row' row"
done
awk '/^ops \(/ { for (i = 1; i <= NF; i++) if ($i == "ms" && $(i + 1) == "in") total = $(i - 1) }
     /^  [a-z]/ && $(NF - 2) ~ /%$/ && $(NF - 3) ~ /^[0-9.]+$/ { sum += $(NF - 3); share += $(NF - 2) + 0; n++ }
     END { if (n < 10 || total <= 0 || (sum - total) ^ 2 > (0.01 * total + 0.01) ^ 2 || (share - 100) ^ 2 > (0.05 * n + 0.01) ^ 2) {
             print "--ops rows: " n ", ms sum " sum " vs total " total ", shares " share; exit 1 } }' "$T/c.log" \
  || fail "--ops rows do not add up"

# --gemms: the GEMM rows split by shape; per phase their times add up to that phase's matmul row, and every
# shape's FLOPs are 2 M N K per GEMM (TFLOP/s = count 2 M N K / ms, to the table's rounding)
awk 'function phase(last,   p, j) { p = $1; for (j = 2; j <= last; j++) p = p " " $j; return p }
     /^ops \(/ { ops = 1 } /^GEMMs by shape/ { ops = 0; gem = 1; next } /^warmup/ { gem = 0 }
     ops && / matmul / { for (i = 1; $i != "matmul"; i++); want[phase(i - 1)] = $(i + 2) }
     gem && /^  [a-z]/ && $1 != "phase" { i = NF - 3; if ($i == "+acc") i--
       m = $(i - 4); nn = $(i - 3); k = $(i - 2); cnt = $(NF - 2); ms = $(NF - 1); tf = $NF
       got[phase(i - 5)] += ms; n++
       if (!(m > 0 && nn > 0 && k > 0 && cnt > 0)) { print "bad GEMM row: " $0; bad = 1 }
       if (ms > 0.05 && (cnt * 2 * m * nn * k / (ms * 1e-3) / 1e12 - tf) ^ 2 > (0.06 + 0.002 * tf) ^ 2) { print "TFLOP/s off: " $0; bad = 1 } }
     END { if (n < 4) { print "GEMM table: " n " rows"; exit 1 }
           for (p in want) { if ((got[p] - want[p]) ^ 2 > (0.002 * want[p] + 0.002 * n) ^ 2) { print p ": GEMM rows " got[p] " vs matmul row " want[p]; bad = 1 }; np++ }
           if (np < 3) { print "matmul rows of --ops: " np; bad = 1 }
           exit bad }' "$T/c.log" || fail "--gemms table inconsistent with --ops"

# --floor: its two passes run the GEMMs and loss head, then those and the attention: exactly the ops of
# those kinds that --ops counted. Before the passes ran on a private copy of the step's tensors, the CPU
# backend stopped here (the loss head's labels overwritten by a GEMM the plan let share their bytes).
awk '/^ops \(/ { ops = 1 } /^GEMMs by shape/ { ops = 0 }
     ops && /^  [a-z]/ { for (i = 1; i <= NF; i++) if ($i ~ /^(matmul|linear_ce|attention|attention_bwd)$/) {
       n[$i == "matmul" || $i == "linear_ce" ? "g" : "a"] += $(i + 1) } }
     function nops(   m) { m = match($0, /\([0-9]+ ops/); return m ? substr($0, RSTART + 1, RLENGTH - 5) + 0 : -1 }
     /^floor: GEMMs and loss head alone \(/ { fg = nops(); gl++; if (!match($0, /: [0-9.]+ ms\/step/)) bad = 1 }
     /^floor: GEMMs, loss head and attention alone \(/ { fa = nops(); al++; if (!match($0, /: [0-9.]+ ms\/step/)) bad = 1 }
     /NOTE: .* not finite/ { print "non-finite values after the floor: " $0; bad = 1 }
     END { if (gl != 1 || al != 1) { print "floor lines: " gl " and " al; exit 1 }
           if (fg != n["g"] || fa != n["g"] + n["a"]) { print "floor ops " fg ", " fa " vs --ops " n["g"] ", " n["g"] + n["a"]; exit 1 }
           exit bad }' "$T/c.log" || fail "--floor lines wrong"

num() { sed -E "s/.*\"$2\":([-0-9.e+]+).*/\1/" "$1"; }
# the spread of the step time: min <= median <= max, all positive, the median near the mean
if [ -f "$T/c.json" ]; then
  awk -v mean="$(num "$T/c.json" step_ms)" -v med="$(num "$T/c.json" step_ms_median)" \
      -v lo="$(num "$T/c.json" step_ms_min)" -v hi="$(num "$T/c.json" step_ms_max)" 'BEGIN {
    if (!(lo > 0) || !(lo <= med) || !(med <= hi) || !(med > 0.3 * mean) || !(med < 3 * mean)) {
      print "step spread: mean " mean ", median " med ", min " lo ", max " hi; exit 1 } }' \
    || fail "step-time median/spread inconsistent"
  grep -Eq "^step time over [0-9]+ intervals between results: median [0-9.]+ ms, min [0-9.]+, max [0-9.]+$" "$T/c.log" \
    || fail "no step-time spread line"
  # energy is a GPU board's (NVML): on the CPU backend the JSON says not measured (-1) and no line claims it
  for f in joules_per_step watts_avg power_limit_watts; do
    [ "$(num "$T/c.json" $f)" = "-1.000" ] || [ "$(num "$T/c.json" $f)" = "-1.0" ] || fail "$f on the CPU: $(num "$T/c.json" $f)"
  done
  grep -q "^energy:" "$T/c.log" && fail "an energy line on the CPU backend"
  for f in floor_gemm_ms floor_attention_ms; do
    awk -v v="$(num "$T/c.json" $f)" 'BEGIN { exit !(v > 0) }' || fail "$f: $(num "$T/c.json" $f)"
  done
  for f in floor_gemm_joules floor_attention_joules; do
    [ "$(num "$T/c.json" $f)" = "-1.0" ] || fail "$f on the CPU: $(num "$T/c.json" $f)"
  done
  # without --floor the JSON says not measured
  awk -v v="$(num "$T/d.json" floor_gemm_ms)" 'BEGIN { exit !(v == -1) }' || fail "floor_gemm_ms without --floor: $(num "$T/d.json" floor_gemm_ms)"
fi
H=$(sed -nE 's/.*"hidden_size": *([0-9]+).*/\1/p' examples/models/nano/config.json)
V=$(sed -nE 's/.*"vocab_size": *([0-9]+).*/\1/p' examples/models/nano/config.json)
A=$(sed -nE 's/^  anchors *= *([0-9]+).*/\1/p' "$T/nano.dfl"); K=$(sed -nE 's/^  block_size *= *([0-9]+).*/\1/p' "$T/nano.dfl")
Bt=$(sed -nE 's/^  batch *= *([0-9]+).*/\1/p' "$T/nano.dfl")
if [ -f "$T/d.json" ] && [ -f "$T/c.json" ] && [ -f "$T/d0.json" ]; then
  awk -v pps="$(num "$T/d.json" positions_per_s)" -v ms="$(num "$T/d.json" step_ms)" \
      -v fd="$(num "$T/d.json" tflop_per_step)" -v fp="$(num "$T/d.json" tflop_per_step_peer_count)" \
      -v sk="$(num "$T/d.json" tflop_per_step_skipped_rows)" -v fd0="$(num "$T/d0.json" tflop_per_step)" \
      -v fp0="$(num "$T/d0.json" tflop_per_step_peer_count)" -v sk0="$(num "$T/d0.json" tflop_per_step_skipped_rows)" \
      -v fc="$(num "$T/c.json" tflop_per_step)" -v a="$A" -v k="$K" -v b="$Bt" -v h="$H" -v v="$V" 'BEGIN {
    want = a * k * b / (ms * 1e-3); bad = 0
    # tolerance: JSON rounding (0.1 positions/s, 1e-3 ms, 1e-6 TFLOP)
    if (!(pps > 0) || (pps - want) ^ 2 > (1e-3 * want + 0.2) ^ 2) { print "positions/s " pps " != " want; bad = 1 }
    # the skipped rows: what the plain graph computes beyond this one; none in the plain graph
    if (!(sk > 0) || sk0 != 0 || (fd0 - fd - sk) ^ 2 > (3e-6 + 1e-6 * fd0) ^ 2) {
      print "skipped rows " sk " (plain graph: " sk0 "), FLOPs " fd " + skipped != plain " fd0; bad = 1 }
    if ((fp0 - fp) ^ 2 > (3e-6 + 1e-6 * fp) ^ 2) { print "peer count " fp " differs from the plain graph'"'"'s " fp0; bad = 1 }
    extra = (2 * a * k * b * h * v + 4 * a * b * h * v) / 1e12 + sk
    if ((fp - fd - extra) ^ 2 > (2e-6 + 1e-6 * fp) ^ 2) { print "peer count " fp " != " fd " + " extra; bad = 1 }
    if (!(fd > 0) || !(fd < fc)) { print "drafter-only FLOPs " fd " not below colocated " fc; bad = 1 }
    printf "positions/s %.1f (want %.1f); TFLOP/step drafter-only %.6f, peer count %.6f (extra %.6f), colocated %.6f\n", pps, want, fd, fp, extra, fc
    exit bad }' || fail "JSON numbers inconsistent"
  grep -q '"drafter_only":1' "$T/d.json" || fail "d.json does not say drafter_only"
else
  fail "no JSON written"
fi

# an FP8 target (quantize = fp8) says so in the header and the JSON; the others say they are not
sed -e "s|^  dtype = fp32|  dtype = fp32\n  quantize = fp8|" "$T/nano.dfl" > "$T/nano8.dfl"
grep -q "quantize = fp8" "$T/nano8.dfl" || fail "could not write the FP8 spec"
(cd "$T" && "$DFLC" bench nano8.dfl --cpu --steps 2 --warmup 1 --phase-steps 1 --json f.json) > "$T/f.log" 2>&1 \
  || { cat "$T/f.log"; fail "FP8 bench exited $?"; }
grep -q "target GEMMs in FP8" "$T/f.log" || fail "the FP8 bench's header does not say FP8"
grep -q '"target_fp8":1' "$T/f.json" 2>/dev/null || fail "f.json does not say target_fp8 1"
grep -q '"target_fp8":0' "$T/c.json" 2>/dev/null || fail "c.json does not say target_fp8 0"
grep -q "FP8" "$T/c.log" && fail "the bf16 bench's header mentions FP8"
grep -q '"target_fp8_fast":0' "$T/f.json" 2>/dev/null || fail "f.json does not say target_fp8_fast 0"
# quantize = fp8_fast: the header and the JSON say so; the CPU backend has no fast accumulation, so its
# losses are those of quantize = fp8
sed -e "s|quantize = fp8|quantize = fp8_fast|" "$T/nano8.dfl" > "$T/nano8f.dfl"
(cd "$T" && "$DFLC" bench nano8f.dfl --cpu --steps 2 --warmup 1 --phase-steps 1 --json g.json) > "$T/g.log" 2>&1 \
  || { cat "$T/g.log"; fail "FP8 fast bench exited $?"; }
grep -q "target GEMMs in FP8 (fast accumulation)" "$T/g.log" || fail "the fp8_fast bench's header does not say so"
grep -q '"target_fp8":1' "$T/g.json" 2>/dev/null && grep -q '"target_fp8_fast":1' "$T/g.json" 2>/dev/null \
  || fail "g.json does not say target_fp8 1 and target_fp8_fast 1"
lf=$(grep -o "loss [0-9.]* -> [0-9.]*" "$T/f.log"); lg=$(grep -o "loss [0-9.]* -> [0-9.]*" "$T/g.log")
[ -n "$lf" ] && [ "$lf" = "$lg" ] || fail "CPU losses of fp8 ($lf) and fp8_fast ($lg) differ"

# the 27B drafter spec: checkable, plannable, refused (not attempted) on the CPU
"$DFLC" check examples/qwen36-27b-drafter.dfl > "$T/chk.log" 2>&1 || { cat "$T/chk.log"; fail "check of the 27B drafter spec"; }
"$DFLC" plan examples/qwen36-27b-drafter.dfl --quiet > "$T/plan.log" 2>&1 || { cat "$T/plan.log"; fail "plan of the 27B drafter spec"; }
"$DFLC" bench examples/qwen36-27b-drafter.dfl --drafter-only --cpu > "$T/r.log" 2>&1
rc=$?; cat "$T/r.log"
[ $rc -eq 1 ] || fail "27B drafter on the CPU: exit $rc, want 1"
grep -q "qwen36-27b-drafter.dfl.*too large for the CPU reference backend" "$T/r.log" || fail "no clear refusal message"

[ $fails -eq 0 ] && echo "PASS train_bench_drafter" || echo "$fails failure(s)"
[ $fails -eq 0 ]
