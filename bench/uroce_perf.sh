#!/usr/bin/env bash
# What perftest cannot tell, measured with uroce-perf (--json) next to the raw-UDP baselines of
# bench/ between the same two loopback addresses, run side by side, interleaved:
#   - the 2-byte RC SEND round trip's median, p99 and p99.9 (uroce-perf send_lat) against a UDP
#     ping-pong (bench/udp_pingpong, microseconds per round trip);
#   - the message rate of 64-byte RDMA WRITEs (uroce-perf write_bw -s 64) against a UDP sender's
#     datagram rate with the same batching (bench/udp_bulk -s 64);
#   - bytes moved per CPU-second of both processes, 64 KiB RDMA WRITE against the UDP bulk
#     transfer (CPU time: uroce-perf's getrusage of both sides; bash's `time` for the UDP pair).
# Prints a Markdown table; each figure is the median of REPEATS runs (default 5), and the spread
# of the latency medians (max/min) says how stable they were. Nothing here is a test.
#   bench/uroce_perf.sh [BUILD_DIR] [REPEATS]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
repeats=${2:-5}
run=$build/bin/uroce-run
perf=$build/bin/uroce-perf
srv=127.0.0.1 cli=127.0.0.2 mtu=4096 port=18990 udp_port=19190
tmp=$(mktemp -d /tmp/uroce-bench.XXXXXX)
trap 'rm -rf "$tmp"' EXIT

wait_tcp() { for _ in $(seq 100); do ss -ltnH "sport = :$1" | grep -q . && return; sleep 0.05; done; }
median() { sort -g | awk '{ v[NR] = $1 } END { if (NR) print v[int((NR + 1) / 2)] }'; }
json() { python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print('%.2f' % ($2))" "$1"; }

# uroce_perf OUT TEST ARGS…: a server and a client; the client's JSON document in OUT.
uroce_perf() {
  local out=$1 test=$2
  shift 2
  UROCE_DEVICES=uroce0=$srv "$run" "$perf" "$test" -d uroce0 -m $mtu -p $port "$@" --json \
    >"$tmp/server.json" 2>"$tmp/server.err" &
  local pid=$!
  wait_tcp $port
  UROCE_DEVICES=uroce0=$cli "$run" "$perf" "$test" -d uroce0 -m $mtu -p $port "$@" --json $srv \
    >"$out" 2>"$tmp/client.err" || true
  wait $pid || true
}

udp_rtt() {  # microseconds per round trip
  "$build/bin/udp_pingpong" --bind $srv -p $udp_port -s 2 -m $mtu -n "$1" >/dev/null &
  local pid=$!
  sleep 0.2
  "$build/bin/udp_pingpong" --bind $cli --peer $srv -p $udp_port -s 2 -m $mtu -n "$1" |
    sed -n 's/.* = \([0-9.]*\) usec\/iter.*/\1/p' | tail -n 1
  wait $pid
}

# udp_bulk SIZE COUNT: "datagrams/s bytes cpu-seconds" of the pair (the receiver's figures; CPU
# time of both processes, from bash's `time` on the subshell that runs them).
udp_bulk() {
  local size=$1 n=$2 TIMEFORMAT='%3U %3S'
  {
    time (
      "$build/bin/udp_bulk" --bind $srv --port $udp_port >"$tmp/udp.out" &
      pid=$!
      sleep 0.2
      "$build/bin/udp_bulk" --bind $cli --peer $srv --port $udp_port -s "$size" -m $mtu -n "$n" \
        >/dev/null
      wait $pid
    )
  } 2>"$tmp/udp.time"
  local cpu
  cpu=$(awk '{ print $1 + $2 }' "$tmp/udp.time")
  sed -n 's/^received \([0-9]*\) bytes in \([0-9]*\) datagrams.*, \([0-9.]*\) s$/\2 \1 \3/p' \
    "$tmp/udp.out" | awk -v c="$cpu" '{ if ($3 > 0) printf "%.0f %s %s\n", $1 / $3, $2, c }'
}

lat_p50='' lat_p99='' lat_p999='' udp_lat='' rate='' udp_rate='' eff='' udp_eff=''
for _ in $(seq "$repeats"); do
  uroce_perf "$tmp/lat.json" send_lat -s 2 -n 20000
  # The table's latencies are half the round trip; the baseline's are whole.
  lat_p50+="$(json "$tmp/lat.json" 'd["results"][0]["local"]["usec"]["p50"] * 2')"$'\n'
  lat_p99+="$(json "$tmp/lat.json" 'd["results"][0]["local"]["usec"]["p99"] * 2')"$'\n'
  lat_p999+="$(json "$tmp/lat.json" 'd["results"][0]["local"]["usec"]["p99_9"] * 2')"$'\n'
  udp_lat+="$(udp_rtt 20000)"$'\n'

  uroce_perf "$tmp/rate.json" write_bw -s 64 -n 200000
  rate+="$(json "$tmp/rate.json" 'd["results"][0]["local"]["tx"]["messages_per_second"]')"$'\n'
  udp_rate+="$(udp_bulk 64 200000 | awk '{ print $1 }')"$'\n'

  uroce_perf "$tmp/bw.json" write_bw -s 65536 -n 20000
  eff+="$(json "$tmp/bw.json" 'd["results"][0]["local"]["tx"]["bytes"] / (sum(c["user_seconds"] + c["sys_seconds"] for c in d["cpu"].values() if c) or 1) / 2**20')"$'\n'
  udp_eff+="$(udp_bulk 65536 20000 | awk '{ if ($3 > 0) printf "%.1f\n", $2 / $3 / 1048576 }')"$'\n'
done

m() { grep . <<<"$1" | median || echo n/a; }
spread() { grep . <<<"$1" | sort -g | awk 'NR == 1 { lo = $1 } { hi = $1 } END { if (lo > 0) printf "%.2f", hi / lo; else print "n/a" }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0 && a != "n/a") printf "%.2f", a / b; else print "n/a" }'; }

p50=$(m "$lat_p50") p99=$(m "$lat_p99") p999=$(m "$lat_p999") udp=$(m "$udp_lat")
r=$(m "$rate") ur=$(m "$udp_rate") e=$(m "$eff") ue=$(m "$udp_eff")
echo "| measure (loopback, MTU $mtu, median of $repeats) | uroce (uroce-perf) | raw UDP | uroce / UDP |"
echo "| --- | ---: | ---: | ---: |"
echo "| 2-byte RC SEND round trip, p50 (µs; max/min of the medians: $(spread "$lat_p50")) | $p50 | $udp | $(ratio "$p50" "$udp") |"
echo "| 2-byte RC SEND round trip, p99 / p99.9 (µs) | $p99 / $p999 | | |"
echo "| 64-byte RDMA WRITE message rate (messages/s) | $r | $ur | $(ratio "$r" "$ur") |"
echo "| 64 KiB RDMA WRITE, MB moved per CPU-second of both processes | $e | $ue | $(ratio "$e" "$ue") |"
