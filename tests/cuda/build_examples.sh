#!/usr/bin/env bash
# CI without a GPU: `dflc build` emits and NVRTC-compiles the kernels of every single-device
# example (multi-device specs use the same kernel families, compiled whole by cuda_nvrtc), and
# writes the trainer directory a user reads: plan.yaml, schedule.txt, kernels.cu/.txt, cubin/. The
# kernel library comes through $DFL_CACHE_DIR: under ctest the run's cache, where cuda_nvrtc
# compiled it (a fixture), so each build copies it instead of compiling (cmake/cuda.cmake).
set -u
DFLC=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
for spec in examples/nano.dfl examples/tiny.dfl examples/qwen3-8b.dfl; do
  out=$tmp/$(basename "$spec" .dfl)
  if ! "$DFLC" build "$spec" -o "$out" > "$out.log" 2>&1; then
    echo "FAIL: dflc build $spec"; cat "$out.log"; fail=1; continue
  fi
  for f in build.json plan.yaml schedule.txt kernels.cu kernels.txt groups.cu; do
    [ -s "$out/$f" ] || { echo "FAIL: $spec: $f missing or empty"; fail=1; }
  done
  ls "$out"/cubin/* > /dev/null 2>&1 || { echo "FAIL: $spec: no cubin"; fail=1; }
  grep -q "__global__" "$out/kernels.cu" || { echo "FAIL: $spec: kernels.cu holds no kernel"; fail=1; }
  echo "ok: $spec -> $(ls "$out"/cubin | head -1)"
done
exit $fail
