#!/usr/bin/env bash
# Every ratio docs/performance.md reports for the socket datapath, measured side by side in one
# run between the same two loopback addresses, with uroce's defaults: uroce against kernel TCP and
# raw UDP doing the same work, interleaved, each figure the median of REPEATS runs. Prints one
# Markdown table with each ratio's goal (the goals of the performance issue) and whether this run
# met it. Nothing here is a test; rerun it on your machine and compare rows of one run.
#   bench/ratios.sh [BUILD_DIR] [REPEATS]
#
#   round trip   2-byte RC SEND, unmodified ibv_rc_pingpong (busy-polls its CQ), against
#                udp_pingpong --busy-poll (UDP) and --tcp --busy-poll (TCP_NODELAY); the spread
#                is max/min of uroce's per-run medians (goal: within 20%)
#   event mode   2-byte RC SEND, ibv_rc_pingpong -e (sleeps on its completion channel), against a
#                blocking kernel TCP ping-pong (udp_pingpong --tcp); qperf's rc_lat (its default
#                event mode) and rc_rdma_write_lat against qperf's tcp_lat, when qperf is installed
#   UCX sleep    UCX's tag_lat in its sleep mode (ucx_perftest -E sleep: ucp_worker_wait, epoll on
#                the completion channel's fd), 8 bytes, over rc_verbs on uroce against the same
#                over UCX's own TCP transport, when ucx_perftest is installed
#   bandwidth    64 KiB RDMA WRITE and READ, one QP (uroce-perf write_bw / read_bw), against one
#                kernel TCP stream of 64 KiB writes (udp_bulk --tcp); 8 QPs against 1 QP
#   message rate 64-byte RDMA WRITE against UDP datagrams of 64 bytes sent with sendmmsg in
#                batches of 32 (udp_bulk -s 64 -m 64, the receiver's count), with the same batching:
#                uroce-perf write_bw -s 64 -l 32 (32 WRs per ibv_post_send); also -l 1 (one
#                WR, so one send, per post) for reference
#   CPU          MB moved per CPU-second of both processes: 64 KiB WRITE (uroce-perf's getrusage of
#                both sides) against the TCP stream (the pair's CPU time)
#   idle         CPU of a process holding an open uroce device and doing nothing, over 3 s
#   ICRC         bench/wire_bench BM_Icrc/4096: one core's ICRC throughput on 4 KiB packets
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
repeats=${2:-5}
run=$build/bin/uroce-run
perf=$build/bin/uroce-perf
srv=127.0.0.1 cli=127.0.0.2 mtu=4096 port=18970 bport=19170 qport=19171 uport=19172
tmp=$(mktemp -d /tmp/uroce-ratios.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
export UROCE_LOG=error

wait_tcp() { for _ in $(seq 100); do ss -ltnH "sport = :$1" | grep -q . && return; sleep 0.05; done; }
median() { sort -g | awk '{ v[NR] = $1 } END { if (NR) print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) }'; }
usec_per_iter() { sed -n 's/.* = \([0-9.]*\) usec\/iter.*/\1/p' "$1" | tail -n 1; }

rc_rtt() {  # [flags…]: µs per round trip of unmodified ibv_rc_pingpong, 2 bytes
  UROCE_DEVICES=uroce0=$srv "$run" ibv_rc_pingpong -d uroce0 -g 0 -m $mtu -s 2 -n 20000 \
    -p $port "$@" >/dev/null 2>&1 &
  local pid=$!
  wait_tcp $port
  UROCE_DEVICES=uroce0=$cli "$run" ibv_rc_pingpong -d uroce0 -g 0 -m $mtu -s 2 -n 20000 \
    -p $port "$@" $srv >"$tmp/rc.out" 2>&1 || true
  wait $pid || true
  usec_per_iter "$tmp/rc.out"
}

base_rtt() {  # udp_pingpong flags…: µs per round trip, 2 bytes
  "$build/bin/udp_pingpong" --bind $srv -p $bport -s 2 -m $mtu -n 20000 "$@" >/dev/null &
  local pid=$!
  sleep 0.2
  "$build/bin/udp_pingpong" --bind $cli --peer $srv -p $bport -s 2 -m $mtu -n 20000 "$@" \
    >"$tmp/udp.out" || true
  wait $pid || true
  usec_per_iter "$tmp/udp.out"
}

# qperf_lat TEST…: µs of qperf's one-way latency, 2-byte messages, each TEST in turn, one line
# each (empty when it failed). Its server runs under uroce-run on $srv; tcp_lat goes over the
# kernel either way. -cm1: qperf's RC tests connect through the RDMA CM, the way to RoCE's GRH
# (without it qperf addresses the peer by LID, which RoCE has not: EINVAL at RTR).
qperf_lat() {
  UROCE_DEVICES=uroce0=$srv "$run" qperf -lp $qport >/dev/null 2>&1 &
  local pid=$!
  wait_tcp $qport
  local t
  for t in "$@"; do
    local cm=(-cm1)
    [[ $t == tcp_* ]] && cm=()
    UROCE_DEVICES=uroce0=$cli "$run" qperf -lp $qport $srv "${cm[@]}" -m 2 -t 2 "$t" 2>/dev/null |
      awk '$1 == "latency" { v = $3; if ($4 == "ms") v *= 1000; if ($4 == "ns") v /= 1000; print v }
           END { if (!NR) print "" }' || echo
  done
  kill $pid 2>/dev/null || true
  wait $pid 2>/dev/null || true
}

# ucx_lat TLS NET_DEVICE: µs of ucx_perftest's tag_lat in sleep mode (its one-way latency, the
# median "50.0%ile" of the Final row), 8-byte messages, server on $srv.
ucx_lat() {
  UCX_TLS=$1 UCX_NET_DEVICES=$2 UROCE_DEVICES=uroce0=$srv "$run" ucx_perftest -p $uport \
    >/dev/null 2>&1 &
  local pid=$!
  wait_tcp $uport
  UCX_TLS=$1 UCX_NET_DEVICES=$2 UROCE_DEVICES=uroce0=$cli "$run" ucx_perftest $srv -p $uport \
    -t tag_lat -E sleep -n 20000 -s 8 2>/dev/null | awk '$1 == "Final:" { print $3 }' || echo
  wait $pid 2>/dev/null || true
}

# uroce_perf OUT TEST ARGS…: a uroce-perf server and client; the client's JSON in OUT.
uroce_perf() {
  local out=$1 test=$2
  shift 2
  UROCE_DEVICES=uroce0=$srv "$run" "$perf" "$test" -d uroce0 -m $mtu -p $port "$@" --json \
    >/dev/null 2>"$tmp/server.err" &
  local pid=$!
  wait_tcp $port
  UROCE_DEVICES=uroce0=$cli "$run" "$perf" "$test" -d uroce0 -m $mtu -p $port "$@" --json $srv \
    >"$out" 2>"$tmp/client.err" || true
  wait $pid || true
}
# jq EXPR FILE: a Python expression over the JSON document d.
jq() { python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print('%.6g' % ($1))" "$2" 2>/dev/null || true; }
MBPS='(lambda r: (r["tx"] if r["tx"]["bytes"] else r["rx"])["bytes_per_second"] / 2**20)(d["results"][0]["local"])'
MSGS='(lambda r: (r["tx"] if r["tx"]["bytes"] else r["rx"])["messages_per_second"])(d["results"][0]["local"])'
CPU='sum(c["user_seconds"] + c["sys_seconds"] for c in d["cpu"].values() if c)'

# bulk tcp|udp SIZE MTU N: "MB/s cpu-seconds datagrams/s" of a udp_bulk pair (the receiver's
# figures; the CPU time of both processes).
bulk() {
  local mode=() TIMEFORMAT='%3U %3S'
  [[ $1 == tcp ]] && mode=(--tcp)
  {
    time (
      "$build/bin/udp_bulk" --bind $srv -p $bport -m "$3" "${mode[@]}" >"$tmp/bulk.out" &
      p=$!
      sleep 0.2
      "$build/bin/udp_bulk" --bind $cli --peer $srv -p $bport -s "$2" -m "$3" -n "$4" \
        "${mode[@]}" >/dev/null
      wait $p
    )
  } 2>"$tmp/bulk.time"
  local cpu mbps n secs
  cpu=$(awk '{ print $1 + $2 }' "$tmp/bulk.time")
  mbps=$(sed -n 's/^BW average: \([0-9.]*\) MB\/sec/\1/p' "$tmp/bulk.out")
  read -r n secs < <(sed -n 's/^received [0-9]* bytes in \([0-9]*\) .*, \([0-9.]*\) s$/\1 \2/p' \
    "$tmp/bulk.out")
  echo "$mbps $cpu $(awk -v n="$n" -v s="$secs" 'BEGIN { if (s > 0) printf "%.0f", n / s }')"
}

declare -A S  # sample lists, one line per repeat
add() { S[$1]+="$2"$'\n'; }
for r in $(seq "$repeats"); do
  echo "ratios.sh: run $r of $repeats" >&2
  add rc "$(rc_rtt)"
  add udp "$(base_rtt --busy-poll)"
  add tcp "$(base_rtt --tcp --busy-poll)"
  add rc_ev "$(rc_rtt -e)"
  add tcp_blk "$(base_rtt --tcp)"
  if command -v qperf >/dev/null; then
    { read -r a; read -r b; read -r c; } < <(qperf_lat rc_lat rc_rdma_write_lat tcp_lat)
    add q_rc "$a"
    add q_write "$b"
    add q_tcp "$c"
  fi

  if command -v ucx_perftest >/dev/null; then
    add ucx_rc "$(ucx_lat rc_verbs,ud_verbs uroce0:1)"
    add ucx_tcp "$(ucx_lat tcp lo)"
  fi

  uroce_perf "$tmp/w.json" write_bw -s 65536 -n 20000
  add write "$(jq "$MBPS" "$tmp/w.json")"
  add write_eff "$(jq "d['results'][0]['local']['tx']['bytes'] / 2**20 / ($CPU)" "$tmp/w.json")"
  uroce_perf "$tmp/r.json" read_bw -s 65536 -n 20000
  add read "$(jq "$MBPS" "$tmp/r.json")"
  uroce_perf "$tmp/q8.json" write_bw -s 65536 -n 5000 -q 8
  add write8 "$(jq "$MBPS" "$tmp/q8.json")"
  read -r mbps cpu _ < <(bulk tcp 65536 $mtu 20000)
  add tcp_bw "$mbps"
  add tcp_eff "$(awk -v c="$cpu" 'BEGIN { if (c > 0) printf "%.1f", 65536 * 20000 / 1048576 / c }')"

  uroce_perf "$tmp/m.json" write_bw -s 64 -n 500000 -l 32
  add rate "$(jq "$MSGS" "$tmp/m.json")"
  uroce_perf "$tmp/m1.json" write_bw -s 64 -n 200000
  add rate1 "$(jq "$MSGS" "$tmp/m1.json")"
  read -r _ _ dps < <(bulk udp 64 64 2000000)
  add udp_rate "$dps"
done

# Idle: a uroce-perf server holds the device open and waits for a client that never comes.
UROCE_DEVICES=uroce0=$srv "$run" "$perf" write_bw -d uroce0 -p $port >/dev/null 2>&1 &
idle_pid=$!
wait_tcp $port
ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
t0=$(ticks $idle_pid)
sleep 3
idle=$(awk -v a="$t0" -v b="$(ticks $idle_pid)" -v hz="$(getconf CLK_TCK)" \
  'BEGIN { printf "%.2f", (b - a) / hz / 3 * 100 }')
kill $idle_pid 2>/dev/null || true
wait $idle_pid 2>/dev/null || true

icrc=$("$build/bin/wire_bench" --benchmark_filter='BM_Icrc/4096$' --benchmark_min_time=0.3 \
  2>/dev/null | sed -n 's/.*bytes_per_second=\([0-9.]*\)G\/s.*/\1/p' | head -n 1)

m() { grep . <<<"${S[$1]}" | median; }
spread() { grep . <<<"${S[$1]}" | sort -g | awk 'NR == 1 { lo = $1 } { hi = $1 } END { if (lo > 0) printf "%.2f", hi / lo }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a != "" && b > 0) printf "%.2f", a / b; else print "n/a" }'; }
# verdict RATIO OP GOAL
verdict() { awk -v r="$1" -v g="$3" -v op="$2" 'BEGIN { if (op == "") print "(no goal)"; else if (r == "n/a") print "n/a"; else if ((op == "<=" && r <= g) || (op == ">=" && r >= g)) print "met"; else print "**not met**" }'; }
row() {  # measure uroce baseline ratio op goal
  echo "| $1 | $2 | $3 | $4 | $5 $6 | $(verdict "$4" "$5" "$6") |"
}
rc=$(m rc) udp=$(m udp) tcp=$(m tcp)
echo "| measure (loopback, MTU $mtu, median of $repeats runs) | uroce | baseline | ratio | goal | |"
echo "| --- | ---: | ---: | ---: | :---: | --- |"
row "2-byte RC SEND round trip (µs) / TCP busy-poll" "$rc" "$tcp" "$(ratio "$rc" "$tcp")" "<=" 1.0
row "2-byte RC SEND round trip (µs) / UDP busy-poll" "$rc" "$udp" "$(ratio "$rc" "$udp")" "<=" 1.3
row "round-trip stability: max/min of the $repeats medians" "$(spread rc)" "" "$(spread rc)" "<=" 1.2
row "2-byte RC SEND round trip, event mode (µs) / blocking TCP" "$(m rc_ev)" "$(m tcp_blk)" "$(ratio "$(m rc_ev)" "$(m tcp_blk)")" "<=" 1.0
row "qperf rc_lat (µs, event mode) / qperf tcp_lat" "$(m q_rc)" "$(m q_tcp)" "$(ratio "$(m q_rc)" "$(m q_tcp)")" "<=" 1.2
row "qperf rc_rdma_write_lat (µs) / qperf tcp_lat" "$(m q_write)" "$(m q_tcp)" "$(ratio "$(m q_write)" "$(m q_tcp)")" "<=" 1.5
row "UCX tag_lat, sleep mode (µs): rc_verbs on uroce / UCX's tcp" "$(m ucx_rc)" "$(m ucx_tcp)" "$(ratio "$(m ucx_rc)" "$(m ucx_tcp)")" "" ""
row "64 KiB RDMA WRITE, 1 QP (MB/s) / TCP stream" "$(m write)" "$(m tcp_bw)" "$(ratio "$(m write)" "$(m tcp_bw)")" ">=" 1.0
row "64 KiB RDMA READ, 1 QP (MB/s) / TCP stream" "$(m read)" "$(m tcp_bw)" "$(ratio "$(m read)" "$(m tcp_bw)")" ">=" 0.9
row "64 KiB RDMA WRITE, 8 QPs / 1 QP (MB/s)" "$(m write8)" "$(m write)" "$(ratio "$(m write8)" "$(m write)")" ">=" 1.0
row "64-byte RDMA WRITE, 32 per post (messages/s) / UDP datagrams/s, 32 per sendmmsg" "$(m rate)" "$(m udp_rate)" "$(ratio "$(m rate)" "$(m udp_rate)")" ">=" 0.8
row "64-byte RDMA WRITE, 1 per post (messages/s) / the same UDP" "$(m rate1)" "$(m udp_rate)" "$(ratio "$(m rate1)" "$(m udp_rate)")" "" ""
row "MB per CPU-second of both processes, 64 KiB WRITE / TCP" "$(m write_eff)" "$(m tcp_eff)" "$(ratio "$(m write_eff)" "$(m tcp_eff)")" ">=" 1.0
row "idle device, CPU % of one core" "$idle" "" "$idle" "<=" 1
row "ICRC, 4 KiB packets (GB/s, one core)" "$icrc" "" "$icrc" ">=" 20
echo
echo "(samples, one per run: uroce RTT $(tr '\n' ' ' <<<"${S[rc]}"); UDP $(tr '\n' ' ' <<<"${S[udp]}"); TCP $(tr '\n' ' ' <<<"${S[tcp]}"))"
