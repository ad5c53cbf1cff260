#!/usr/bin/env bash
# Captures an ibv_rc_pingpong run over uroce on the loopback interface and checks with tshark that
# every packet decodes as RoCEv2 (RRoCE) with no malformed packet, and that the opcodes are the
# RC SEND and ACK opcodes expected of a pingpong exchange.
#   capture.sh UROCE_RUN SERVER_IP CLIENT_IP TCP_PORT
set -uo pipefail
if [[ $(id -u) -ne 0 ]]; then
  echo "SKIP: capturing on lo needs root"
  exit 77
fi
here=$(cd "$(dirname "$0")" && pwd)
pcap=$(mktemp /tmp/uroce-capture.XXXXXX.pcapng)
trap 'rm -f "$pcap"' EXIT
CAPTURE=$pcap "$here/pingpong.sh" "$@" -m 1024 -s 4096 -n 50 || exit 1

total=$(tshark -r "$pcap" 2>/dev/null | wc -l)
roce=$(tshark -r "$pcap" -Y infiniband 2>/dev/null | wc -l)
malformed=$(tshark -r "$pcap" -Y _ws.malformed 2>/dev/null | wc -l)
echo "packets: $total, decoded as RoCE: $roce, malformed: $malformed"
echo "opcodes seen (opcode count):"
tshark -r "$pcap" -T fields -e infiniband.bth.opcode 2>/dev/null | sort | uniq -c
# 4096-byte SENDs at MTU 1024 are FIRST (0), MIDDLE (1), LAST (2); ACKs are 17 (0x11).
opcodes=$(tshark -r "$pcap" -T fields -e infiniband.bth.opcode 2>/dev/null | sort -un | tr '\n' ' ')
fail=
((total > 0)) || fail="no packets captured"
((roce == total)) || fail="${fail:-$((total - roce)) packets did not decode as RoCE}"
((malformed == 0)) || fail="${fail:-$malformed malformed packets}"
for op in 0 1 2 17; do
  [[ " $opcodes " == *" $op "* ]] || fail="${fail:-opcode $op missing}"
done
for op in $opcodes; do
  [[ $op =~ ^(0|1|2|4|17)$ ]] || fail="${fail:-unexpected opcode $op}"
done
if [[ -n $fail ]]; then
  echo "FAIL: $fail"
  exit 1
fi
echo "PASS"
