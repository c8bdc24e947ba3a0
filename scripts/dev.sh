#!/usr/bin/env bash
# One entry point for a fresh Debian machine (the README's two commands):
#   scripts/dev.sh showcase   install deps, build, run the showcase (GPU if present, else emulated)
#   scripts/dev.sh test       install deps, build, run every C++ and Python test (emulated backend,
#                             plus the cuda backend when a GPU is present)
# Environment: BUILD_DIR (default build), JOBS (default: nproc), SKIP_DEPS=1 to skip apt.
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-test}
BUILD_DIR=${BUILD_DIR:-build}
JOBS=${JOBS:-$(nproc)}

install_deps() {
  [ "${SKIP_DEPS:-0}" = 1 ] && return
  local pkgs=(cmake ninja-build g++ pkg-config python3 python3-dev python3-pytest python3-numpy
              pybind11-dev python3-pybind11 libgtest-dev libgmock-dev libbenchmark-dev
              nlohmann-json3-dev libfmt-dev zlib1g-dev)
  local missing=()
  for p in "${pkgs[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
  if [ ${#missing[@]} -gt 0 ]; then
    local sudo=""; [ "$(id -u)" = 0 ] || sudo=sudo
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}"
  fi
}

build() {
  local py=/usr/bin/python3; [ -x "$py" ] || py=$(command -v python3)
  cmake -S . -B "$BUILD_DIR" -G Ninja -DPython3_EXECUTABLE="$py" ${CMAKE_ARGS:-}
  cmake --build "$BUILD_DIR" -j "$JOBS"
}

gpu_present() { command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; }

case "$mode" in
  showcase)
    install_deps; build
    backend=emulated; gpu_present && backend=cuda
    echo "== C++ showcase on the $backend backend"
    CUDAKIT_BACKEND=$backend "$BUILD_DIR/examples/cudakit_showcase"
    echo "== Python showcase on the $backend backend"
    CUDAKIT_BACKEND=$backend PYTHONPATH="$BUILD_DIR/python" python3 examples/showcase.py
    ;;
  test)
    install_deps; build
    echo "== tests on the emulated backend"
    ctest --test-dir "$BUILD_DIR" --output-on-failure -j "$JOBS"
    if gpu_present; then
      echo "== tests on the cuda backend"
      cmake -S . -B "$BUILD_DIR" -DCUDAKIT_TEST_BACKEND=cuda >/dev/null
      ctest --test-dir "$BUILD_DIR" --output-on-failure -j 1
      cmake -S . -B "$BUILD_DIR" -DCUDAKIT_TEST_BACKEND=emulated >/dev/null
    fi
    ;;
  *) echo "usage: $0 showcase|test" >&2; exit 2 ;;
esac
