#!/bin/bash
# test_train_ux.sh DFLC: what a user watching `dflc train` sees (nano, a few steps on the CPU):
#   - progress lines carry elapsed time and an ETA; the last lines say where the drafter is and
#     the next command (dflc eval), or, stopped early, the checkpoint and how to resume it;
#   - after a kill and --resume, metrics.jsonl holds every step once (the killed run's steps
#     after its checkpoint, and a torn last line, are dropped);
#   - stdout is line-buffered: with both streams in one file a note printed before an error
#     comes before it;
#   - a NaN loss names what went non-finite first (here: the loss, from a target lm_head of
#     huge values), not only "try a lower lr";
#   - an allocation that fails names its bytes, the plan's parts and `dflc plan`;
#   - a run directory knows its run (issue 43): a fresh run into a directory holding an earlier
#     run's checkpoints is refused (golden stderr) unless --restart, which moves them aside; a
#     resume notes what changed (lr) and refuses a change it cannot continue under (block_size);
#     pruning removes only this run's checkpoints, never a folder without the trainer's files;
#     a resumed checkpoint with a NaN in its params or optimizer state is refused naming the tensor;
#   - the next: command quotes a path with a space.
# Run from the repository root (ctest does).
set -u
DFLC=${1:?usage: test_train_ux.sh PATH/TO/dflc}
case $DFLC in /*) ;; *) DFLC=$PWD/$DFLC ;; esac
ROOT=$PWD
[ -f examples/nano.dfl ] || { echo "run from the repository root"; exit 2; }
T=$(mktemp -d "${TMPDIR:-/tmp}/dfl_ux_XXXXXX") || exit 2
trap 'rm -rf "$T"' EXIT
fails=0 n=0
ok() { n=$((n + 1)); echo "ok:   $1"; }
bad() { n=$((n + 1)); fails=$((fails + 1)); echo "FAIL: $1"; [ -f "${2:-}" ] && head -30 "$2" | sed 's/^/    /'; }
# spec NAME MODEL: examples/nano.dfl with absolute paths, its model MODEL
spec() {
  sed -e "s#\"models/nano\"#\"$2\"#" -e "s#\"data/#\"$ROOT/examples/data/#g" -e "s#\"\.\./runs/nano\"#\"$T/ckpt_$1\"#" \
    "$ROOT/examples/nano.dfl" > "$T/$1.dfl"
}
spec nano "$ROOT/examples/models/nano"

# 1. a run stopped at step 3, "killed" after writing steps 4 and 5 and half a line, resumed to 6
"$DFLC" train "$T/nano.dfl" --steps 6 --stop-at 3 --no-eval --out "$T/run" > "$T/a.out" 2>&1 || bad "train --stop-at 3" "$T/a.out"
if grep -q "elapsed 0:00:[0-9][0-9]  eta 0:[0-9][0-9]:[0-9][0-9]" "$T/a.out"; then ok "progress lines have elapsed and eta"
else bad "no elapsed/eta in the progress lines" "$T/a.out"; fi
if tail -2 "$T/a.out" | grep -q "^next: dflc train $T/nano.dfl --out $T/run --resume $T/run/ckpt/step-00000003"; then
  ok "a stopped run ends with its checkpoint and the resume command"
else bad "a stopped run does not say how to resume" "$T/a.out"; fi
sed -n 3p "$T/run/metrics.jsonl" | sed 's/"step":3,/"step":4,/' >> "$T/run/metrics.jsonl"
sed -n 3p "$T/run/metrics.jsonl" | sed 's/"step":3,/"step":5,/' >> "$T/run/metrics.jsonl"
printf '{"step":6,"loss":1' >> "$T/run/metrics.jsonl"
"$DFLC" train "$T/nano.dfl" --steps 6 --no-eval --resume "$T/run/ckpt" --out "$T/run" > "$T/b.out" 2>&1 || bad "train --resume" "$T/b.out"
steps=$(grep -v '"eval"' "$T/run/metrics.jsonl" | sed 's/.*"step":\([0-9]*\),.*/\1/' | tr '\n' ' ')
if [ "$steps" = "1 2 3 4 5 6 " ]; then ok "metrics.jsonl after a resume: every step once ($steps)"
else bad "metrics.jsonl after a resume holds steps: $steps" "$T/run/metrics.jsonl"; fi
if tail -2 "$T/b.out" | head -1 | grep -q "^the drafter is in $T/run/drafter" &&
   tail -1 "$T/b.out" | grep -q "^next: dflc eval $T/nano.dfl --drafter $T/run/drafter$"; then
  ok "the last lines say where the drafter is and the next command"
else bad "the last lines do not say where the drafter is and what to run next" "$T/b.out"; fi

