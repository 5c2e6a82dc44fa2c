#!/usr/bin/env bash
# The whole test suite: installs what is missing, builds with warnings as errors, runs ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --deps
cmake -S . -B build-test -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDFL_WERROR=ON >/dev/null
cmake --build build-test -j "$(nproc)"
cd build-test
ctest --output-on-failure -j "$(nproc)" "$@"
