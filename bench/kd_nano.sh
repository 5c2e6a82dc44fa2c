#!/usr/bin/env bash
# bench/kd_nano.sh OUT [STEPS] [SEEDS]: hard labels against soft labels (the target's distribution,
# forward KL) and a mix, at equal steps and data, on examples/$NAME.dfl (NAME nano, the default,
# nano-hybrid: the Qwen3.5 hybrid target's layout, or tiny: 20 M, one GPU). Each config trains
# from the same spec but `loss.labels` (and the seeds: drafter.seed and data.seed both = SEED), then
# its final eval's acceptance length (`accept`: the decoder's count on the held-out eval set) and tau,
# and the training tok/s (runs share the machine: a rough figure), then the same on held-out text
# (`dflc eval --data $HELD`, which training never reads: tiny_eval.jsonl.gz for nano's, hybrid_eval for
# tiny's), go to OUT/summary.tsv. J runs at a time (default 2: two cores each take ~1.3; several small
# GPU runs share one GPU). DFLC: the binary (dflc_gpu for tiny). A config LABELS@N trains N steps instead
# of STEPS (equal time: CONFIGS="hard@665 soft" gives hard labels the steps soft labels' cost buys).
set -o pipefail
R=$(cd "$(dirname "$0")/.." && pwd)
O=${1:?usage: bench/kd_nano.sh OUT [STEPS] [SEEDS]}
STEPS=${2:-400}
SEEDS=${3:-"1 2 3"}
CONFIGS=${CONFIGS:-"hard soft mix(0.5)"}
DFLC=${DFLC:-$R/build/dflc}
N=${NAME:-nano}
HELD=${HELD:-$R/examples/data/$([ $N = tiny ] && echo hybrid || echo tiny)_eval.jsonl.gz}
mkdir -p $O
one() { # config seed
  local c=${1%@*} s=$2 st=$STEPS n=$(echo "$1" | tr -d '()' | tr .@ _-)-s$2
  case $1 in *@*) st=${1#*@} ;; esac
  sed -e "s#\"models/$N\"#\"$R/examples/models/$N\"#" -e "s#\"data/${N}_#\"$R/examples/data/${N}_#g" \
      -e "s#\"../runs/$N\"#\"$O/ckpt/$n\"#" -e "/^  seed *= /d" -e "s/^drafter {$/drafter {\n  seed = $s/" \
      -e "s/^data {$/data {\n  seed = $s/" -e "s#^\(  metrics *= .*\)\$#\1\n  labels = $c#" \
      -e "s/^  steps *= [0-9]*/  steps = $st/" -e "s/every = [0-9]*/every = $st/" $R/examples/$N.dfl > $O/$n.dfl
  grep -q "labels = $c" $O/$n.dfl && [ $(grep -c "seed = $s" $O/$n.dfl) = 2 ] || { echo "kd_nano: $n.dfl: the spec's edits did not apply" >&2; return 1; }
  (cd $O && $DFLC train $n.dfl > $O/$n.log 2>&1)   # the run directory (the export): $O/runs/$n
  local ev=$(grep "^eval $st/$st" $O/$n.log | tail -1)
  local acc=$(echo "$ev" | sed -n 's/.* accept \([0-9.]*\).*/\1/p') tau=$(echo "$ev" | sed -n 's/.* tau \([0-9.]*\) .*/\1/p')
  local tps=$(grep "^step " $O/$n.log | tail -5 | sed -n 's/.*tok\/s \([0-9,]*\).*/\1/p' | tr -d , | sort -n | sed -n 3p)
  $DFLC eval $O/$n.dfl --drafter $O/runs/$n/drafter --data $HELD --no-agreement > $O/$n.heldout.log 2>&1
  local hacc=$(grep -m1 -o 'accept [0-9.]*' $O/$n.heldout.log | cut -d' ' -f2)
  printf "%s\t%s\t%s\t%s\t%s\t%s\n" "$1" $s "$acc" "$tau" "$tps" "$hacc" >> $O/summary.tsv
}
printf "labels\tseed\taccept\ttau\ttok/s\theld-out accept\n" > $O/summary.tsv
jobs=()
for s in $SEEDS; do for c in $CONFIGS; do
  one "$c" $s &
  while [ $(jobs -r | wc -l) -ge ${J:-2} ]; do sleep 2; done
done; done
wait
(column -t -s $'\t' $O/summary.tsv 2>/dev/null || cat $O/summary.tsv)
