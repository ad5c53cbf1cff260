#!/usr/bin/env bash
# Congestion control on the real engine: unmodified `ib_write_bw -q 2` (two RC QPs) between two
# processes on loopback, the server behind fault injection's marking switch queue
# (UROCE_FAULTS=rx.queue=…, docs/configuration.md), once per UROCE_CC spec. Prints a Markdown
# table: bandwidth, where the modelled queue sat as its arrivals found it (below Kmin, on the RED
# ramp, above Kmax), marks, queue drops, CNPs sent and handled, packets resent, and how fairly
# the two QPs shared the bottleneck: a timed run (`-D SECONDS`, default 8), so each QP sends what
# the transport lets it, and each QP's packets sent (from `uroce stats --json`, sampled during
# the run; published only while congestion control is on) with Jain's index of the two. docs/congestion-control.md ("Measured") has the
# figures and how to read them. A second table does the same for the unreliable services:
# `ib_send_bw -c UD` and `-c UC` (one QP, 4 KiB messages), with congestion control off and with
# the last CC spec, where the sender's and the receiver's bandwidth show what the queue dropped.
#   bench/cc_loopback.sh [BUILD_DIR] [SECONDS] [CC…]
#     QUEUE=rx.queue=…   the switch queue (default: 500 Mb/s, 512 KiB, Kmin 5 KiB, Kmax 100 KiB,
#                        Pmax 0.1, marking at dequeue)
# CC defaults to: none, dcqcn (cx), dcqcn,preset=paper, and the paper's preset with its
# increase steps scaled down to this 500 Mb/s bottleneck.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
secs=${2:-8}
shift $(($# < 2 ? $# : 2))
specs=("$@")
((${#specs[@]})) || specs=(none dcqcn dcqcn,preset=paper
  dcqcn,preset=paper,rpg_ai_rate=1,rpg_hai_rate=5,rpg_time_reset=300)
queue=${QUEUE:-rx.queue=500mbit:buffer=512k:kmin=5k:kmax=100k:pmax=0.1:mark=dequeue}
run=$build/bin/uroce-run
stats=$build/bin/uroce
srv=127.0.0.1 cli=127.0.0.2
command -v ib_write_bw >/dev/null || { echo "cc_loopback.sh: needs perftest's ib_write_bw" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

wait_tcp() { for _ in $(seq 200); do ss -ltnH "sport = :$1" | grep -q . && return; sleep 0.05; done; }
counter() { awk -v k="$1" '$1 == k { print $2 }' "$2" | tail -n 1; }

echo "queue: $queue; ib_write_bw -q 2 -s 65536 -D $secs"
echo
echo "| \`UROCE_CC\` | BW average | queue found: below Kmin / ramp / above Kmax | marked | queue drops | CNPs sent / handled | resent | QP packets sent | Jain |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"
port=$((19100 + RANDOM % 400))
for cc in "${specs[@]}"; do
  port=$((port + 1))
  UROCE_STATS=1 UROCE_CC=$cc UROCE_FAULTS=$queue UROCE_DEVICES=uroce0=$srv timeout 300 \
    "$run" ib_write_bw -d uroce0 -q 2 -s 65536 -D "$secs" -p $port >"$tmp/srv" 2>&1 &
  spid=$!
  wait_tcp $port
  UROCE_STATS=1 UROCE_CC=$cc UROCE_DEVICES=uroce0=$cli timeout 300 \
    "$run" ib_write_bw -d uroce0 -q 2 -s 65536 -D "$secs" -p $port $srv >"$tmp/cli" 2>&1 &
  cpid=$!
  # The QPs' slots vanish with the QPs: keep the last sample that had both (at most 0.2 s before
  # the end of a run of many seconds).
  : >"$tmp/last"
  while kill -0 $cpid 2>/dev/null; do
    if "$stats" stats --json >"$tmp/now" 2>/dev/null &&
      python3 -c 'import json,sys; d=[d for d in json.load(open(sys.argv[1]))["devices"] if d["address"] == sys.argv[2]]; sys.exit(0 if d and len(d[0]["cc_qps"]) >= 2 else 1)' "$tmp/now" $cli 2>/dev/null; then
      cp "$tmp/now" "$tmp/last"
    fi
    sleep 0.2
  done
  wait $cpid || true
  wait $spid || true
  bw=$(grep -A1 '#bytes' "$tmp/cli" | tail -n 1 | awk '{ print $4 }')
  share=$(python3 - "$tmp/last" $cli <<'EOF'
import json, sys
try:
    qps = [d for d in json.load(open(sys.argv[1]))["devices"] if d["address"] == sys.argv[2]][0]["cc_qps"]
except Exception:
    print("| – | – |"); sys.exit(0)
x = [q["sent_pkts"] for q in qps]
jain = sum(x) ** 2 / (len(x) * sum(v * v for v in x)) if any(x) else 0
print("| " + " / ".join(str(v) for v in x) + f" | {jain:.3f} |")
EOF
)
  s=$tmp/srv c=$tmp/cli
  echo "| \`$cc\` | ${bw:-?} MB/s | $(counter fault_rx_queue_below_kmin $s) / $(counter fault_rx_queue_in_ramp $s) / $(counter fault_rx_queue_above_kmax $s) | $(counter fault_rx_queue_marked $s) | $(counter fault_rx_queue_drops $s) | $(counter np_cnp_sent $s) / $(counter rp_cnp_handled $c) | $(counter retransmitted_pkts $c) $share"
done

# UD and UC: nothing retransmits, so what the queue drops is simply lost — the receiver's
# bandwidth against the sender's says how much.
echo
echo "| service | \`UROCE_CC\` | sender BW | receiver BW | queue found: below Kmin / ramp / above Kmax | queue drops | CNPs sent / handled |"
echo "| --- | --- | --- | --- | --- | --- | --- |"
for conn in UD UC; do
  for cc in none "${specs[-1]}"; do
    port=$((port + 1))
    UROCE_STATS=1 UROCE_CC=$cc UROCE_FAULTS=$queue UROCE_DEVICES=uroce0=$srv timeout 300 \
      "$run" ib_send_bw -d uroce0 -c $conn -s 4096 -D "$secs" -p $port >"$tmp/srv" 2>&1 &
    spid=$!
    wait_tcp $port
    UROCE_STATS=1 UROCE_CC=$cc UROCE_DEVICES=uroce0=$cli timeout 300 \
      "$run" ib_send_bw -d uroce0 -c $conn -s 4096 -D "$secs" -p $port $srv >"$tmp/cli" 2>&1 || true
    wait $spid || true
    bw() { grep -A1 '#bytes' "$1" | tail -n 1 | awk '{ print $4 }'; }
    s=$tmp/srv c=$tmp/cli
    echo "| $conn | \`$cc\` | $(bw $c) MB/s | $(bw $s) MB/s | $(counter fault_rx_queue_below_kmin $s) / $(counter fault_rx_queue_in_ramp $s) / $(counter fault_rx_queue_above_kmax $s) | $(counter fault_rx_queue_drops $s) | $(counter np_cnp_sent $s) / $(counter rp_cnp_handled $c) |"
  done
done
