#!/usr/bin/env bash
# Captures an ibv_rc_pingpong run over uroce and checks with tshark that every packet decodes as
# RoCEv2 (RRoCE) with no malformed packet, and that the opcodes are the RC SEND and ACK opcodes
# expected of a pingpong exchange.
#   capture.sh dumpcap|uroce UROCE_RUN SERVER_IP CLIENT_IP TCP_PORT
# dumpcap: captures on lo as the kernel sends (needs root).
# uroce:   uroce's own capture (UROCE_PCAP), one file per process; needs no privilege.
set -uo pipefail
mode=$1
shift
here=$(cd "$(dirname "$0")" && pwd)
dir=$(mktemp -d /tmp/uroce-capture.XXXXXX)
trap 'rm -rf "$dir"' EXIT
case $mode in
  dumpcap)
    if [[ $(id -u) -ne 0 ]]; then
      echo "SKIP: capturing on lo needs root"
      exit 77
    fi
    # A capture on lo sees what each send handed to the stack: with UDP GSO (UROCE_GSO's default
    # on loopback) one super-datagram per batch. One datagram per packet is what is on a wire.
    UROCE_GSO=0 CAPTURE=$dir/lo.pcapng "$here/pingpong.sh" "$@" -m 1024 -s 4096 -n 50 || exit 1
    ;;
  uroce)
    # uroce's own capture is one packet per record whatever the batching: here with the default
    # (GSO on loopback).
    UROCE_PCAP=$dir/uroce.%p.pcap "$here/pingpong.sh" "$@" -m 1024 -s 4096 -n 50 || exit 1
    ;;
  *)
    echo "usage: capture.sh dumpcap|uroce UROCE_RUN SERVER_IP CLIENT_IP TCP_PORT" >&2
    exit 2
    ;;
esac

files=("$dir"/*.pcap*)
fail=
expected_files=1
[[ $mode == uroce ]] && expected_files=2  # one per process: UROCE_PCAP's %p is the process id
((${#files[@]} == expected_files)) || fail="expected $expected_files capture files, found ${#files[@]}"
# A device shared by processes measures where the kernel steers each of them with probe datagrams
# to its own address (opcode 0xFF, manufacturer-specific, and the magic "urOP": docs/architecture.md,
# "One device, many processes"). They never leave the host, but a capture on lo sees them; they
# are counted apart and the checks below are about the rest.
probe='infiniband.bth.opcode == 255 && frame contains 75:72:4f:50'
for pcap in "${files[@]}"; do
  probes=$(tshark -r "$pcap" -Y "$probe" 2>/dev/null | wc -l)
  total=$(tshark -r "$pcap" -Y "!($probe)" 2>/dev/null | wc -l)
  roce=$(tshark -r "$pcap" -Y "infiniband && !($probe)" 2>/dev/null | wc -l)
  malformed=$(tshark -r "$pcap" -Y _ws.malformed 2>/dev/null | wc -l)
  echo "$(basename "$pcap"): packets: $total, decoded as RoCE: $roce, malformed: $malformed" \
    "(and $probes host-local probes)"
  echo "opcodes seen (count opcode):"
  tshark -r "$pcap" -Y "!($probe)" -T fields -e infiniband.bth.opcode 2>/dev/null | sort | uniq -c
  # 4096-byte SENDs at MTU 1024 are FIRST (0), MIDDLE (1), LAST (2); ACKs are 17 (0x11).
  opcodes=$(tshark -r "$pcap" -Y "!($probe)" -T fields -e infiniband.bth.opcode 2>/dev/null |
    sort -un | tr '\n' ' ')
  ((total > 0)) || fail="${fail:-no packets captured}"
  ((roce == total)) || fail="${fail:-$((total - roce)) packets did not decode as RoCE}"
  ((malformed == 0)) || fail="${fail:-$malformed malformed packets}"
  for op in 0 1 2 17; do
    [[ " $opcodes " == *" $op "* ]] || fail="${fail:-opcode $op missing}"
  done
  for op in $opcodes; do
    [[ $op =~ ^(0|1|2|4|17)$ ]] || fail="${fail:-unexpected opcode $op}"
  done
  # IPv6 devices (an address with a colon): every record's ICRC recomputed independently of
  # uroce's code, over the IPv6 pseudo-packet (ipv6_capture.py).
  if [[ $2 == *:* ]]; then
    python3 "$here/ipv6_capture.py" "$pcap" "$2" "$3" || fail="${fail:-bad IPv6 records in $pcap}"
  fi
done
if [[ -n $fail ]]; then
  echo "FAIL: $fail"
  exit 1
fi
echo "PASS"
