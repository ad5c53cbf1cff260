#!/usr/bin/env bash
# Bandwidth of uroce (the unmodified ib_write_bw and ib_read_bw from perftest, one QP, 64 KiB
# messages) against a raw UDP bulk transfer (bench/udp_bulk) with datagrams of one uroce packet's
# payload at the same MTU, between the same two loopback addresses, run side by side. Prints a
# Markdown table of MB/sec (MB = 2^20 bytes, as perftest reports) and the ratio; each figure is the
# median of REPEATS runs, uroce and UDP interleaved.
#   bench/bandwidth.sh [BUILD_DIR] [ITERS] [REPEATS]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
iters=${2:-5000}
repeats=${3:-3}
run=$build/bin/uroce-run
udp=$build/bin/udp_bulk
srv=127.0.0.1 cli=127.0.0.2 size=65536 mtu=4096 port=18998

wait_tcp() { for _ in $(seq 100); do ss -ltnH "sport = :$1" | grep -q . && return; sleep 0.05; done; }

# perftest's result row: #bytes #iterations BW-peak BW-average MsgRate; prints BW average.
perftest_bw() {
  local program=$1 out; out=$(mktemp)
  UROCE_DEVICES=uroce0=$srv "$run" "$program" -d uroce0 -x 0 -m $mtu -s $size -n "$iters" \
    -p $port >/dev/null 2>&1 &
  local pid=$!
  wait_tcp $port
  UROCE_DEVICES=uroce0=$cli "$run" "$program" -d uroce0 -x 0 -m $mtu -s $size -n "$iters" \
    -p $port $srv >"$out" 2>&1 || true
  wait $pid || true
  grep -A1 "#bytes" "$out" | awk '$1 ~ /^[0-9]+$/ { print $4 }' | tail -n 1
  rm -f "$out"
}

# The receiver's figure: what arrived, from the first datagram to the last.
udp_bw() {
  local out; out=$(mktemp)
  "$udp" --bind $srv -p 19100 -m $mtu >"$out" &
  local pid=$!
  sleep 0.2
  "$udp" --bind $cli --peer $srv -p 19100 -s $size -m $mtu -n "$iters" >/dev/null
  wait $pid
  # "MB/s lost%": UDP has no flow control, so what the receiver could not take is lost.
  echo "$(sed -n 's/^BW average: \([0-9.]*\) MB\/sec/\1/p' "$out")" \
    "$(sed -n 's/.*lost (\([0-9.]*\)%).*/\1/p' "$out")"
  rm -f "$out"
}

median() { sort -g | awk '{ v[NR] = $1 } END { if (NR) print v[int((NR + 1) / 2)] }'; }

echo "| operation (64 KiB, 1 QP, MTU $mtu) | uroce (MB/s) | raw UDP bulk (MB/s) | UDP datagrams lost | uroce / UDP |"
echo "| --- | ---: | ---: | ---: | ---: |"
for program in ib_write_bw ib_read_bw; do
  u_all='' b_all=''
  # Interleaved, so a burst of load from elsewhere on the machine hits both sides alike.
  for _ in $(seq "$repeats"); do
    u_all+="$(perftest_bw $program)"$'\n'
    b_all+="$(udp_bw)"$'\n'
  done
  u=$(grep . <<<"$u_all" | median || true)
  b=$(awk 'NF { print $1 }' <<<"$b_all" | median || true)
  loss=$(awk 'NF { print $2 }' <<<"$b_all" | median || true)
  ratio=$(awk -v u="$u" -v b="$b" 'BEGIN { if (b > 0 && u != "") printf "%.2f", u / b; else print "n/a" }')
  echo "| \`$program\` | ${u:-failed} | $b | ${loss}% | $ratio |"
done
