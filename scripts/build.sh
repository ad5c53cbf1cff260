#!/usr/bin/env bash
# Configures and builds uroce into a build directory (default: build/), with warnings as errors
# (UROCE_WERROR: on for developers and CI, off in a plain cmake configuration for packagers).
#   scripts/build.sh [BUILD_DIR] [extra cmake args…]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
shift || true
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=${CMAKE_BUILD_TYPE:-RelWithDebInfo} -DUROCE_WERROR=ON \
  "$@" >/dev/null
cmake --build "$build" -j"$(nproc)"
