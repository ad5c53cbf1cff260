# Sourced by the IPv6 wire tests (ipv6_veth.sh, rdma_cm_ipv6_veth.sh): two namespaces joined by a
# veth pair, a capture on one end, and the checks every IPv6 capture must pass. The caller sets
# nsa, nsb and dir (a scratch directory) and traps cleanup.
cap_pid=
cleanup() {
  [[ -n $cap_pid ]] && kill "$cap_pid" 2>/dev/null
  ip netns del "$nsa" 2>/dev/null
  ip netns del "$nsb" 2>/dev/null
  rm -rf "$dir"
}

# veth_pair IF_A IF_B: the namespaces anew, joined by a veth pair (IF_A in nsa, IF_B in nsb), up,
# with no kernel-made link-local address (only the addresses the test adds, nodad).
veth_pair() {
  local ifa=$1 ifb=$2
  ip netns del "$nsa" 2>/dev/null || true
  ip netns del "$nsb" 2>/dev/null || true
  ip netns add "$nsa" && ip netns add "$nsb" &&
    ip link add "$ifa" netns "$nsa" type veth peer name "$ifb" netns "$nsb" || return 1
  local ns if
  for ns in "$nsa" "$nsb"; do
    if=$ifa
    [[ $ns == "$nsb" ]] && if=$ifb
    ip -n "$ns" link set lo up &&
      ip netns exec "$ns" sysctl -qw "net.ipv6.conf.$if.addr_gen_mode=1" &&
      ip -n "$ns" link set "$if" up || return 1
  done
}

# capture_start IF FILE: dumpcap of UDP 4791 on nsa's IF into FILE, once it is writing.
capture_start() {
  ip netns exec "$nsa" dumpcap -q -i "$1" -f "udp port 4791" -w "$2" 2>"$dir/capture.err" &
  cap_pid=$!
  for _ in $(seq 50); do [[ -s $2 ]] && break; sleep 0.1; done
}
capture_stop() {
  sleep 0.3 # the last ACKs
  kill -INT "$cap_pid" 2>/dev/null
  wait "$cap_pid" 2>/dev/null
  cap_pid=
}

# ipv6_roce_check PCAP: every UDP 4791 packet is IPv6 and decodes as RoCE, none is malformed
# (one tshark pass); prints the figures and the opcodes, sets fail on the first failure.
ipv6_roce_check() {
  local fields total roce malformed
  fields=$(tshark -r "$1" -Y "udp.port == 4791" -T fields -E separator=/t -e frame.protocols \
    -e infiniband.bth.opcode -e _ws.malformed 2>/dev/null)
  read -r total roce malformed <<<"$(awk -F'\t' '
      NF { total++ }
      $1 ~ /(^|:)ipv6:/ && $1 ~ /(^|:)infiniband(:|$)/ { roce++ }
      $3 != "" { malformed++ }
      END { printf "%d %d %d\n", total, roce, malformed }' <<<"$fields")"
  echo "capture: RoCEv2 packets: $total, decoded as RoCE over IPv6: $roce, malformed: $malformed"
  echo "opcodes seen (count opcode):"
  cut -f2 <<<"$fields" | grep . | sort -n | uniq -c
  ((total > 0)) || fail="${fail:-no IPv6 RoCE packets captured}"
  ((roce == total)) || fail="${fail:-$((total - roce)) packets were not RoCE over IPv6}"
  ((malformed == 0)) || fail="${fail:-$malformed malformed packets}"
}
