#!/bin/bash
# test_check_deep.sh DFLC [--update]: what `dflc check` finds beyond the spec, each case with its
# golden stderr in tests/cli/check_deep/NAME.expected (the scratch directory shows as T): target
# weights that are missing, truncated, of an integer dtype, mis-shaped, absent, or whose shards and
# index disagree (headers only: check never reads the weight data); a memory plan over its budget
# or over this machine (DFL_HOST_MEMORY); a run directory that cannot be made. Then what only
# loading can see: NaN weights refused by `dflc train` naming the tensor, and `train` refusing a
# plan over budget unless --over-budget. The target's weights, index or config.json as a FIFO, a
# dangling link or a link loop: refused as what they are (issue 43), by check and train. A checkpoint
# directory under /proc, behind a dangling link, or the root directory. A released drafter whose
# config.json disagrees with the spec (block_size, mask_token_id, target_layer_ids) or is empty. A
# hybrid whose conv kernel size is not the checkpoint's: one error per stored tensor.
# Data train would refuse: packed with a bad checksum, truncated or compressed; no usable row.
# Run from the repository root (ctest does).
set -u
DFLC=${1:?usage: test_check_deep.sh PATH/TO/dflc [--update]}
case $DFLC in /*) ;; *) DFLC=$PWD/$DFLC ;; esac
UPDATE=${2:-}
ROOT=$PWD
[ -f examples/nano.dfl ] || { echo "run from the repository root"; exit 2; }
T=$(mktemp -d "${TMPDIR:-/tmp}/dfl_deep_XXXXXX") || exit 2
trap 'rm -rf "$T"' EXIT
G=$ROOT/tests/cli/check_deep
fails=0 n=0

# header_edit SRC DST SED: DST is SRC with its safetensors header rewritten by SED (same length)
header_edit() {
  local n; n=$(od -An -t u8 -N8 "$1" | tr -d ' ')
  head -c 8 "$1" > "$2"
  head -c $((8 + n)) "$1" | tail -c "$n" | sed "$3" > "$T/hdr"
  [ "$(wc -c < "$T/hdr")" = "$n" ] || { echo "header_edit: $3 changed the header's length"; exit 2; }
  cat "$T/hdr" >> "$2"
  tail -c +$((9 + n)) "$1" >> "$2"
}
# model NAME [FROM]: a copy of examples/models/FROM (nano) as T/NAME
model() { mkdir -p "$T/$1"; cp "$ROOT/examples/models/${2:-nano}/"*.json "$T/$1/"; }
# spec NAME MODEL [SPEC]: T/NAME.dfl, examples/SPEC.dfl (nano) with its model and paths moved
spec() {
  sed -e "s#\"models/[a-z]*\"#\"$T/$2\"#" -e "s#\"data/#\"$ROOT/examples/data/#g" -e "s#\"\.\./runs/nano\"#\"$T/ckpt\"#" \
    "$ROOT/examples/${3:-nano}.dfl" > "$T/$1.dfl"
}
# golden NAME RC ARGS...: dflc ARGS exits RC, its stderr (T for the scratch dir) is NAME.expected
golden() {
  local name=$1 want=$2; shift 2
  n=$((n + 1))
  timeout 300 "$DFLC" "$@" > "$T/out" 2> "$T/err"; local rc=$?
  sed -i -e "s#$T#T#g" -e "s#$ROOT/##g" "$T/err"
  [ "$UPDATE" = --update ] && cp "$T/err" "$G/$name.expected"
  if [ $rc -ne "$want" ]; then echo "FAIL $name: exit $rc, want $want"; cat "$T/err"; fails=$((fails + 1)); return; fi
  if ! cmp -s "$T/err" "$G/$name.expected"; then
    echo "FAIL $name: stderr differs from $G/$name.expected"; diff "$G/$name.expected" "$T/err" | head -30
    fails=$((fails + 1)); return
  fi
  echo "ok:   $name -> $rc"
}
NANO=$ROOT/examples/models/nano/model.safetensors

model noweights;  spec noweights noweights
model truncated;  spec truncated truncated; head -c 4000000 "$NANO" > "$T/truncated/model.safetensors"
model i16;        spec i16 i16
header_edit "$NANO" "$T/i16/model.safetensors" 's/"model.layers.0.self_attn.q_proj.weight":{"dtype":"BF16"/"model.layers.0.self_attn.q_proj.weight":{"dtype":"I16" /'
model shape;      spec shape shape
header_edit "$NANO" "$T/shape/model.safetensors" 's/"model.layers.0.mlp.gate_proj.weight":{"dtype":"BF16","shape":\[384,128\]/"model.layers.0.mlp.gate_proj.weight":{"dtype":"BF16","shape":[128,384]/'
model missing;    spec missing missing
header_edit "$NANO" "$T/missing/model.safetensors" 's/model.layers.1.mlp.up_proj.weight/model.layers.1.mlp.up_proX.weight/; s/model.layers.2.self_attn.o_proj.weight/model.layers.2.self_attn.o_projX_eight/'
model shards tiny; spec shards shards tiny
cp "$ROOT/examples/models/tiny/"*.safetensors "$T/shards/"
grep -v '"model.layers.2.mlp.up_proj.weight"' "$ROOT/examples/models/tiny/model.safetensors.index.json" > "$T/shards/model.safetensors.index.json"
model shardmiss tiny; spec shardmiss shardmiss tiny
cp "$ROOT/examples/models/tiny/model-0000"[12]*.safetensors "$T/shardmiss/"

golden weights_none 1 check "$T/noweights.dfl"
golden weights_truncated 1 check "$T/truncated.dfl"
golden weights_i16 1 check "$T/i16.dfl"
golden weights_shape 1 check "$T/shape.dfl"
golden weights_missing 1 check "$T/missing.dfl"
golden weights_shard_index 1 check "$T/shards.dfl"
golden weights_shard_missing 1 check "$T/shardmiss.dfl"
# the hybrid's conv1d read as three slices (q, k, v): a kernel size the checkpoint does not have is one
# error per stored tensor, in its own terms (rows and values a row), not one per slice
model conv3 nano-hybrid; spec conv3 conv3 nano-hybrid; cp "$ROOT/examples/models/nano-hybrid/model.safetensors" "$T/conv3/"
sed -i "s#\"models/nano-hybrid\"#\"$T/conv3\"#" "$T/conv3.dfl"
sed -i 's/"linear_conv_kernel_dim": *4/"linear_conv_kernel_dim": 3/' "$T/conv3/config.json"
golden weights_conv_kernel 1 check "$T/conv3.dfl"

# the memory plan: over a budget, over this machine
spec budget good; model good; cp "$NANO" "$T/good/"
sed -i 's/  colocate = true.*/  colocate = true\n  memory { default = 2MiB }/' "$T/budget.dfl"
golden plan_budget 1 check "$T/budget.dfl"
spec host good
DFL_HOST_MEMORY=4000000 golden plan_host 1 check "$T/host.dfl"
# train refuses what check refuses (the same verdict), unless --over-budget
golden train_budget 1 train "$T/budget.dfl" --steps 1 --out "$T/run_budget"
n=$((n + 1))
if DFL_HOST_MEMORY=4000000 "$DFLC" train "$T/host.dfl" --steps 1 --no-eval --no-export --out "$T/run_host" --over-budget \
     > "$T/out" 2>&1 && grep -q "step 1/1" "$T/out"; then echo "ok:   train --over-budget trains"
