#!/usr/bin/env bash
# Installs the build tree into a temporary prefix and checks that the installed pieces work on
# their own: uroce-run finds the installed liburoce.so and unmodified ibv_devices lists uroce0;
# pkg-config and CMake's find_package locate the installed package.
#   install.sh BUILD_DIR
set -euo pipefail
build=$1
prefix=$(mktemp -d /tmp/uroce-install.XXXXXX)
trap 'rm -rf "$prefix"' EXIT
cmake --install "$build" --prefix "$prefix" >/dev/null

out=$(UROCE_DEVICES=uroce0=127.0.4.1 "$prefix/bin/uroce-run" ibv_devices)
echo "$out"
grep -q uroce0 <<<"$out" || { echo "FAIL: installed uroce-run: no uroce0 in ibv_devices"; exit 1; }
# The operator's command is installed beside it and works on its own.
out=$(UROCE_DEVICES=uroce0=127.0.4.1 "$prefix/bin/uroce" devices)
echo "$out"
grep -q "uroce0 .*127.0.4.1" <<<"$out" || { echo "FAIL: installed uroce devices: $out"; exit 1; }
# So is uroce-perf, a plain verbs program: it needs nothing from the build tree, and under the
# installed uroce-run it sees the uroce device.
out=$("$prefix/bin/uroce-perf" --version) || { echo "FAIL: installed uroce-perf --version"; exit 1; }
echo "$out"
out=$(UROCE_DEVICES=uroce0=127.0.4.1 "$prefix/bin/uroce-run" "$prefix/bin/uroce-perf" send_lat \
  -d no_such_device 2>&1) && { echo "FAIL: uroce-perf accepted a device that does not exist"; exit 1; }
grep -q "no device named 'no_such_device' (devices: uroce0)" <<<"$out" ||
  { echo "FAIL: installed uroce-perf does not see uroce0: $out"; exit 1; }
# The installed wrapper must not reach back into the build tree.
grep -q "$build" "$prefix/bin/uroce-run" && { echo "FAIL: uroce-run refers to the build tree"; exit 1; }

pc=$(find "$prefix" -name uroce.pc | head -n 1)
[[ -n $pc ]] || { echo "FAIL: no uroce.pc installed"; exit 1; }
PKG_CONFIG_PATH=$(dirname "$pc") pkg-config --libs uroce | grep -q -- -luroce ||
  { echo "FAIL: pkg-config --libs uroce"; exit 1; }

cfg=$(find "$prefix" -name uroceConfig.cmake -o -name uroce-config.cmake | head -n 1)
[[ -n $cfg ]] || { echo "FAIL: no CMake package config installed"; exit 1; }
src=$(mktemp -d /tmp/uroce-consumer.XXXXXX)
trap 'rm -rf "$prefix" "$src"' EXIT
cat >"$src/CMakeLists.txt" <<'CMAKE'
cmake_minimum_required(VERSION 3.25)
project(consumer CXX)
find_package(uroce REQUIRED)
add_executable(consumer main.cc)
target_link_libraries(consumer PRIVATE uroce::uroce)
CMAKE
cat >"$src/main.cc" <<'CC'
#include <infiniband/verbs.h>
#include <cstdio>
int main() {
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  for (int i = 0; i < n; ++i) std::printf("%s\n", ibv_get_device_name(list[i]));
  ibv_free_device_list(list);
  return n > 0 ? 0 : 1;
}
CC
cmake -S "$src" -B "$src/build" -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build "$src/build" >/dev/null
UROCE_DEVICES=uroce0=127.0.4.1 LD_LIBRARY_PATH="$prefix/lib:$prefix/lib64" "$src/build/consumer" | grep -q uroce0 ||
  { echo "FAIL: a program linked against the installed liburoce does not see uroce0"; exit 1; }
echo "PASS"
