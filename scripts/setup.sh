#!/usr/bin/env bash
# Installs what dflc needs on a fresh Debian/Ubuntu machine (as root, or with sudo), then builds.
#   scripts/setup.sh            install missing packages + build (Release) into build/
#   scripts/setup.sh --deps     install missing packages only
set -euo pipefail
cd "$(dirname "$0")/.."

pkgs=(cmake ninja-build gcc clang flex bison pkg-config libjansson-dev libyaml-dev libopenblas-dev zlib1g-dev)
# mpirun + libmpi.so.40: the OpenMPI bootstrap of multi-process GPU runs and its test (pipeline_launch_mpi)
pkgs+=(openmpi-bin libopenmpi-dev)
# headless browser for the plan page test; optional elsewhere
[ "${DFL_WITH_BROWSER:-1}" = 1 ] && pkgs+=(chromium)

missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
# scripts/dflc-prepare (conversations -> rows): Hugging Face `tokenizers` and Jinja, from PyPI
# (docs/dependencies.md); python3 and pip from apt only where the machine has none
if ! python3 -c "import tokenizers, jinja2" 2>/dev/null; then
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  if ! command -v python3 >/dev/null || ! python3 -m pip --version >/dev/null 2>&1; then
    echo "setup: installing python3-pip"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends python3 python3-pip >/dev/null
  fi
  echo "setup: installing tokenizers and jinja2 (pip)"
  python3 -m pip install -q tokenizers jinja2 2>/dev/null ||
    python3 -m pip install -q --break-system-packages tokenizers jinja2 ||
    echo "setup: warning: could not install tokenizers and jinja2: scripts/dflc-prepare will not run"
fi
# the real OpenAI-compatible server that tests dflc-prepare --regenerate (tests/io/test_prepare_server.py):
# Hugging Face `transformers serve` on torch, from PyPI, the versions tested (docs/dependencies.md: about
# 5.7 GB installed, most of it the CUDA libraries PyPI's torch wheel depends on; about 2 minutes);
# only the full test suite needs it: scripts/test.sh asks for it (DFL_WITH_SERVER=1), a user's setup does not
serve_pkgs=(torch==2.15.0 "transformers[serving]==5.25.0")
if [ "${DFL_WITH_SERVER:-0}" = 1 ] && ! python3 -c "import importlib.util as u, sys
sys.exit(any(u.find_spec(m) is None for m in ('torch', 'fastapi', 'uvicorn', 'transformers.cli.serve')))" 2>/dev/null; then
  echo "setup: installing ${serve_pkgs[*]} (pip; about 5.7 GB)"
  python3 -m pip install -q "${serve_pkgs[@]}" 2>/dev/null ||
    python3 -m pip install -q --break-system-packages "${serve_pkgs[@]}" ||
    echo "setup: warning: could not install torch and transformers: the test io_prepare_server will fail"
fi
[ "${1:-}" = "--deps" ] && exit 0

cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j "$(nproc)"
