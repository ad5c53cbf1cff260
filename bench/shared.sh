#!/usr/bin/env bash
# What sharing a device address costs (docs/architecture.md, "One device, many processes"): the
# round trip (ibv_rc_pingpong, 64 B, busy-polling) and the bandwidth (ib_write_bw, 64 KiB WRITEs)
# of a server and a client
#   - single: each on a device of its own address, bound by that process alone (UROCE_SHARE=0,
#     uroce's path before sharing);
#   - own address, shared: the same two addresses, each a group of one (the steering program runs
#     on every datagram, no other process);
#   - one shared device: both processes on one device, one address (a group of two);
# run interleaved, REPEATS times each, the median reported, with the ratios against "single".
#   bench/shared.sh [BUILD_DIR] [REPEATS]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
repeats=${2:-5}
run=$build/bin/uroce-run
a=127.0.0.1 b=127.0.0.2 port=18997

wait_tcp() { for _ in $(seq 100); do ss -ltnH "sport = :$1" | grep -q . && return; sleep 0.05; done; }

# pair SHARE SERVER_IP CLIENT_IP PROGRAM ARGS…: runs the server and then the client, prints the
# client's output.
pair() {
  local share=$1 sip=$2 cip=$3 out
  shift 3
  out=$(mktemp)
  UROCE_SHARE=$share UROCE_DEVICES=uroce0=$sip "$run" "$@" -p $port >/dev/null 2>&1 &
  local pid=$!
  wait_tcp $port
  UROCE_SHARE=$share UROCE_DEVICES=uroce0=$cip "$run" "$@" -p $port "$sip" >"$out" 2>&1 || true
  wait $pid || true
  cat "$out"
  rm -f "$out"
}

rtt() { pair "$@" ibv_rc_pingpong -d uroce0 -g 0 -s 64 -n 20000 | sed -n 's/.* = \([0-9.]*\) usec\/iter.*/\1/p' | tail -n 1; }
bw() { pair "$@" ib_write_bw -d uroce0 -x 0 -s 65536 -D 3 | awk '$1 == 65536 { print $4 }' | tail -n 1; }

median() { sort -g | awk '{ v[NR] = $1 } END { if (NR) print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) }'; }
ratio() { awk -v u="$1" -v b="$2" 'BEGIN { if (b > 0 && u != "") printf "%.2f", u / b; else print "n/a" }'; }

declare -A r
for _ in $(seq "$repeats"); do
  r[rtt_single]+="$(rtt 0 $a $b) "
  r[rtt_own]+="$(rtt 1 $a $b) "
  r[rtt_one]+="$(rtt 1 $a $a) "
  r[bw_single]+="$(bw 0 $a $b) "
  r[bw_own]+="$(bw 1 $a $b) "
  r[bw_one]+="$(bw 1 $a $a) "
done
m() { tr ' ' '\n' <<<"${r[$1]}" | grep . | median; }
echo "| | single (UROCE_SHARE=0) | own address, shared | one shared device | own / single | one / single |"
echo "| --- | ---: | ---: | ---: | ---: | ---: |"
echo "| round trip, 64 B (µs) | $(m rtt_single) | $(m rtt_own) | $(m rtt_one) | $(ratio "$(m rtt_own)" "$(m rtt_single)") | $(ratio "$(m rtt_one)" "$(m rtt_single)") |"
echo "| WRITE bandwidth, 64 KiB (MB/s) | $(m bw_single) | $(m bw_own) | $(m bw_one) | $(ratio "$(m bw_own)" "$(m bw_single)") | $(ratio "$(m bw_one)" "$(m bw_single)") |"
echo
echo "(median of $repeats runs each, interleaved; $(nproc) CPUs, $(date -u +%Y-%m-%d))"
