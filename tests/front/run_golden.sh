#!/usr/bin/env bash
# Golden tests of `dflc check`, run from the repository root:
#   tests/front/bad/*.dfl   must fail (exit 1) with exactly the stderr in the matching .expected
#   tests/front/warn/*.dfl  must pass (exit 0) with exactly the warnings in .expected
#   tests/front/good/*.dfl and examples/*.dfl must pass silently
# usage: tests/front/run_golden.sh path/to/dflc [--update]   (--update rewrites .expected files)
set -u
dflc=${1:?usage: run_golden.sh DFLC [--update]}
update=${2:-}
cd "${DFL_SOURCE_DIR:-$(dirname "$0")/../..}"
fail=0; n=0
tmp=$(mktemp)

golden() {   # file want_rc
  local f=$1 want=$2 exp=${1%.dfl}.expected
  n=$((n + 1))
  "$dflc" check "$f" >/dev/null 2>"$tmp"; local rc=$?
  if [ "$update" = --update ]; then cp "$tmp" "$exp"; fi
  if [ "$rc" != "$want" ]; then echo "FAIL $f: exit $rc, want $want"; cat "$tmp"; fail=1; return; fi
  if [ ! -f "$exp" ]; then echo "FAIL $f: no $exp"; fail=1; return; fi
  if ! cmp -s "$tmp" "$exp"; then echo "FAIL $f: stderr differs from $exp"; diff "$exp" "$tmp" | head -40; fail=1; fi
}

for f in tests/front/bad/*.dfl; do golden "$f" 1; done
for f in tests/front/warn/*.dfl; do golden "$f" 0; done
for f in examples/*.dfl tests/front/good/*.dfl; do
  [ -f "$f" ] || continue
  n=$((n + 1))
  # an example whose model is kept out of the repository (examples/hybrid.dfl): without it, check
  # must fail naming the directory, on the spec's line that says where to put it
  m=$(sed -n 's/^ *model *= *"\(models\/[^"]*\)".*/\1/p' "$f" | head -1)
  if [ -n "$m" ] && [ ! -e "examples/$m" ]; then
    "$dflc" check "$f" >/dev/null 2>"$tmp"; rc=$?
    if [ "$rc" != 1 ] || ! grep -q "does not exist" "$tmp" || ! grep -q "absent?" "$tmp"; then
      echo "FAIL $f: without examples/$m, want a refusal naming it"; cat "$tmp"; fail=1; fi
    continue
  fi
  "$dflc" check "$f" >/dev/null 2>"$tmp"; rc=$?
  if [ "$rc" != 0 ] || [ -s "$tmp" ]; then echo "FAIL $f: exit $rc, want a silent pass"; cat "$tmp"; fail=1; fi
done
# Nasty inputs made on the fly: each must fail cleanly (exit 1, a message naming the problem).
nasty() {   # description expected-substring file
  n=$((n + 1))
  "$dflc" check "$3" >/dev/null 2>"$tmp"; local rc=$?
  if [ "$rc" != 1 ] || ! grep -q -- "$2" "$tmp"; then echo "FAIL $1: exit $rc"; head -5 "$tmp"; fail=1; fi
}
scratch=$(mktemp -d); trap 'rm -rf "$tmp" "$scratch"' EXIT
nasty "missing file" "cannot open: No such file" "$scratch/none.dfl"
nasty "directory" "is a directory" "$scratch"
truncate -s 100M "$scratch/huge.dfl"
nasty "100 MB file" "a spec may be at most" "$scratch/huge.dfl"
nasty "endless device" "larger than" /dev/zero
head -c 10000 /dev/zero | tr '\0' '{' > "$scratch/deep.dfl"
nasty "10,000 nested blocks" "nesting deeper than" "$scratch/deep.dfl"
{ printf 'x = '; head -c 10000 /dev/zero | tr '\0' '['; } > "$scratch/deeplist.dfl"
nasty "10,000 nested lists" "nesting deeper than" "$scratch/deeplist.dfl"
printf 'target { model = "abc' > "$scratch/trunc.dfl"
nasty "truncated file" "unterminated string" "$scratch/trunc.dfl"
head -c 65536 /dev/urandom > "$scratch/random.dfl"
nasty "random bytes" "error" "$scratch/random.dfl"
if [ "$(id -u)" != 0 ]; then
  printf 'train { steps = 1 }\n' > "$scratch/secret.dfl"; chmod 000 "$scratch/secret.dfl"
  nasty "unreadable file" "Permission denied" "$scratch/secret.dfl"
fi

nbad=$(ls tests/front/bad/*.dfl | wc -l)
if [ "$nbad" -lt 40 ]; then echo "FAIL: only $nbad bad specs (want >= 40)"; fail=1; fi
[ $fail = 0 ] && echo "golden: $n files ok"
exit $fail
