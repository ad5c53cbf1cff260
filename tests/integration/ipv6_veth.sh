#!/usr/bin/env bash
# RoCEv2 over IPv6 on a wire: two network namespaces joined by a veth pair, fd00:INDEX::1 and
# fd00:INDEX::2 (nodad: usable at once), a uroce device on each IPv6 address, the unmodified
# ibv_rc_pingpong (data checked, -c) and ibv_ud_pingpong between them, captured on the server's
# veth end. The capture must decode as RoCE in tshark (IPv6, UDP 4791) and every packet's ICRC
# must match an independent recomputation (ipv6_capture.py: zlib over the IPv6 pseudo-packet).
#
#   ipv6_veth.sh UROCE_RUN INDEX TCP_PORT
# The pingpongs exchange their QP numbers over TCP, and their servers listen on 0.0.0.0 only:
# the veth ends also carry 10.97.INDEX.1/2 for that exchange (the RoCE traffic is IPv6: each
# device is on its IPv6 address). Needs root (namespaces, capture); skips otherwise.
set -uo pipefail
run=$1 idx=$2 port=$3
here=$(cd "$(dirname "$0")" && pwd)
if [[ $(id -u) -ne 0 ]]; then
  echo "SKIP: network namespaces need root"
  exit 77
fi
nsa=uroce-6a$idx nsb=uroce-6b$idx
a6=fd00:$idx::1 b6=fd00:$idx::2 a4=10.97.$idx.1 b4=10.97.$idx.2
dir=$(mktemp -d /tmp/uroce-ipv6.XXXXXX)
. "$here/ipv6_lib.sh"
trap cleanup EXIT
set -e
veth_pair v6a$idx v6b$idx
ip -n "$nsa" -6 addr add "$a6/64" dev v6a$idx nodad
ip -n "$nsb" -6 addr add "$b6/64" dev v6b$idx nodad
ip -n "$nsa" addr add "$a4/24" dev v6a$idx
ip -n "$nsb" addr add "$b4/24" dev v6b$idx
set +e
capture_start v6a$idx "$dir/veth.pcapng"

fail=
export SERVER_NETNS=$nsa CLIENT_NETNS=$nsb TCP_HOST=$a4
export SERVER_DEVICES=uroce0=$a6 CLIENT_DEVICES=uroce0=$b6
# Both pingpongs: RC with data checked and MTU 1024 (4096-byte messages in three packets), UD.
PROGRAM=/usr/bin/ibv_rc_pingpong "$here/pingpong.sh" "$run" "$a6" "$b6" "$port" -c -m 1024 \
  -s 4096 -n 200 || fail="ibv_rc_pingpong failed"
PROGRAM=/usr/bin/ibv_ud_pingpong "$here/pingpong.sh" "$run" "$a6" "$b6" $((port + 1)) -c \
  -s 1024 -n 200 || fail="${fail:-ibv_ud_pingpong failed}"
capture_stop
pcap=$dir/veth.pcapng
ipv6_roce_check "$pcap"
# tshark reads pcapng; ipv6_capture.py reads pcap: convert.
editcap -F pcap "$pcap" "$dir/veth.pcap" 2>/dev/null || fail="${fail:-editcap failed}"
python3 "$here/ipv6_capture.py" "$dir/veth.pcap" "$a6" "$b6" || fail="${fail:-ICRC check failed}"

if [[ -n $fail ]]; then
  echo "FAIL: $fail"
  exit 1
fi
echo "PASS"
