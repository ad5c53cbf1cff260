#!/usr/bin/env bash
# Instructions per operation of uroce's per-packet path, counted by callgrind: repeatable where
# wall time on a shared machine is not, so a regression shows as a number that moved. Runs
# path_bench's fixed-iteration benchmarks (PATH_BENCH_FIXED, bench/path_bench.cc) twice, with N
# and 2N iterations, collecting only inside the benchmark functions, and reports the difference
# divided by N: the set-up inside each function cancels out.
#
#   bench/instructions.sh [BUILD_DIR] [N]
#
#   fixed/RcSendRoundTrip/2   a 2-byte RC SEND and its reply, both sides, ACKs and completions
#   fixed/RcWriteStream/64    one 64-byte RDMA WRITE, requester and responder, its ACK share
#   fixed/RcWriteStream/4096  one 4 KiB RDMA WRITE (one packet at MTU 4096)
#   fixed/PostSend            one ibv_post_send-equivalent into the transport
# The figures of docs/performance.md come from it. Needs valgrind (Debian: valgrind).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
n=${2:-2000}
bench=$build/bin/path_bench
[[ -x $bench ]] || { echo "no $bench: build first (scripts/build.sh)" >&2; exit 1; }
command -v valgrind >/dev/null || { echo "valgrind is not installed" >&2; exit 1; }
tmp=$(mktemp -d /tmp/uroce-instructions.XXXXXX)
trap 'rm -rf "$tmp"' EXIT

# count NAME ITERATIONS: instructions callgrind collected inside the benchmark functions.
count() {
  PATH_BENCH_FIXED=$2 valgrind --tool=callgrind --toggle-collect='*BM_*' \
    --callgrind-out-file="$tmp/cg.out" "$bench" --benchmark_filter="^$1/" >/dev/null 2>"$tmp/log"
  sed -n 's/.*Collected : \([0-9]*\).*/\1/p' "$tmp/log"
}

echo "| operation (path_bench, callgrind) | instructions |"
echo "| --- | ---: |"
for b in fixed/RcSendRoundTrip/2 fixed/RcWriteStream/64 fixed/RcWriteStream/4096 fixed/PostSend; do
  one=$(count "$b" "$n")
  two=$(count "$b" $((2 * n)))
  echo "| $b | $(( (two - one) / n )) |"
done
