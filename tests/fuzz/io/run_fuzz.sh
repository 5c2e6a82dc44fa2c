#!/bin/sh
# run_fuzz.sh HARNESS SECONDS SOURCE_DIR BUILD_DIR CLANG LIBS...
# Builds tests/fuzz/io/HARNESS.c with libFuzzer + ASan + UBSan against the runtime sources,
# then fuzzes for SECONDS starting from the seed corpus (copied: the repo is never written).
set -eu
h=$1; secs=$2; src=$3; out=$4; clang=$5; shift 5
mkdir -p "$out"
bin="$out/$h"
"$clang" -g -O1 -std=c11 -D_GNU_SOURCE -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
  -I"$src" "$src/tests/fuzz/io/$h.c" "$src/runtime/io/safetensors.c" "$src/compiler/file.c" "$src/runtime/io/data.c" "$src/runtime/io/dataset.c" \
  "$src/runtime/io/packed.c" "$src/runtime/io/rng.c" "$src/runtime/io/anchors.c" "$@" -lm -o "$bin"
corpus="$out/$h.corpus"
rm -rf "$corpus"; mkdir -p "$corpus"
cp "$src/tests/fuzz/io/corpus_${h#fuzz_}/"* "$corpus/"
# -rss_limit_mb bounds memory; -max_len allows multi-tensor headers; 1 job (shared 2-core machine).
exec "$bin" "$corpus" -max_total_time="$secs" -max_len=8192 -rss_limit_mb=1024 -print_final_stats=1 -artifact_prefix="$out/$h-"
