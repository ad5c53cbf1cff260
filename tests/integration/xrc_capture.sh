#!/usr/bin/env bash
# Captures an unmodified ibv_xsrq_pingpong run over uroce (UROCE_PCAP, no privilege needed) and
# checks what an XRC packet must be: tshark names every opcode as XRC and finds nothing
# malformed; xrc_capture.py recomputes every ICRC with zlib's CRC-32 and checks that each request
# carries an XRCETH naming the SRQ number its receiver printed, each response none.
# (Wireshark 4.0 names XRC opcodes but does not parse XRCETH: "Unknown Header Sequence".)
#   xrc_capture.sh UROCE_RUN SERVER_IP CLIENT_IP TCP_PORT
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/integration/lib.sh
source "$here/lib.sh"
run=$1 srv_ip=$2 cli_ip=$3 port=$4
program=/usr/bin/ibv_xsrq_pingpong
server_cmd=(env "UROCE_PCAP=$log/server.pcap" "$run" "$program" -d uroce0 -g 0 -p "$port"
  -m 1024 -s 4096 -n 20)
client_cmd=("$run" "$program" -d uroce0 -g 0 -p "$port" -m 1024 -s 4096 -n 20 "$srv_ip")
run_pair "$srv_ip" "$cli_ip" "$port"
fail=
((srv_rc == 0 && cli_rc == 0)) || fail="server exit $srv_rc, client exit $cli_rc"
# Each side prints its own SRQ number: "local: LID …, SRQN 0000xx, GID …".
srqn() { sed -n 's/.*local:.*SRQN \([0-9a-f]*\),.*/\1/p' "$log/$1.out" | head -1; }
srv_srqn=$(srqn server) cli_srqn=$(srqn client)
[[ -n $srv_srqn && -n $cli_srqn ]] || fail="${fail:-no SRQ numbers printed}"
pcap=$log/server.pcap
if [[ -z $fail ]]; then
  total=$(tshark -r "$pcap" 2>/dev/null | wc -l)
  xrc=$(tshark -r "$pcap" -T fields -e infiniband.bth.opcode 2>/dev/null | awk '$1 >= 160 && $1 < 192' | wc -l)
  malformed=$(tshark -r "$pcap" -Y _ws.malformed 2>/dev/null | wc -l)
  named=$(tshark -r "$pcap" -V 2>/dev/null | grep -c "Opcode: Extended Reliable Connection (XRC)")
  echo "tshark: packets $total, XRC opcodes $xrc, named XRC $named, malformed $malformed"
  tshark -r "$pcap" -T fields -e infiniband.bth.opcode 2>/dev/null | sort | uniq -c
  ((total > 0 && xrc == total && named == total)) || fail="not every packet is XRC to tshark"
  ((malformed == 0)) || fail="${fail:-$malformed malformed packets}"
  python3 "$here/xrc_capture.py" "$pcap" "$srv_ip" "$srv_srqn" "$cli_ip" "$cli_srqn" ||
    fail="${fail:-xrc_capture.py found bad packets}"
fi
verdict "$fail"
