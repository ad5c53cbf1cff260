#!/usr/bin/env bash
# uroce's Wireshark/tshark dissector for its RoCEv2 extensions (src/tools/wireshark/uroce.lua,
# docs/wire-format.md) on uroce's own captures (UROCE_PCAP): a 2-byte ibv_rc_pingpong, whose
# replies carry the ACK of the other side's message (ACK riders), and a 64 KiB WRITE stream at
# injected loss, whose responder SACKs (selective repeat). Checks that every packet shows the
# marks both ends send, that each rider names the PSN of the other side's message before it, and
# that the SACKs and placeable WRITEs are found.
#   dissector.sh UROCE_RUN UROCE_PERF SERVER_IP CLIENT_IP TCP_PORT
set -uo pipefail
run=$1 perf=$2 srv=$3 cli=$4 port=$5
here=$(cd "$(dirname "$0")" && pwd)
lua=$here/../../src/tools/wireshark/uroce.lua
command -v tshark >/dev/null || {
  echo "SKIP: tshark is not installed"
  exit 77
}
dir=$(mktemp -d /tmp/uroce-dissector.XXXXXX)
trap 'rm -rf "$dir"' EXIT
export UROCE_LOG=error
fail=
failing() { [[ -n $fail ]] || fail=$1; }
# Wireshark's RPC-over-RDMA heuristic takes a 2-byte SEND for a malformed RPC; it is not RoCE's.
ts() { tshark --disable-protocol rpcordma -X lua_script:"$lua" "$@" 2>/dev/null; }

pair() {  # NAME FAULTS server command… -- client command…
  local name=$1 faults=$2
  shift 2
  local srv_cmd=() cli_cmd=()
  while [[ $1 != -- ]]; do srv_cmd+=("$1"); shift; done
  shift
  cli_cmd=("$@")
  UROCE_FAULTS=$faults UROCE_PCAP=$dir/$name.srv.pcap UROCE_DEVICES=uroce0=$srv \
    timeout 60 "$run" "${srv_cmd[@]}" >"$dir/$name.srv.out" 2>&1 &
  local pid=$!
  for _ in $(seq 200); do
    ss -ltnH "sport = :$port" | grep -q . && break
    sleep 0.05
  done
  UROCE_FAULTS=$faults UROCE_PCAP=$dir/$name.cli.pcap UROCE_DEVICES=uroce0=$cli \
    timeout 60 "$run" "${cli_cmd[@]}" "$srv" >"$dir/$name.cli.out" 2>&1 || failing "$name client failed"
  wait "$pid" || failing "$name server failed"
  port=$((port + 1))
}

pair pp "" ibv_rc_pingpong -d uroce0 -g 0 -s 2 -n 50 -p "$port" -- \
  ibv_rc_pingpong -d uroce0 -g 0 -s 2 -n 50 -p "$port"
pcap=$dir/pp.srv.pcap
total=$(ts -r "$pcap" | wc -l)
marked=$(ts -r "$pcap" -Y "uroce.sr == 1 && uroce.rides == 1" | wc -l)
riders=$(ts -r "$pcap" -Y "uroce.rider == 1" | wc -l)
malformed=$(ts -r "$pcap" -Y _ws.malformed | wc -l)
echo "pingpong: $total packets, $marked with both marks, $riders with an ACK rider," \
  "$malformed malformed"
((total >= 100)) || failing "pingpong: only $total packets captured"
((marked == total)) || failing "pingpong: $((total - marked)) packets without the SR and rider marks"
# How many ACKs ride depends on who received each message (an ACK the engine thread sends at
# once has nothing to ride on; one the polling program's own pass holds rides on its reply): on an
# idle machine all but the first and last few, on a loaded one fewer. Some must.
((riders > 0)) || failing "pingpong: no ACK rider in $total packets"
((malformed == 0)) || failing "pingpong: $malformed malformed packets"
# A rider acknowledges the last message the other side sent: the PSN of the packet before it.
ts -r "$pcap" -T fields -e ip.src -e infiniband.bth.psn -e uroce.rider.psn >"$dir/pp.fields"
bad=$(awk -F'\t' '$3 != "" && last[$1 == "'"$srv"'" ? "c" : "s"] != $3 { n++ }
                  { last[$1 == "'"$srv"'" ? "s" : "c"] = $2 } END { print n + 0 }' "$dir/pp.fields")
((bad == 0)) || failing "pingpong: $bad riders do not name the other side's last PSN"

pair w loss=0.02,seed=5 "$perf" write_bw -d uroce0 -p "$port" -s 65536 -n 100 -- \
  "$perf" write_bw -d uroce0 -p "$port" -s 65536 -n 100
sacks=$(ts -r "$dir/w.srv.pcap" -Y uroce.sack | wc -l)
ahead=$(ts -r "$dir/w.srv.pcap" -Y uroce.sack.psn | wc -l)
place=$(ts -r "$dir/w.cli.pcap" -Y "uroce.place == 1" | wc -l)
echo "write_bw at 2 % loss: $sacks SACKs ($ahead naming a PSN received ahead), $place placeable" \
  "WRITEs"
((sacks > 0 && ahead > 0)) || failing "write_bw: no SACK decoded"
((place > 0)) || failing "write_bw: no placeable WRITE decoded"

if [[ -n $fail ]]; then
  echo "FAIL: $fail"
  exit 1
fi
echo PASS