# 2. line-buffered stdout: the warmup note (stdout) comes before the data error (stderr)
printf '{"input_ids": [1, 2], "loss_mask": [1, 1]}\n{"input_ids": [1]}\n' > "$T/badrows.jsonl"
sed -e "s#\"$ROOT/examples/data/nano_train.jsonl.gz\"#\"$T/badrows.jsonl\"#" -e 's/  seed    = 0/  seed    = 0\n  bad_rows = refuse/' \
  "$T/nano.dfl" > "$T/badrows.dfl"
"$DFLC" train "$T/badrows.dfl" --steps 5 --out "$T/run_badrows" > "$T/c.out" 2>&1
note=$(grep -n "^note: 5 steps instead of" "$T/c.out" | cut -d: -f1)
err=$(grep -n "refused" "$T/c.out" | head -1 | cut -d: -f1)
if [ -n "$note" ] && [ -n "$err" ] && [ "$note" -lt "$err" ]; then ok "stdout is line-buffered (note on line $note, error on line $err)"
else bad "the note and the error are out of order (note line '$note', error line '$err')" "$T/c.out"; fi

# 3. a NaN loss names what went non-finite first: lm_head of bf16 3.4e38 (finite, but the logits overflow)
mkdir -p "$T/big"; cp "$ROOT/examples/models/nano/"*.json "$T/big/"; cp "$ROOT/examples/models/nano/model.safetensors" "$T/big/"
hn=$(od -An -t u8 -N8 "$T/big/model.safetensors" | tr -d ' ')
head -c 2097152 /dev/zero | tr '\0' '\177' | dd of="$T/big/model.safetensors" bs=1M seek=$((8 + hn)) oflag=seek_bytes conv=notrunc 2>/dev/null
spec big "$T/big"
"$DFLC" train "$T/big.dfl" --steps 3 --no-eval --out "$T/run_big" > "$T/d.out" 2> "$T/d.err"; rc=$?
if [ $rc = 1 ] && grep -q "step 1: the loss is NaN; stopping. What went non-finite first:" "$T/d.err" &&
   grep -q "^  the loss itself: the drafter's weights were finite" "$T/d.err" && grep -q "lm_head" "$T/d.err"; then
  ok "a NaN loss names the loss (not the weights) as what went non-finite first"
else bad "NaN loss explanation (exit $rc)" "$T/d.err"; fi

# 4. an allocation that cannot succeed (--over-budget past check): its bytes, the plan's parts, dflc plan
sed -e 's/  batch   = 8/  batch   = 1000000/' -e 's/  seq_len = 128/  seq_len = 4096/' "$T/nano.dfl" > "$T/huge.dfl"
"$DFLC" train "$T/huge.dfl" --steps 1 --no-eval --out "$T/run_huge" --over-budget > "$T/e.out" 2> "$T/e.err"; rc=$?
if [ $rc = 1 ] && grep -q "out of memory: cannot allocate [0-9.]* GiB ([0-9]* bytes); the planned arena: weights" "$T/e.err" &&
   grep -q "activations" "$T/e.err" && grep -q '`dflc plan SPEC`' "$T/e.err"; then ok "an allocation failure names bytes, parts and dflc plan"
else bad "allocation failure message (exit $rc)" "$T/e.err"; fi

# 5. the run a checkpoint directory belongs to. $T/run/ckpt holds the run of part 1 (steps 3, 6).
"$DFLC" train "$T/nano.dfl" --steps 4 --no-eval --out "$T/run" > "$T/f.out" 2> "$T/f.err"; rc=$?
sed "s#$T#T#g" "$T/f.err" > "$T/f.got"
cat > "$T/f.want" <<'GOLD'
T/nano.dfl: error: the checkpoint directory `T/run/ckpt` holds 2 checkpoints of an earlier run (the newest step-00000006); a fresh run would mix its checkpoints with them
      = help: `dflc train ... --resume T/run/ckpt` continues that run; `dflc train ... --restart` moves its checkpoints into T/run/ckpt/old-DATE and starts over; or name another directory with --out
GOLD
if [ $rc = 1 ] && diff -u "$T/f.want" "$T/f.got" > "$T/f.diff"; then ok "a fresh run into an earlier run's checkpoints is refused"
else bad "fresh run into an earlier run's checkpoints (exit $rc)" "$T/f.diff"; fi
id1=$(grep '"id"' "$T/run/ckpt/run.json")
"$DFLC" train "$T/nano.dfl" --steps 4 --stop-at 2 --no-eval --out "$T/run" --restart > "$T/g.out" 2>&1; rc=$?
old=$(ls -d "$T/run/ckpt"/old-* 2>/dev/null | head -1)
if [ $rc = 0 ] && [ -n "$old" ] && [ -f "$old/step-00000006/trainer.json" ] && [ -f "$old/run.json" ] &&
   [ -f "$T/run/ckpt/step-00000002/trainer.json" ] && [ "$(grep '"id"' "$T/run/ckpt/run.json")" != "$id1" ] &&
   grep -q "^restart: the earlier run's checkpoints moved to $old" "$T/g.out"; then
  ok "--restart moves the earlier run aside and starts a new one"
