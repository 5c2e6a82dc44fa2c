#!/bin/bash
# test_build_dir.sh DFLC: `dflc train DIR` runs what `dflc build` wrote into DIR, or refuses.
# build.json names the graph, plan and kernel library compiled (runtime/compile.c's fingerprints); a
# spec edited after the build (an optimizer setting changes its ops' attributes), a fingerprint that
# is not this dflc's, or a build.json without one is refused with what to do, and nothing is trained.
# Run from the repository root (ctest does).
set -u
DFLC=$(realpath "${1:?usage: test_build_dir.sh DFLC}") || exit 2
ROOT=$(pwd)
[ -f examples/nano.dfl ] || { echo "run from the repository root"; exit 2; }
T=$(mktemp -d "${TMPDIR:-/tmp}/dfl_build_XXXXXX") || exit 2
trap 'rm -rf "$T"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
fp() { sed -n "s/^ *\"$2\": \"\([0-9a-f]*\)\",\{0,1\}$/\1/p" "$1/build.json"; }   # build.json's fingerprint.$2
cp examples/nano.dfl "$T/nano.dfl"
ln -s "$ROOT/examples/models" "$T/models"
ln -s "$ROOT/examples/data" "$T/data"

"$DFLC" build "$T/nano.dfl" -o "$T/b" > "$T/build.log" 2>&1 || { cat "$T/build.log"; fail "dflc build exited $?"; }
for k in graph plan; do
  fp "$T/b" $k | grep -Eq '^[0-9a-f]{16}$' || fail "build.json has no 16-digit fingerprint.$k"
done
# kernels.cu is the whole library the runtime compiles; kernels.txt has a line per op of the graph
for fam in common elementwise rmsnorm attention hybrid optim; do
  grep -q "^#line 1 \"kernels/$fam.cuh\"" "$T/b/kernels.cu" 2>/dev/null || [ -z "$(fp "$T/b" kernels)" ] ||
    fail "kernels.cu lacks the $fam family"
done
ops=$(sed -n 's/^ *"ops": \([0-9]*\),$/\1/p' "$T/b/build.json")
if [ -n "$(fp "$T/b" kernels)" ]; then
  [ "$(grep -cE '^ *[0-9]+ ' "$T/b/kernels.txt")" = "$ops" ] ||
    fail "kernels.txt lists $(grep -cE '^ *[0-9]+ ' "$T/b/kernels.txt") ops, build.json $ops"
  # each norm's launch was chosen at build time: a kernel of the rmsnorm variants, with its grid and block
  grep -E '^ *[0-9]+ +[a-z]+ +rmsnorm ' "$T/b/kernels.txt" | grep -vqE ': dfl_rmsnorm[a-z0-9_]* grid [0-9]+ .*block [0-9]+' &&
    fail "kernels.txt has a norm without its lowered launch"
  grep -q "^# $ops ops: [0-9]* lowered here" "$T/b/kernels.txt" || fail "kernels.txt lacks its summary line"
fi
# the 8B drafter's wgmma attention backward (head_dim 128, sm_90a): its key-major pass runs in parts the
# backend fixes at init (a build's grid is one part's), and the sum of the parts only when they are more
# than one (runtime/cuda/attention.c): every such line says so
"$DFLC" build examples/qwen3-8b.dfl -o "$T/q8" > "$T/q8.log" 2>&1 || { cat "$T/q8.log"; fail "dflc build qwen3-8b exited $?"; }
if [ -n "$(fp "$T/q8" kernels)" ]; then
  nsum=$(grep -c 'dfl_attn_bwdkv_sum' "$T/q8/kernels.txt")
  nmarked=$(grep -cE '^ *[0-9]+ +backward +attention_bwd .* dfl_attn_bwdkv_wg128 grid [0-9]+ x parts [^;]* parts at init; dfl_attn_bwdkv_sum [^;]* only when parts > 1$' "$T/q8/kernels.txt")
  [ "$nsum" -gt 0 ] && [ "$nmarked" = "$nsum" ] ||
    fail "kernels.txt of qwen3-8b: $nmarked of $nsum attention backward partial sums marked as launched only when parts > 1"
