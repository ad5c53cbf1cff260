#!/usr/bin/env bash
# Installs what uroce needs, builds it, and runs the whole test suite:
#   1. a Release build (-O3, what a packager builds): unit, engine, verbs and integration tests
#      (ctest). Release rather than the developers' default RelWithDebInfo: nothing here reads
#      debug info and both define NDEBUG, so the suite tests the same code, and without -g the
#      build takes less CPU (a full gcc build here: 15.4 CPU-minutes against 18.8); the other
#      build types are covered by the sanitizer builds (Debug) and the fuzzing build
#      (RelWithDebInfo, clang);
#   2. an AddressSanitizer + UndefinedBehaviorSanitizer build of the tests that link uroce directly;
#   3. a libFuzzer build (clang, ASan+UBSan) whose harnesses each run 10 s (scripts/fuzz.sh);
#   4. a ThreadSanitizer build of the engine, verbs and rdma_cm tests (the threaded parts);
# and, in the release build, the wire-interop tests against Linux rxe in a qemu guest.
# Tests that need root (packet capture, network namespaces) skip with a reason when not root.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
jobs=$(nproc)
"$root/scripts/install-deps.sh"

# Four builds (Release, ASan+UBSan, fuzzing, TSan) are most of the suite's time on a 2-core machine
# (~26 of 43 minutes), and a run after a small change recompiles the same sources: ccache answers
# those from the cache. CMake reads the launcher from the environment (≥ 3.17) when a build
# directory is first configured. CCACHE_BASEDIR makes the paths in the compile commands relative,
# so a fresh clone elsewhere hits the entries of the previous one; NOHASHDIR leaves the working
# directory out of the hash of -g builds (their debug info then names the first clone's directory
# as the compilation directory — file names and lines, which is what sanitizer reports use, are
# relative and right).
if command -v ccache >/dev/null; then
  export CMAKE_C_COMPILER_LAUNCHER=ccache CMAKE_CXX_COMPILER_LAUNCHER=ccache
  export CCACHE_BASEDIR="$root" CCACHE_NOHASHDIR=true
  ccache --zero-stats >/dev/null || true
fi

echo "== Release build"
"$root/scripts/build.sh" "$root/build" -DCMAKE_BUILD_TYPE=Release
# The rxe interop tests share one qemu guest and run apart, one at a time (below).
ctest --test-dir "$root/build" -j"$jobs" --output-on-failure --timeout 600 -LE interop

echo "== wire interop with Linux rxe in a qemu guest (needs root; skips with the reason otherwise)"
ctest --test-dir "$root/build" --output-on-failure --timeout 600 -L interop

echo "== ASan+UBSan build"
"$root/scripts/build.sh" "$root/build-asan" -DCMAKE_BUILD_TYPE=Debug -DUROCE_SANITIZE=address,undefined \
  -DUROCE_BUILD_BENCH=OFF
# Integration tests preload liburoce into unmodified, uninstrumented programs, which the ASan
# runtime does not support (label "integration"); the sanitizer run covers every test that links
# uroce itself.
ctest --test-dir "$root/build-asan" -j"$jobs" --output-on-failure --timeout 600 -LE integration

echo "== fuzzing: every libFuzzer harness briefly, from its seeds (clang, ASan+UBSan; docs/hardening.md)"
"$root/scripts/fuzz.sh" --seconds 10 --build "$root/build-fuzz"

echo "== ThreadSanitizer build: the engine thread, the verbs layer and the CM thread over it"
cmake -S "$root" -B "$root/build-tsan" -DCMAKE_BUILD_TYPE=Debug -DUROCE_SANITIZE=thread \
  -DUROCE_WERROR=ON -DUROCE_BUILD_BENCH=OFF >/dev/null
cmake --build "$root/build-tsan" -j"$jobs" --target engine_tests verbs_tests verbs_config_tests \
  verbs_port_tests cm_tests cm_gsi_tests rdma_cm_tests rdma_cm_forward_linked_tests \
  rdma_cm_ipv6_tests rdma_cm_dual_stack_tests
ctest --test-dir "$root/build-tsan" -j"$jobs" --output-on-failure --timeout 600 -L "engine|verbs|cm" \
  -LE integration

if command -v ccache >/dev/null; then
  echo "== ccache (this run)"
  ccache --show-stats | sed -n '1,6p' || true
fi
