#!/usr/bin/env bash
# rdma_cm over IPv6 link-local addresses on a wire: two network namespaces joined by a veth pair
# whose ends have the same name in each namespace (so that "fe80::…%IFNAME" names the link on
# both sides), fe80::INDEX:1 and fe80::INDEX:2 (nodad), a uroce device on each link-local
# address (UROCE_DEVICES=uroce0=fe80::…%IFNAME), and the unmodified rping between them through
# rdma_cm.sh (data checked, -V). The capture on the server's end must decode as RoCE, the REQ's
# private data as the IP CM header with IP version 6 and the two link-local addresses (tshark
# knows Annex A11's header).
#
#   rdma_cm_ipv6_veth.sh UROCE_RUN INDEX PORT
# Needs root (namespaces, capture) and tshark; skips otherwise.
set -uo pipefail
run=$1 idx=$2 port=$3
here=$(cd "$(dirname "$0")" && pwd)
if [[ $(id -u) -ne 0 ]]; then
  echo "SKIP: network namespaces need root"
  exit 77
fi
if ! command -v tshark >/dev/null || ! command -v dumpcap >/dev/null; then
  echo "SKIP: no tshark/dumpcap"
  exit 77
fi
nsa=uroce-c6a$idx nsb=uroce-c6b$idx if=cm6l$idx
a6=fe80::$idx:1 b6=fe80::$idx:2
dir=$(mktemp -d /tmp/uroce-cm6.XXXXXX)
. "$here/ipv6_lib.sh"
trap cleanup EXIT
set -e
veth_pair "$if" "$if"
ip -n "$nsa" -6 addr add "$a6/64" dev "$if" nodad
ip -n "$nsb" -6 addr add "$b6/64" dev "$if" nodad
set +e
capture_start "$if" "$dir/cm.pcapng"

fail=
export SERVER_NETNS=$nsa CLIENT_NETNS=$nsb
export SERVER_DEVICES="uroce0=$a6%$if" CLIENT_DEVICES="uroce0=$b6%$if"
"$here/rdma_cm.sh" "$run" "$a6%$if" "$b6%$if" "$port" rping -C 10 || fail="rping failed"
capture_stop
pcap=$dir/cm.pcapng
ipv6_roce_check "$pcap"
# The REQ's IP CM header, as tshark decodes it.
req=$(tshark -r "$pcap" -Y 'infiniband.cm.req' -V 2>/dev/null)
echo "REQ's IP CM header:"
grep -E "IP CM (IP Version|Source Port|Source IP|Destination IP)" <<<"$req" | sed 's/^ */  /'
grep -q "IP CM IP Version: 0x6" <<<"$req" || fail="${fail:-the IP CM header of the REQ is not IP version 6}"
grep -q "IP CM Source IP: $b6\$" <<<"$req" || fail="${fail:-the source in the IP CM header is not $b6}"
grep -q "IP CM Destination IP: $a6\$" <<<"$req" || fail="${fail:-the destination in the IP CM header is not $a6}"

if [[ -n $fail ]]; then
  echo "FAIL: $fail"
  exit 1
fi
echo "PASS"
