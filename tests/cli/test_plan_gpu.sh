#!/bin/bash
# test_plan_gpu.sh DFLC: a GPU device without memory_budget gets its card's memory as the budget.
# `dflc plan --gpu NAME` on the 5 + 3 example without its memory block: eight RTX PRO 6000 (96 GB) fit
# with forward ops recomputed on the drafters, the budget line names the card; a 40 GB A100 does not
# fit and the knob search says what would; the spec's own memory_budget wins over --gpu; an unknown
# card is refused with the list. Run from the repository root (ctest does).
set -u
DFLC=$(realpath "${1:?usage: test_plan_gpu.sh DFLC}") || exit 2
[ -f examples/qwen36-27b-5x3.dfl ] || { echo "run from the repository root"; exit 2; }
T=$(mktemp -d "${TMPDIR:-/tmp}/dfl_plangpu_XXXXXX") || exit 2
trap 'rm -rf "$T"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
sed '/^  memory {/,/^  }/d' examples/qwen36-27b-5x3.dfl > "$T/nomem.dfl"
grep -q 'memory' "$T/nomem.dfl" && fail "the test's spec still has a memory block"

out=$("$DFLC" plan "$T/nomem.dfl" --gpu rtx-pro-6000 2>&1); rc=$?
[ $rc -eq 0 ] || fail "rtx-pro-6000: rc $rc: $(echo "$out" | tail -3)"
[ "$(echo "$out" | grep -c 'budget 94.09 GiB: fits')" = 8 ] || fail "rtx-pro-6000: not 8 devices fitting 94.09 GiB"
[ "$(echo "$out" | grep -c "budget: rtx-pro-6000's memory (95.59 GiB) less 1.5 GiB")" = 8 ] || fail "rtx-pro-6000: budget lines"
[ "$(echo "$out" | grep -c 'recomputed .* forward ops')" = 3 ] || fail "rtx-pro-6000: the 3 drafters should recompute"

out=$("$DFLC" plan "$T/nomem.dfl" --gpu a100_40GB 2>&1); rc=$?
[ $rc -eq 1 ] || fail "a100-40gb: rc $rc, expected 1 (does not fit)"
echo "$out" | grep -q 'what would fit, changing one knob at a time' || fail "a100-40gb: no knob search: $(echo "$out" | tail -3)"

out=$("$DFLC" plan examples/qwen36-27b-5x3.dfl --gpu rtx-pro-6000 2>&1); rc=$?
echo "$out" | grep -q "budget: rtx-pro-6000" && fail "the spec's memory_budget should win over --gpu"
[ "$(echo "$out" | grep -c 'budget 130.00 GiB')" = 3 ] || fail "the spec's 130 GiB drafter budgets are not used"

out=$("$DFLC" plan "$T/nomem.dfl" --gpu tpu-v5 2>&1); rc=$?
[ $rc -eq 2 ] && echo "$out" | grep -q 'rtx-pro-6000' || fail "an unknown card: rc $rc: $out"
[ $fails -eq 0 ] && echo PASS || echo "FAIL: $fails"
exit $((fails != 0))
