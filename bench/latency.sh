#!/usr/bin/env bash
# Latency of uroce RC SEND ping-pong (the unmodified ibv_rc_pingpong over uroce, which busy-polls
# its CQ) against raw UDP ping-pongs (bench/udp_pingpong, blocking and busy-polling) and a kernel
# TCP busy-poll ping-pong (udp_pingpong --tcp --busy-poll, TCP_NODELAY) between the same two
# loopback addresses, run side by side, one size after the other. Prints a Markdown table of
# microseconds per round trip and the ratios against the busy-polling baselines.
#   bench/latency.sh [BUILD_DIR] [ITERS] [REPEATS]
# Each figure is the median of REPEATS runs (default 5), uroce and UDP interleaved, so that a burst
# of load from elsewhere on the machine moves one sample, not the result.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
iters=${2:-5000}
repeats=${3:-5}
run=$build/bin/uroce-run
udp=$build/bin/udp_pingpong
srv=127.0.0.1 cli=127.0.0.2 mtu=4096

usec_per_iter() { sed -n 's/.* = \([0-9.]*\) usec\/iter.*/\1/p' "$1" | tail -n 1; }

wait_tcp() { for _ in $(seq 100); do ss -ltnH "sport = :$1" | grep -q . && return; sleep 0.05; done; }

uroce_lat() {
  local size=$1 out; out=$(mktemp)
  UROCE_DEVICES=uroce0=$srv "$run" ibv_rc_pingpong -d uroce0 -g 0 -m $mtu -s "$size" -n "$iters" \
    -p 18999 >/dev/null 2>&1 &
  local pid=$!
  wait_tcp 18999
  UROCE_DEVICES=uroce0=$cli "$run" ibv_rc_pingpong -d uroce0 -g 0 -m $mtu -s "$size" -n "$iters" \
    -p 18999 $srv >"$out" 2>&1
  wait $pid
  usec_per_iter "$out"; rm -f "$out"
}

# udp_lat SIZE [udp_pingpong flags…]: --busy-poll, --tcp.
udp_lat() {
  local size=$1 out; out=$(mktemp)
  shift
  "$udp" --bind $srv -p 19000 -s "$size" -m $mtu -n "$iters" "$@" >/dev/null &
  local pid=$!
  sleep 0.2
  "$udp" --bind $cli --peer $srv -p 19000 -s "$size" -m $mtu -n "$iters" "$@" >"$out"
  wait $pid
  usec_per_iter "$out"; rm -f "$out"
}

median() { sort -g | awk '{ v[NR] = $1 } END { if (NR) print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) }'; }

ratio() { awk -v u="$1" -v b="$2" 'BEGIN { if (b > 0 && u != "") printf "%.2f", u / b; else print "n/a" }'; }

echo "| size (B) | uroce RC SEND | raw UDP, blocking | raw UDP, busy-poll | TCP, busy-poll | uroce / UDP busy-poll | uroce / TCP busy-poll |"
echo "| ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
for size in 2 64 1024 4096 16384 65536; do
  us=() bs=() ps=() ts=()
  for _ in $(seq "$repeats"); do
    us+=("$(uroce_lat "$size")")
    bs+=("$(udp_lat "$size")")
    ps+=("$(udp_lat "$size" --busy-poll)")
    ts+=("$(udp_lat "$size" --tcp --busy-poll)")
  done
  # A failed uroce run leaves an empty sample; the median is over the runs that finished.
  u=$(printf '%s\n' "${us[@]}" | grep . | median)
  b=$(printf '%s\n' "${bs[@]}" | grep . | median)
  p=$(printf '%s\n' "${ps[@]}" | grep . | median)
  t=$(printf '%s\n' "${ts[@]}" | grep . | median)
  echo "| $size | ${u:-failed} | $b | $p | $t | $(ratio "$u" "$p") | $(ratio "$u" "$t") |"
done
echo "(µs per round trip, medians of $repeats runs of $iters iterations, interleaved)"
