#!/usr/bin/env bash
# verify_coretypes DFLC: `dflc verify` (f32 and f64) on both public fixtures under every OpenBLAS
# core type this CPU can execute. OpenBLAS picks its GEMM kernels per CPU, and the f32 step's
# rounding follows them (docs/testing.md): the tolerances must hold under each, not only under the
# kernels of the machine that ran the suite last. A core type is forced with OPENBLAS_CORETYPE and
# confirmed from OPENBLAS_VERBOSE's "Core:" line (an unknown name silently falls back).
set -uo pipefail
dflc=$1
cd "$(dirname "$0")/../.."
flags=$(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null || true)
has() { for f in "$@"; do [[ " $flags " == *" $f "* ]] || return 1; done; }
fail=0 ran=0
for core in Prescott Nehalem Sandybridge Haswell Zen SkylakeX Cooperlake; do
  case $core in
    Prescott) need=(pni) ;;   # SSE3 is "pni" in /proc/cpuinfo
    Nehalem) need=(sse4_2) ;;
    Sandybridge) need=(avx) ;;
    Haswell|Zen) need=(avx2 fma) ;;
    SkylakeX) need=(avx512f avx512bw avx512dq avx512vl) ;;
    Cooperlake) need=(avx512f avx512bw avx512dq avx512vl avx512_bf16) ;;
  esac
  if ! has "${need[@]}"; then echo "$core: skipped (this CPU lacks ${need[*]})"; continue; fi
  for fx in dflash_step_public dflash_step_public_b; do
    for prec in "" --f64; do
      out=$(OPENBLAS_CORETYPE=$core OPENBLAS_VERBOSE=2 "$dflc" verify $prec --quiet tests/fixtures/$fx 2>&1)
      rc=$?
      got=$(sed -n 's/^Core: //p' <<<"$out" | head -1)
      last=$(tail -1 <<<"$out")
      if [ -z "$got" ]; then
        echo "$core: this OpenBLAS does not report its core (OPENBLAS_VERBOSE): skipped"; continue 3
      fi
      if [ "$got" != "$core" ]; then echo "$core: OpenBLAS ran core $got instead: skipped"; continue 3; fi
      echo "$core $fx ${prec:-f32}: $last"
      ran=$((ran + 1))
      [ $rc -eq 0 ] || fail=1
    done
  done
done
[ $ran -gt 0 ] || { echo "no core type could be forced: this OpenBLAS has no DYNAMIC_ARCH"; exit 77; }
[ $fail -eq 0 ] && echo "passed ($ran runs)" || echo FAILED
exit $fail
