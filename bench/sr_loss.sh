#!/usr/bin/env bash
# Selective repeat against go-back-N on real sockets (issue 35 item 4): perftest ib_write_bw,
# 64 KiB, between two uroce processes on loopback (127.0.0.1 server, 127.0.0.2 client), with
# UROCE_FAULTS loss injected on both sides, go-back-N (UROCE_SR=0) then selective repeat (the
# default) at each loss rate. Prints the average bandwidth and the client's resends (its counters,
# UROCE_STATS=1) per run; the figures are in docs/selective-repeat.md.
#
#   bench/sr_loss.sh [BUILD_DIR] [ITERATIONS] [LOSS…]      (defaults: build, 3000, 0 0.001 0.01)
#   TOOL=ib_read_bw bench/sr_loss.sh …   the same with RDMA READs (the responses are what is lost
#                                        and, with selective repeat, placed as they arrive)
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
iters=${2:-3000}
shift 2 2>/dev/null || shift $#
losses=("$@")
((${#losses[@]})) || losses=(0 0.001 0.01)
run=$build/bin/uroce-run
tool=${TOOL:-ib_write_bw}
command -v "$tool" >/dev/null || {
  echo "$tool (perftest) is not installed" >&2
  exit 1
}
tmp=$(mktemp -d /tmp/uroce-sr-loss.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
port=19300
for loss in "${losses[@]}"; do
  for sr in 0 1; do
    port=$((port + 1))
    faults=""
    [[ $loss != 0 ]] && faults="loss=$loss,seed=7"
    UROCE_SR=$sr UROCE_FAULTS=$faults UROCE_DEVICES=uroce0=127.0.0.1 timeout 120 "$run" \
      "$tool" -d uroce0 -s 65536 -n "$iters" -F -p $port >"$tmp/srv" 2>&1 &
    srv=$!
    for _ in $(seq 100); do
      ss -ltnH "sport = :$port" | grep -q . && break
      sleep 0.05
    done
    UROCE_SR=$sr UROCE_FAULTS=$faults UROCE_STATS=1 UROCE_DEVICES=uroce0=127.0.0.2 timeout 120 \
      "$run" "$tool" -d uroce0 -s 65536 -n "$iters" -F -p $port 127.0.0.1 >"$tmp/cli" 2>&1
    wait "$srv"
    # UROCE_STATS prints the non-zero counters only.
    counter() { awk -v n="$1" '$1 == n {v = $2} END {print v + 0}' "$tmp/cli"; }
    bw=$(awk '$1 == 65536 {print $4}' "$tmp/cli" | tail -1)
    printf 'loss %-6s %-17s %8s MB/s  resent %6s (selective %s), ACK timeouts %s, READ responses placed ahead %s\n' \
      "$loss" "$([[ $sr == 1 ]] && echo selective-repeat || echo go-back-N)" "${bw:-?}" \
      "$(counter retransmitted_pkts)" "$(counter sr_selective_resends)" \
      "$(counter local_ack_timeout_err)" "$(counter sr_read_placed)"
  done
done
