#!/usr/bin/env bash
# Every ```dfl block in docs/language.md must start with `# file: PATH`, be byte-for-byte that
# file, and that file must pass `dflc check` silently; every examples/*.dfl the page mentions
# must exist and pass too.   usage: tests/front/check_docs.sh path/to/dflc
set -u
dflc=${1:?usage: check_docs.sh DFLC}
cd "${DFL_SOURCE_DIR:-$(dirname "$0")/../..}"
doc=docs/language.md
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
# split the ```dfl blocks into tmp/block.N
awk -v dir="$tmp" '/^```dfl$/ { n++; inb = 1; next } /^```/ { inb = 0 } inb { print > (dir "/block." n) }' "$doc"
fail=0; n=0
for b in "$tmp"/block.*; do
  [ -f "$b" ] || continue
  n=$((n + 1))
  path=$(head -1 "$b" | sed -n 's/^# file: //p')
  if [ -z "$path" ]; then echo "FAIL $doc: a dfl block does not start with '# file: PATH'"; fail=1; continue; fi
  if [ ! -f "$path" ] || ! cmp -s "$b" "$path"; then echo "FAIL $doc: block for $path differs from the file"; diff "$path" "$b" | head; fail=1; continue; fi
  if ! "$dflc" check "$path" 2>"$tmp/err" || [ -s "$tmp/err" ]; then echo "FAIL $path does not pass check:"; cat "$tmp/err"; fail=1; fi
done
for f in $(grep -o 'examples/[A-Za-z0-9_.-]*\.dfl' "$doc" | sort -u); do
  n=$((n + 1))
  if ! "$dflc" check "$f" 2>"$tmp/err" || [ -s "$tmp/err" ]; then echo "FAIL $f (named in $doc) does not pass check"; cat "$tmp/err"; fail=1; fi
done
[ "$n" -gt 0 ] || { echo "FAIL: no examples found in $doc"; fail=1; }
[ $fail = 0 ] && echo "docs: $n examples ok"
exit $fail
