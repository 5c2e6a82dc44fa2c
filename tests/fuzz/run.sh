#!/usr/bin/env bash
# Build the front-end fuzzer with clang (libFuzzer + ASan + UBSan) from the sources and the
# flex/bison outputs of an existing build directory, then fuzz for a while.
#   tests/fuzz/run.sh BUILD_DIR [SECONDS]      (from anywhere; runs in the repository root)
# New interesting inputs go to a temporary directory; crashes are kept in BUILD_DIR/fuzz/.
set -euo pipefail
build=$(cd "${1:?usage: run.sh BUILD_DIR [SECONDS]}" && pwd)
secs=${2:-60}
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
CLANG=${CLANG:-clang}
command -v "$CLANG" >/dev/null || { echo "run.sh: $CLANG not found (scripts/setup.sh installs it)"; exit 1; }
for f in dfl.tab.c dfl.tab.h dfl.lex.c; do
  [ -f "$build/$f" ] || { echo "run.sh: $build/$f missing: build the dfl_front target first"; exit 1; }
done
out="$build/fuzz"
mkdir -p "$out"
jansson=$(ls /usr/lib/*/libjansson.a 2>/dev/null | head -1); jansson=${jansson:--ljansson}
"$CLANG" -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -D_GNU_SOURCE \
  -I"$root" -I"$build" -Wno-unused-function \
  tests/fuzz/fuzz_check.c compiler/diag.c compiler/ast.c compiler/file.c compiler/hfconfig.c compiler/check.c compiler/check_schema.c \
  compiler/check_model.c compiler/check_train.c compiler/check_topology.c "$build/dfl.tab.c" "$build/dfl.lex.c" \
  "$jansson" -lm -o "$out/fuzz_check"
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
"$out/fuzz_check" "$work" tests/fuzz/corpus -max_total_time="$secs" -rss_limit_mb=2048 -max_len=65536 \
  -timeout=10 -artifact_prefix="$out/" -print_final_stats=1 2>&1 | tail -25
# the Hugging Face config.json reader, a third of the time (a JSON object of a dozen fields)
"$CLANG" -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -D_GNU_SOURCE \
  -I"$root" -I"$build" -Wno-unused-function \
  tests/fuzz/fuzz_hfconfig.c compiler/diag.c compiler/file.c compiler/hfconfig.c "$jansson" -lm -o "$out/fuzz_hfconfig"
work2=$(mktemp -d); trap 'rm -rf "$work" "$work2"' EXIT
"$out/fuzz_hfconfig" "$work2" tests/fuzz/corpus_hfconfig -max_total_time="$(( (secs + 2) / 3 ))" -rss_limit_mb=2048 \
  -max_len=8192 -timeout=10 -artifact_prefix="$out/hfconfig-" -print_final_stats=1 2>&1 | tail -12
