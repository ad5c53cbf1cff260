#!/usr/bin/env bash
# What sharing a DPDK device costs (share=1, docs/architecture.md "A DPDK device shared by
# several processes"): ib_send_lat (64 B, busy-polling; perftest's t_typical, half the round trip)
# and ib_write_bw (64 KiB WRITEs, average MB/s) between two devices joined by net_memif,
#   - direct: each process owns its device's port (share=0, the default);
#   - shared A-B: the same two devices, each hosted by its uroce-dpdk-host (share=1);
#   - shared A-A: both processes on device A, through its host alone (no memif crossing);
# run interleaved, REPEATS times each, the median reported.
#   bench/dpdk_share.sh [BUILD_DIR] [REPEATS]
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
repeats=${2:-3}
run=$build/bin/uroce-run
port=19877
sock=/tmp/uroce-bench-share.sock
memif="net_memif0,socket=$sock,socket-abstract=no"
dev() { echo "uroce0=dpdk(dev=$memif,role=$1;ip=10.91.250.$2/24;share=$3)"; }

wait_tcp() { for _ in $(seq 200); do ss -ltnH "sport = :$1" | grep -q . && return; sleep 0.05; done; }

# pair SERVER_DEV CLIENT_DEV PROGRAM ARGS…: the figure the client prints (t_typical or BW avg).
pair() {
  local sdev=$1 cdev=$2 out
  shift 2
  out=$(mktemp)
  UROCE_DEVICES=$sdev timeout 60 "$run" "$@" -d uroce0 -x 0 -p $port >/dev/null 2>&1 &
  local pid=$!
  wait_tcp $port
  UROCE_DEVICES=$cdev timeout 60 "$run" "$@" -d uroce0 -x 0 -p $port 127.0.0.1 >"$out" 2>&1
  wait "$pid" 2>/dev/null
  # ib_send_lat: t_typical (5th column); ib_write_bw: BW average (4th).
  if [[ $1 == ib_send_lat ]]; then
    grep -A1 '^ #bytes' "$out" | tail -1 | awk '$5 + 0 > 0 {print $5}'
  else
    grep -A1 '^ #bytes' "$out" | tail -1 | awk '$4 + 0 > 0 {print $4}'
  fi
  rm -f "$out"
  # A host leaves 2 s after its last client: the next set-up starts its own.
  sleep 2.5
}

median() { sort -g | awk '{a[NR]=$1} END {if (NR) print a[int((NR+1)/2)]; else print "-"}'; }

declare -A res
for _ in $(seq "$repeats"); do
  for kind in direct shared_ab shared_aa; do
    case $kind in
      direct) s=$(dev server 1 0) c=$(dev client 2 0) ;;
      shared_ab) s=$(dev server 1 1) c=$(dev client 2 1) ;;
      shared_aa) s=$(dev server 1 1) c=$s ;;
    esac
    res[$kind.lat]+="$(pair "$s" "$c" ib_send_lat -s 64 -n 3000) "
    res[$kind.bw]+="$(pair "$s" "$c" ib_write_bw -s 65536 -n 2000) "
  done
done
printf '%-28s %12s %12s %12s\n' "" direct "shared A-B" "shared A-A"
for m in lat bw; do
  label="ib_send_lat 64 B t_typical (µs)"
  [[ $m == bw ]] && label="ib_write_bw 64 KiB (MB/s)"
  printf '%-28s' "$label"
  for kind in direct shared_ab shared_aa; do
    printf ' %12s' "$(tr ' ' '\n' <<<"${res[$kind.$m]}" | grep . | median)"
  done
  echo
done
echo "(runs: $(for k in direct shared_ab shared_aa; do echo -n "$k lat [${res[$k.lat]}] bw [${res[$k.bw]}]; "; done))"