else echo "FAIL train --over-budget:"; head -20 "$T/out"; fails=$((fails + 1)); fi

# a run directory that cannot be made (runs/ is a file here)
mkdir -p "$T/cwd"; : > "$T/cwd/runs"; spec rundir good
cd "$T/cwd"; golden run_dir 1 check "$T/rundir.dfl"; cd "$ROOT"

# NaN weights: the header is fine (check passes), loading refuses them naming the tensor
model nan; spec nan nan; cp "$NANO" "$T/nan/model.safetensors"
hn=$(od -An -t u8 -N8 "$NANO" | tr -d ' ')
# lm_head.weight is first in the data area: its element 3 becomes a bf16 NaN
printf '\377\177' | dd of="$T/nan/model.safetensors" bs=1 seek=$((8 + hn + 6)) conv=notrunc 2>/dev/null
golden weights_nan_check 0 check "$T/nan.dfl"
golden weights_nan_train 1 train "$T/nan.dfl" --steps 1 --no-eval --out "$T/run_nan"

# a released drafter (init = "DIR"): a good export passes, a mis-shaped one is refused at `init`
"$DFLC" train "$T/host.dfl" --steps 1 --no-eval --out "$T/dr" > "$T/out" 2>&1 || { echo "FAIL: training a drafter to init from"; cat "$T/out"; fails=$((fails + 1)); }
mkdir -p "$T/drbad"; cp "$T/dr/drafter/config.json" "$T/drbad/"
header_edit "$T/dr/drafter/model.safetensors" "$T/drbad/model.safetensors" 's/"fc.weight":{"dtype":"BF16","shape":\[128,256\]/"fc.weight":{"dtype":"BF16","shape":[256,128]/'
sed "s#init       = fresh#init       = \"$T/dr/drafter\"#" "$T/host.dfl" > "$T/init.dfl"
sed "s#init       = fresh#init       = \"$T/drbad\"#" "$T/host.dfl" > "$T/initbad.dfl"
golden init_good 0 check "$T/init.dfl"
golden init_shape 1 check "$T/initbad.dfl"
# ... and one whose config.json disagrees with the spec, or is empty: train's loader refuses it, so
# check does too (issue 43 item 6), at `init`
for c in block mask taps empty; do
  mkdir -p "$T/drconf_$c"; cp "$T/dr/drafter/model.safetensors" "$T/drconf_$c/"
  case $c in
    block) sed 's/"block_size": *8/"block_size": 4/' "$T/dr/drafter/config.json" ;;
    mask)  sed 's/"mask_token_id": *[0-9]*/"mask_token_id": 7/' "$T/dr/drafter/config.json" ;;
    taps)  tr -d '\n' < "$T/dr/drafter/config.json" | sed 's/"target_layer_ids": *\[[^]]*\]/"target_layer_ids": [0]/' ;;
    empty) : ;;
  esac > "$T/drconf_$c/config.json"
  sed "s#init       = fresh#init       = \"$T/drconf_$c\"#" "$T/host.dfl" > "$T/drconf_$c.dfl"
  golden "init_config_$c" 1 check "$T/drconf_$c.dfl"