else bad "--restart (exit $rc)" "$T/g.out"; fi
# another run's checkpoint copied in, and a folder named like one: a resume with keep = 1 leaves both
mkdir -p "$T/run/ckpt/step-00000000"; echo keep > "$T/run/ckpt/step-00000000/notes.txt"
cp -r "$old/step-00000003" "$T/run/ckpt/step-00000001"
sed -e 's/lr           = 3e-3/lr           = 1e-3/' -e 's/keep  = 2/keep  = 1/' "$T/nano.dfl" > "$T/nano_lr.dfl"
"$DFLC" train "$T/nano_lr.dfl" --steps 4 --no-eval --out "$T/run" --resume "$T/run/ckpt" > "$T/h.out" 2>&1; rc=$?
if [ $rc = 0 ] && grep -q "^note: resuming with a changed lr: 0.003 when $T/run/ckpt/step-00000002 was written, 0.001 now" "$T/h.out"
then ok "a resume notes the changed lr"; else bad "resume with another lr (exit $rc)" "$T/h.out"; fi
if [ -f "$T/run/ckpt/step-00000000/notes.txt" ] && [ -f "$T/run/ckpt/step-00000001/trainer.json" ] &&
   [ ! -d "$T/run/ckpt/step-00000002" ] && [ -f "$T/run/ckpt/step-00000004/trainer.json" ]; then
  ok "pruning keeps another run's checkpoint and a folder without the trainer's files"
else bad "pruning: $(ls "$T/run/ckpt" | tr '\n' ' ')"; fi
sed -e 's/block_size *= *[0-9]*/block_size = 4/' "$T/nano.dfl" > "$T/nano_b4.dfl"
"$DFLC" train "$T/nano_b4.dfl" --steps 8 --no-eval --out "$T/run" --resume "$T/run/ckpt/step-00000004" > "$T/i.out" 2> "$T/i.err"; rc=$?
if [ $rc = 1 ] && grep -q "^dflc: error: resume refused: block_size: 8 when $T/run/ckpt/step-00000004 was written, 4 now" "$T/i.err"
then ok "a resume under another block_size is refused, naming it"; else bad "resume with another block_size (exit $rc)" "$T/i.err"; fi

# 6. a resumed checkpoint with a NaN in its weights or optimizer state: refused naming the tensor
# (before issue 43 it trained on, and the NaN loss blamed finite weights)
for kind in param state; do
  rm -rf "$T/nanck"; cp -r "$T/run/ckpt/step-00000004" "$T/nanck"
  f="$T/nanck/state.safetensors"; hn=$(od -An -t u8 -N8 "$f" | tr -d ' ')
  ent=$(head -c $((8 + hn)) "$f" | tail -c "$hn" | grep -o "\"$kind\.[^\"]*\":{\"dtype\":\"F32\",\"shape\":\[[0-9,]*\],\"data_offsets\":\[[0-9]*" | head -1)
  name=${ent%%\":*}; name=${name#\"}; off=${ent##*[}
  printf '\000\000\300\177' | dd of="$f" bs=1 seek=$((8 + hn + off + 8)) conv=notrunc 2>/dev/null
  "$DFLC" train "$T/nano.dfl" --steps 8 --no-eval --out "$T/run_nan_$kind" --resume "$T/nanck" > "$T/j.out" 2> "$T/j.err"; rc=$?
  if [ $rc = 1 ] && [ -n "$name" ] &&
     grep -q "^$T/nanck/state.safetensors: tensor $name: 1 of [0-9]* values are not finite (the first, element 2, is nan)" "$T/j.err"
  then ok "a NaN in the checkpoint's $kind tensors is refused, naming $name"
  else bad "NaN in a checkpoint's $kind tensor ($name, exit $rc)" "$T/j.err"; fi
done

# 7. the printed next: command quotes a path with a space, so it can be pasted
"$DFLC" train "$T/nano.dfl" --steps 1 --no-eval --out "$T/my run" > "$T/k.out" 2>&1 || bad "train --out 'my run'" "$T/k.out"
if tail -1 "$T/k.out" | grep -qF "next: dflc eval $T/nano.dfl --drafter '$T/my run/drafter'"; then ok "next: quotes a path with a space"
else bad "next: does not quote a path with a space" "$T/k.out"; fi

echo "train_ux: $n checks, $fails failed"
[ $fails = 0 ]
