#!/usr/bin/env bash
# uroce over DPDK net_memif against raw DPDK memif, side by side, between two processes on this
# host. Prints a Markdown table:
#   - latency: a 2-byte RC SEND round trip (unmodified ibv_rc_pingpong over uroce's DPDK port)
#     against a raw memif ping-pong of 64-byte frames (memif_raw pingpong), in µs per round trip;
#     and against the same PMD work an RC exchange needs: two frames each way per round trip, in
#     one burst (each message and the ACK of the one before; memif_raw pingpong --frames 2);
#   - bandwidth: RDMA WRITE of 64 KiB (unmodified ib_write_bw) against a raw memif stream of
#     1514-byte frames (memif_raw bulk), in MB/s of payload... of frames for the raw baseline;
#   - the same with jumbo frames: uroce at MTU 9000 (path MTU 4096: 4154-byte frames) against raw
#     4154-byte frames, both with 9216-byte memif ring buffers;
#   - the ceiling of any software RoCE stream here: the raw stream in frames of uroce's size
#     (1082 bytes at path MTU 1024, 4154 at 4096) with what the wire format and the verbs demand
#     added and nothing else — the ICRC computed by the sender and checked by the receiver (uroce's
#     own routine), the payload copied into a 64 KiB region (memif_raw bulk --icrc --place).
#   bench/dpdk.sh [BUILD_DIR] [REPEATS]
# Each figure is the median of REPEATS runs (default 5), uroce and raw interleaved. Both sides
# busy-poll; on a 2-core machine that is four threads for two cores in the uroce case (an
# application thread and an engine thread per process) and two in the raw case.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
repeats=${2:-5}
run=$build/bin/uroce-run
raw=$build/bin/memif_raw
[[ -x $raw ]] || { echo "no $raw: uroce was built without DPDK" >&2; exit 1; }
sock=/tmp/uroce-bench-memif.sock
dev() { echo "uroce0=dpdk(dev=net_memif0,role=$1,socket=$sock,socket-abstract=no${3:+,bsize=9216};ip=10.99.0.$2/24${3:+;mtu=9000})"; }
export UROCE_LOG=error

wait_tcp() { for _ in $(seq 200); do ss -ltnH "sport = :$1" | grep -q . && return; sleep 0.05; done; }
median() { sort -g | awk '{ v[NR] = $1 } END { if (NR) print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) }'; }

uroce_lat() {
  local out; out=$(mktemp)
  rm -f "$sock"
  UROCE_DEVICES=$(dev server 1) "$run" ibv_rc_pingpong -d uroce0 -g 0 -s 2 -n 20000 -p 19990 \
    >/dev/null 2>&1 &
  local pid=$!
  wait_tcp 19990
  UROCE_DEVICES=$(dev client 2) "$run" ibv_rc_pingpong -d uroce0 -g 0 -s 2 -n 20000 -p 19990 \
    127.0.0.1 >"$out" 2>&1 || true
  wait $pid || true
  sed -n 's/.* = \([0-9.]*\) usec\/iter.*/\1/p' "$out" | tail -n 1
  rm -f "$out"
}

# raw_lat [FRAMES]: frames each way per round trip (default 1).
raw_lat() {
  local out; out=$(mktemp)
  rm -f "$sock"
  "$raw" pingpong --role server --socket "$sock" -s 64 -n 20000 --frames "${1:-1}" \
    >/dev/null 2>&1 &
  local pid=$!
  sleep 0.5
  "$raw" pingpong --role client --socket "$sock" -s 64 -n 20000 --frames "${1:-1}" \
    >"$out" 2>/dev/null || true
  wait $pid || true
  sed -n 's/.* = \([0-9.]*\) usec\/iter.*/\1/p' "$out" | tail -n 1
  rm -f "$out"
}

# uroce_bw [jumbo]: at path MTU 1024 (memif's 1518-byte frames), or 4096 over jumbo frames.
uroce_bw() {
  local out; out=$(mktemp)
  local mtu=1024
  [[ -n ${1:-} ]] && mtu=4096
  rm -f "$sock"
  UROCE_DEVICES=$(dev server 1 "${1:-}") "$run" ib_write_bw -d uroce0 -x 0 -s 65536 -n 5000 \
    -m "$mtu" -p 19991 >/dev/null 2>&1 &
  local pid=$!
  wait_tcp 19991
  UROCE_DEVICES=$(dev client 2 "${1:-}") "$run" ib_write_bw -d uroce0 -x 0 -s 65536 -n 5000 \
    -m "$mtu" -p 19991 127.0.0.1 >"$out" 2>&1 || true
  wait $pid || true
  # perftest's row: bytes iterations peak average msgrate
  awk '/^ *65536 /{print $4}' "$out" | tail -n 1
  rm -f "$out"
}