done

# a FIFO as data: check refuses it (train would block reading it forever)
mkfifo "$T/fifo.jsonl"
sed "s#\"$ROOT/examples/data/nano_train.jsonl.gz\"#\"$T/fifo.jsonl\"#" "$T/host.dfl" > "$T/fifo.dfl"
golden data_fifo 1 check "$T/fifo.dfl"

# the target's files as FIFOs, a dangling link, a link loop: refused with what they are, never a
# hang in open() (golden runs under `timeout 300`; before issue 43 these blocked forever)
for f in weights config index tokenizer dangling loop; do model "fifo_$f"; spec "fifo_$f" "fifo_$f"; done
mkfifo "$T/fifo_weights/model.safetensors"
rm "$T/fifo_config/config.json"; mkfifo "$T/fifo_config/config.json"
mkfifo "$T/fifo_index/model.safetensors.index.json"
rm "$T/fifo_tokenizer/tokenizer.json"; mkfifo "$T/fifo_tokenizer/tokenizer.json"; cp "$NANO" "$T/fifo_tokenizer/"
ln -s nowhere.safetensors "$T/fifo_dangling/model.safetensors"
rm "$T/fifo_loop/config.json"; ln -s config.json "$T/fifo_loop/config.json"
golden target_fifo_weights 1 check "$T/fifo_weights.dfl"
golden target_fifo_config 1 check "$T/fifo_config.dfl"
golden target_fifo_index 1 check "$T/fifo_index.dfl"
golden target_fifo_tokenizer 0 check "$T/fifo_tokenizer.dfl"   # optional (the mask token's class): a warning
model tok_broken; cp "$NANO" "$T/tok_broken/"; printf '{"model": {"vocab": ' > "$T/tok_broken/tokenizer.json"; spec tok_broken tok_broken
golden target_tokenizer_broken 0 check "$T/tok_broken.dfl"
golden target_dangling 1 check "$T/fifo_dangling.dfl"
golden target_loop 1 check "$T/fifo_loop.dfl"
golden train_fifo_weights 1 train "$T/fifo_weights.dfl" --steps 1 --out "$T/run_fifo"

# checkpoint directories train could not use: under /proc (access() passes for root, mkdir fails), a
# dangling link (not skipped for its parent), the root directory (pruning and --restart work in it)
ln -s "$T/nowhere" "$T/ckpt_dangling"
for c in "proc:/proc/dflc-ckpt" "dangling:$T/ckpt_dangling" "root:/"; do
  sed "s#\"$T/ckpt\"#\"${c#*:}\"#" "$T/host.dfl" > "$T/ckpt_${c%%:*}.dfl"
  golden "ckpt_dir_${c%%:*}" 1 check "$T/ckpt_${c%%:*}.dfl"
done

# data train would refuse, refused by check (issue 43 item 6): a packed file with a bad checksum,
# truncated, or gzip-compressed; a JSONL file with no usable row under bad_rows = skip
"$DFLC" pack "$ROOT/examples/data/nano_eval.jsonl.gz" -o "$T/good.dflpack" --quiet || { echo "FAIL: dflc pack"; fails=$((fails + 1)); }
cp "$T/good.dflpack" "$T/crc.dflpack"; printf '\377' | dd of="$T/crc.dflpack" bs=1 seek=100 conv=notrunc 2>/dev/null
head -c 200 "$T/good.dflpack" > "$T/short.dflpack"
gzip -c "$T/good.dflpack" > "$T/gz.dflpack"
printf '{"input_ids": [1, 2]}\n{"loss_mask": [1]}\n' > "$T/norows.jsonl"
for c in crc short gz norows; do
  f="$T/$c.dflpack"; [ $c = norows ] && f="$T/norows.jsonl"
  sed -e "s#\"$ROOT/examples/data/nano_train.jsonl.gz\"#\"$f\"#" -e 's/  seed    = 0/  seed    = 0\n  bad_rows = skip/' \
    "$T/host.dfl" > "$T/data_$c.dfl"
  golden "data_$c" 1 check "$T/data_$c.dfl"
done

echo "check_deep: $n cases, $fails failed"
[ $fails = 0 ]