fi
# groups.cu: a kernel per pointwise fusion group, each naming its ops; its cubin beside the library's
if [ -n "$(fp "$T/b" kernels)" ]; then
  ng=$(grep -c '^extern "C" __global__ void __launch_bounds__(256) dfl_pw_[0-9]*(' "$T/b/groups.cu")
  [ "$ng" -gt 0 ] && [ "$(grep -c '^/\* group [0-9]*: op' "$T/b/groups.cu")" = "$ng" ] ||
    fail "groups.cu holds $ng generated kernels, or a kernel without its group's comment"
  grep -q "groups: $ng fusion groups" "$T/build.log" || fail "dflc build did not report the $ng groups"
  [ "$(ls "$T/b/cubin" | wc -l)" -ge 2 ] || fail "DIR/cubin lacks the groups' cubin beside the library's"
fi
# the same spec builds to the same names (nothing machine- or run-dependent in them)
"$DFLC" build "$T/nano.dfl" -o "$T/b2" > "$T/build2.log" 2>&1 || fail "second dflc build exited $?"
for k in graph plan kernels; do
  [ "$(fp "$T/b" $k)" = "$(fp "$T/b2" $k)" ] ||
    fail "fingerprint.$k differs between two builds of one spec"
done
cmp -s "$T/b/groups.cu" "$T/b2/groups.cu" 2>/dev/null || [ -z "$(fp "$T/b" kernels)" ] ||
  fail "groups.cu differs between two builds of one spec"

# what was built trains
"$DFLC" train "$T/b" --cpu --no-eval --stop-at 1 -o "$T/run1" > "$T/train1.log" 2>&1 \
  || { tail -5 "$T/train1.log"; fail "dflc train BUILD_DIR exited $?"; }
[ -d "$T/run1/ckpt" ] || fail "train from the build directory wrote no checkpoint"

# refused: rc 1, the message, and no run directory made
expect_refused() { # name, message
  out=$("$DFLC" train "$T/b" --cpu --no-eval --stop-at 1 -o "$T/run_$1" 2>&1); rc=$?
  [ $rc -eq 1 ] && echo "$out" | grep -q -- "$2" || fail "$1: rc $rc, expected 1 and '$2' in: $out"
  [ ! -e "$T/run_$1" ] || fail "$1: a refused run made $T/run_$1"
}
sed -i 's/^\( *lr *= *\)3e-3/\12e-3/' "$T/nano.dfl"
grep -q '2e-3' "$T/nano.dfl" || fail "the test's edit of lr did not apply"
expect_refused edited "no longer compiles to the graph built there"
cp examples/nano.dfl "$T/nano.dfl"
cp "$T/b/build.json" "$T/build.json.good"
sed -i 's/"plan": "[0-9a-f]*"/"plan": "0000000000000000"/' "$T/b/build.json"
expect_refused plan "the memory plan is not the one built there"
cp "$T/build.json.good" "$T/b/build.json"
if [ -n "$(fp "$T/b" kernels)" ]; then   # a CUDA build records its kernel library
  sed -i 's/"kernels": "[0-9a-f]*"/"kernels": "0000000000000000"/' "$T/b/build.json"
  expect_refused kernels "kernels are not the ones compiled into"
  cp "$T/build.json.good" "$T/b/build.json"
fi
printf '{"format": "dflc-build-1", "spec": "%s"}' "$T/nano.dfl" > "$T/b/build.json"
expect_refused old "no \"fingerprint\""
cp "$T/build.json.good" "$T/b/build.json"
"$DFLC" train "$T/b" --cpu --no-eval --stop-at 1 -o "$T/run2" > "$T/train2.log" 2>&1 || fail "the restored build did not train"
[ $fails -eq 0 ] && echo PASS || echo "FAIL: $fails"
exit $((fails != 0))
