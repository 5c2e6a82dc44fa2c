#!/bin/bash
# test_json_paths.sh DFLC JSON_GET: what dflc writes as JSON stays JSON for a spec whose path holds a
# space, a double quote and a backslash: `dflc build`'s build.json (and `dflc train BUILD_DIR`
# reading it back), `dflc bench --json`, `dflc eval`'s result line; a damaged build.json is refused
# with its file:line:col. Run from the repository root (ctest does).
set -u
DFLC=$(realpath "${1:?usage: test_json_paths.sh DFLC JSON_GET}") || exit 2
JG=$(realpath "${2:?usage: test_json_paths.sh DFLC JSON_GET}") || exit 2
ROOT=$(pwd)
[ -f examples/nano.dfl ] || { echo "run from the repository root"; exit 2; }
T=$(mktemp -d "${TMPDIR:-/tmp}/dfl_json_XXXXXX") || exit 2
trap 'rm -rf "$T"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
W="$T/a \"quoted\" \\dir"
mkdir -p "$W" || exit 2
cp examples/nano.dfl "$W/nano.dfl"
ln -s "$ROOT/examples/models" "$W/models"
ln -s "$ROOT/examples/data" "$W/data"
SPEC=$(realpath "$W/nano.dfl")

# build.json: valid JSON holding the spec's path; `dflc train DIR` finds the spec through it
"$DFLC" build "$W/nano.dfl" -o "$W/out dir" > "$T/build.log" 2>&1 || { cat "$T/build.log"; fail "dflc build exited $?"; }
got=$("$JG" "$W/out dir/build.json" spec) || fail "build.json is not JSON or has no spec"
[ "$got" = "$SPEC" ] || fail "build.json spec '$got', expected '$SPEC'"
[ "$("$JG" "$W/out dir/build.json" format)" = "dflc-build-1" ] || fail "build.json format"
"$DFLC" train "$W/out dir" --cpu --steps 2 --no-eval -o "$W/run" > "$T/train.log" 2>&1 \
  || { tail -5 "$T/train.log"; fail "dflc train BUILD_DIR exited $?"; }
[ -f "$W/run/drafter/model.safetensors" ] || fail "train from the build directory wrote no drafter"

# eval's result line, on the eval file's first 4 rows (the whole file's greedy walk takes 25 s on 2
# cores and proves nothing more about the JSON), read from the awkward directory too
zcat examples/data/nano_eval.jsonl.gz | head -n 4 > "$W/eval4.jsonl" || exit 2
"$DFLC" eval "$W/nano.dfl" --drafter "$W/run/drafter" --data "$W/eval4.jsonl" > "$T/eval.log" 2>&1 \
  || { tail -5 "$T/eval.log"; fail "dflc eval exited $?"; }
got=$("$JG" "$T/eval.log" drafter last) || fail "eval's result line is not JSON"
[ "$got" = "$W/run/drafter" ] || fail "eval drafter '$got', expected '$W/run/drafter'"
got=$("$JG" "$T/eval.log" data last)
[ "$got" = "$W/eval4.jsonl" ] || fail "eval data '$got', expected '$W/eval4.jsonl'"
"$JG" "$T/eval.log" tau last | grep -Eq '^[0-9.]+(e-?[0-9]+)?$' || fail "eval's tau is not a number"

# bench --json
"$DFLC" bench "$W/nano.dfl" --cpu --steps 2 --warmup 1 --phase-steps 1 --json "$W/b.json" > "$T/bench.log" 2>&1 \
  || { tail -5 "$T/bench.log"; fail "dflc bench exited $?"; }
[ "$("$JG" "$W/b.json" spec)" = "$W/nano.dfl" ] || fail "bench JSON spec '$("$JG" "$W/b.json" spec)'"
"$JG" "$W/b.json" step_ms | grep -Eq '^[0-9.]+(e-?[0-9]+)?$' || fail "bench JSON step_ms is not a number"

# a damaged build.json: refused with where and what to do
B="$W/out dir/build.json"
expect_train() { # message, then the file's content
  printf '%s' "$2" > "$B"
  out=$("$DFLC" train "$W/out dir" --cpu --steps 1 -o "$W/run2" 2>&1); rc=$?
  [ $rc -eq 1 ] && echo "$out" | grep -q -- "$1" || fail "build.json '$2': rc $rc, expected 1 and '$1' in: $out"
}
expect_train 'build.json:1:[0-9]*: not valid JSON' '{"format": "dflc-build-1", "spec": '
expect_train 'no "spec" string' '{"format": "dflc-build-1"}'
expect_train 'no "spec" string' '{"format": "dflc-build-1", "spec": 3}'
expect_train 'not "dflc-build-1"' '{"format": "dflc-build-0", "spec": "x.dfl"}'
expect_train 'missing, not' '{"spec": "x.dfl"}'
rm -f "$B"
expect_missing=$("$DFLC" train "$W/out dir" --cpu --steps 1 2>&1); [ $? -eq 1 ] && echo "$expect_missing" | grep -q "without build.json" \
  || fail "a build directory without build.json: $expect_missing"
[ $fails -eq 0 ] && echo PASS || echo "FAIL: $fails"
exit $((fails != 0))