# raw_bw [jumbo] [ceiling]: 1514-byte frames, or 4154-byte ones (a 4096-byte RoCEv2 packet's
# frame); with "ceiling", frames of uroce's size carrying an ICRC each side computes and a
# payload the receiver places (1082 bytes: a 1024-byte WRITE packet's frame, or 4154).
raw_bw() {
  local out; out=$(mktemp)
  local args=(-s 1514 -n 200000) cl=() sv=()
  [[ -n ${1:-} ]] && args=(-s 4154 -n 100000 --bsize 9216)
  if [[ -n ${2:-} ]]; then
    [[ -z ${1:-} ]] && args=(-s 1082 -n 200000)
    cl=(--icrc) sv=(--icrc --place)
  fi
  rm -f "$sock"
  "$raw" bulk --role server --socket "$sock" "${args[@]}" "${sv[@]}" >"$out" 2>/dev/null &
  local pid=$!
  sleep 0.5
  "$raw" bulk --role client --socket "$sock" "${args[@]}" "${cl[@]}" >/dev/null 2>&1 || true
  wait $pid || true
  sed -n 's/.* = \([0-9.]*\) MB\/sec.*/\1/p' "$out" | tail -n 1
  rm -f "$out"
}

ul=() rl=() r2=() ub=() rb=() rc=() uj=() rj=() rjc=()
for _ in $(seq "$repeats"); do
  ul+=("$(uroce_lat)")
  rl+=("$(raw_lat)")
  r2+=("$(raw_lat 2)")
  ub+=("$(uroce_bw)")
  rb+=("$(raw_bw)")
  rc+=("$(raw_bw "" ceiling)")
  uj+=("$(uroce_bw jumbo)")
  rj+=("$(raw_bw jumbo)")
  rjc+=("$(raw_bw jumbo ceiling)")
done
u=$(printf '%s\n' "${ul[@]}" | grep . | median)
r=$(printf '%s\n' "${rl[@]}" | grep . | median)
r2m=$(printf '%s\n' "${r2[@]}" | grep . | median)
U=$(printf '%s\n' "${ub[@]}" | grep . | median)
R=$(printf '%s\n' "${rb[@]}" | grep . | median)
C=$(printf '%s\n' "${rc[@]}" | grep . | median)
J=$(printf '%s\n' "${uj[@]}" | grep . | median)
K=$(printf '%s\n' "${rj[@]}" | grep . | median)
KC=$(printf '%s\n' "${rjc[@]}" | grep . | median)
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a != "" && b > 0) printf "%.2f", a / b; else print "n/a" }'; }
echo "| figure | uroce over memif | raw memif | ratio |"
echo "| --- | ---: | ---: | ---: |"
echo "| round trip, µs (uroce: 2-byte RC SEND; raw: 64-byte frame) | ${u:-failed} | ${r:-failed} | $(ratio "$u" "$r") |"
echo "| round trip, µs (raw: two 64-byte frames each way, as RC's SEND and ACK) | ${u:-failed} | ${r2m:-failed} | $(ratio "$u" "$r2m") |"
echo "| bandwidth, MB/s (uroce: 64 KiB RDMA WRITE; raw: 1514-byte frames) | ${U:-failed} | ${R:-failed} | $(ratio "$U" "$R") |"
echo "| bandwidth, MB/s, jumbo frames (uroce: 64 KiB RDMA WRITE at MTU 4096; raw: 4154-byte frames) | ${J:-failed} | ${K:-failed} | $(ratio "$J" "$K") |"
echo "| ceiling, MB/s (raw: 1082-byte frames, ICRC on both sides, payload placed) against raw | ${C:-failed} | ${R:-failed} | $(ratio "$C" "$R") |"
echo "| ceiling, MB/s, jumbo (raw: 4154-byte frames, ICRC on both sides, payload placed) against raw | ${KC:-failed} | ${K:-failed} | $(ratio "$KC" "$K") |"
echo "| bandwidth, MB/s (uroce: 64 KiB RDMA WRITE) against the ceiling | ${U:-failed} | ${C:-failed} | $(ratio "$U" "$C") |"
echo "| bandwidth, MB/s, jumbo (uroce at MTU 4096) against the ceiling | ${J:-failed} | ${KC:-failed} | $(ratio "$J" "$KC") |"
echo "(medians of $repeats; samples: uroce lat ${ul[*]}; raw lat ${rl[*]}; raw lat, 2 frames ${r2[*]}; uroce bw ${ub[*]}; raw bw ${rb[*]}; ceiling ${rc[*]}; uroce jumbo bw ${uj[*]}; raw jumbo bw ${rj[*]}; jumbo ceiling ${rjc[*]})"
