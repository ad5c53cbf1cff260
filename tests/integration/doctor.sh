#!/usr/bin/env bash
# `uroce doctor` against a path with exactly one thing broken, asserting that doctor names it.
# Two network namespaces joined by a veth pair (MTU 9000 both ends): doctor runs in the first
# with a device on 10.93.INDEX.1, the peer in the second on 10.93.INDEX.2. Needs root (skips
# with 77 otherwise); the rules are a tc BPF program (doctor_tc.c, built here with clang: this
# kernel has no act_gact or act_pedit, the machine no iptables or nft).
#
#   doctor.sh UROCE UROCE_RUN INDEX MODE
# MODE:
#   udp4791  nothing listens at the peer: ✗ (ICMP port unreachable); an rdma_cm listener there
#            (rping -s): ✓ SIDR REP, every path check passes and doctor exits 0; a tc rule that
#            drops UDP 4791 at the peer's veth: the probe goes unanswered (!, inconclusive)
#   mtu      the peer's end of the veth at MTU 1500: ✗ path MTU (echo requests of 2112 bytes
#            vanish; the device, on MTU 9000, would use 4096), exit 1
#   dscp     a tc rule on the way rewrites DSCP to 0: ✗ DSCP kept, exit 1
#   ecn      a tc rule on the way clears ECN: ✗ ECN kept, exit 1
#   loss     an RC pingpong whose client injects 5% loss (UROCE_FAULTS): ✗ loss, with
#            retransmitted_pkts and the injected drops named
#   dpdk     a DPDK device (net_af_packet on the first veth, 10.93.INDEX.3) held open by a
#            waiting ibv_rc_pingpong: doctor reads the NIC figures its process publishes (link
#            speed and duplex, the NIC's errors, its flow-control setting — af_packet reports
#            10 Gb/s full duplex and no setting)
#   ipv6     the device on fd00:93:INDEX::1, the peer on fd00:93:INDEX::2 (nodad): nothing
#            listens, ✗ (ICMPv6 port unreachable); an rdma_cm listener on the IPv6 address: every
#            path check passes (ICMPv6 echo, the SIDR probe over UDP/IPv6, MTU 4096 in 4180-byte
#            packets); the peer by a name with A and AAAA records (the netns's own /etc/hosts):
#            the IPv6 address is probed; an IPv4 peer from the IPv6 device: ✗ address family
#            (and with a tc rule dropping UDP 4791 at the peer: unanswered, inconclusive)
#   ipv6mtu  the same addresses, the peer's end of the veth at MTU 1500: ✗ path MTU (2132-byte
#            echo requests vanish), exit 1
#   ipv6dscp, ipv6ecn  the same addresses, a tc rule rewriting the Traffic Class's DSCP to 0 or
#            clearing its ECN field: ✗ DSCP kept / ✗ ECN kept, exit 1
set -uo pipefail
uroce=$1 run=$2 idx=$3 mode=$4
skip() {
  echo "SKIP: $*"
  exit 77
}
[[ $(id -u) -eq 0 ]] || skip "needs root for network namespaces"
command -v ip >/dev/null || skip "needs iproute2"

ns_a=uroce-da$idx ns_b=uroce-db$idx veth_a=uda$idx veth_b=udb$idx
ip_a=10.93.$idx.1 ip_b=10.93.$idx.2 dev=dr$idx
ip6_a=fd00:93:$idx::1 ip6_b=fd00:93:$idx::2
dev_ip=$ip_a  # the address of doctor's device (the ipv6 modes: ip6_a)
work=$(mktemp -d /tmp/uroce-doctor.XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  wait 2>/dev/null
  ip netns del "$ns_a" 2>/dev/null
  ip netns del "$ns_b" 2>/dev/null
  rm -rf "$work" "/etc/netns/$ns_a"
}
trap cleanup EXIT
ip netns del "$ns_a" 2>/dev/null
ip netns del "$ns_b" 2>/dev/null
if ! ip netns add "$ns_a" || ! ip netns add "$ns_b"; then skip "cannot create network namespaces"; fi
ip link add "$veth_a" netns "$ns_a" type veth peer name "$veth_b" netns "$ns_b" ||
  skip "cannot create a veth pair"
ip -n "$ns_a" addr add "$ip_a/24" dev "$veth_a"
ip -n "$ns_b" addr add "$ip_b/24" dev "$veth_b"
if [[ $mode == ipv6* ]]; then  # nodad: usable at once
  ip -n "$ns_a" -6 addr add "$ip6_a/64" dev "$veth_a" nodad
  ip -n "$ns_b" -6 addr add "$ip6_b/64" dev "$veth_b" nodad
  dev_ip=$ip6_a
fi
for ns in "$ns_a" "$ns_b"; do ip -n "$ns" link set lo up; done
ip -n "$ns_a" link set "$veth_a" mtu 9000 up
ip -n "$ns_b" link set "$veth_b" mtu 9000 up
for _ in $(seq 100); do  # the carrier comes through linkwatch, up to a second after both are up
  ip -n "$ns_a" link show "$veth_a" | grep -q LOWER_UP &&
    ip -n "$ns_b" link show "$veth_b" | grep -q LOWER_UP && break
  sleep 0.05
done

# tc_rule NS VETH DIRECTION CFLAGS…: attach doctor_tc.c built with those -D flags.
tc_rule() {
  local ns=$1 veth=$2 dir=$3
  shift 3
  command -v clang >/dev/null || skip "needs clang to build the tc BPF rule"
  clang -O2 -target bpf -I"/usr/include/$(gcc -print-multiarch 2>/dev/null)" "$@" \
    -c "$(dirname "$0")/doctor_tc.c" -o "$work/rule.o" || skip "clang cannot build BPF here"
  tc -n "$ns" qdisc add dev "$veth" clsact 2>/dev/null
  tc -n "$ns" filter add dev "$veth" "$dir" bpf da obj "$work/rule.o" sec tc ||
    skip "cannot attach a tc BPF classifier"
}

fail=
doctor() {  # doctor ARGS…: runs doctor in ns_a for device $dev; output in $out, status in $rc
  out=$(UROCE_DEVICES=$dev=$dev_ip ip netns exec "$ns_a" "$uroce" doctor -d "$dev" --wait-ms 300 \
    "$@" 2>&1)
  rc=$?
  echo "--- uroce doctor $* (exit $rc)"
  echo "$out"
}
expect() {  # expect TEXT…: each TEXT must be a line (fixed string) of the last doctor output
  for want in "$@"; do
    grep -qF -- "$want" <<<"$out" || {
      echo "FAIL: doctor did not print: $want"
      fail=1
    }
  done
}
expect_rc() {
  [[ $rc -eq $1 ]] || {
    echo "FAIL: doctor exited $rc, not $1"
    fail=1
  }
}

# An rdma_cm listener at the peer (its CM answers SIDR on QP1), on ADDRESS (default ip_b);
# returns once it listens.
start_listener() {
  local at=${1:-$ip_b}
  UROCE_DEVICES=$dev=$at UROCE_LOG=info ip netns exec "$ns_b" timeout 60 "$run" \
    rping -s -a "$at" -p 7471 >"$work/peer.out" 2>&1 &
  pids+=($!)
  for _ in $(seq 200); do
    grep -q "rdma_cm: listening" "$work/peer.out" && return
    sleep 0.05
  done
  cat "$work/peer.out"
  echo "FAIL: the peer's rping did not start listening"
  exit 1
}

case $mode in
  udp4791)
    doctor "$ip_b"
    expect "✗ UDP 4791: nothing listens on $ip_b:4791: port unreachable from $ip_b"
    expect_rc 1
    start_listener
    doctor "$ip_b"
    expect "✓ UDP 4791: a RoCE CM at $ip_b answered the SIDR REQ on QP1 (SIDR REP: service ID not supported)" \
      "✓ reachable: $ip_b answers ICMP echo (5/5)" \
      "✓ path MTU: echo requests of 4160 bytes with DF come back" \
      "✓ DSCP kept" "✓ ECN kept" "✓ MTU: $veth_a MTU 9000: the device reports active MTU 4096" \
      "✓ link speed: $veth_a: 10 Gb/s, full duplex" "✓ NIC errors: $veth_a: no receive or transmit errors" \
      "– PAUSE / PFC on the NIC: $veth_a: the driver does not report its flow-control setting"
    expect_rc 0
    # The same for scripts: one JSON document, every check with its id and status.
    doctor --json "$ip_b" >/dev/null
    python3 -c 'import json,sys; r=json.loads(sys.argv[1]); c={k["id"]:k["status"] for s in r["sections"] for k in s["checks"]}; assert r["ok"] and c["path.udp4791"]=="pass" and c["path.mtu"]=="pass", c' "$out" || {
      echo "FAIL: doctor --json"
      fail=1
    }
    tc_rule "$ns_b" "$veth_b" ingress -DDROP_UDP_DPORT=4791
    doctor "$ip_b"
    expect "! UDP 4791: no answer to 3 SIDR REQs to $ip_b:4791 (inconclusive): a filter drops UDP 4791"
    ;;
  mtu)
    ip -n "$ns_b" link set "$veth_b" mtu 1500
    doctor "$ip_b"
    expect "✗ path MTU: the largest RoCE packet that fits is of MTU 1024: 2112-byte echo requests with DF get" \
      "but the device reports active MTU 4096 (interface MTU 9000)"
    expect_rc 1
    ;;
  dscp)
    tc_rule "$ns_a" "$veth_a" egress -DTOS_MASK=0xfc -DTOS_SET=0
    doctor "$ip_b"
    expect "✗ DSCP kept: an echo request sent with DSCP 26 came back with DSCP 0" "✓ ECN kept"
    expect_rc 1
    ;;
  ecn)
    tc_rule "$ns_a" "$veth_a" egress -DTOS_MASK=0x03 -DTOS_SET=0
    doctor "$ip_b"
    expect "✗ ECN kept: an echo request sent ECT(0) came back Not-ECT: the path clears ECN" \
      "✓ DSCP kept"
    expect_rc 1
    ;;
  loss)
    # A long RC pingpong, the client (in ns_a, device $dev) losing 5% of its packets on purpose:
    # doctor reads its published counters while it runs.
    UROCE_DEVICES=$dev=$ip_b ip netns exec "$ns_b" timeout 60 "$run" \
      ibv_rc_pingpong -d "$dev" -g 0 -p 7472 -n 1000000 >"$work/server.out" 2>&1 &
    pids+=($!)
    for _ in $(seq 200); do
      ip netns exec "$ns_b" ss -ltnH "sport = :7472" | grep -q . && break
      sleep 0.05
    done
    UROCE_DEVICES=$dev=$ip_a UROCE_FAULTS=loss=0.05,seed=3 ip netns exec "$ns_a" timeout 60 \
      "$run" ibv_rc_pingpong -d "$dev" -g 0 -p 7472 -n 1000000 "$ip_b" >"$work/client.out" 2>&1 &
    pids+=($!)
    # Wait for the condition, not for a time: the QP totals are published every 100 ms.
    for _ in $(seq 300); do
      doctor >/dev/null
      grep -qF "✗ loss: packets are lost between the two devices" <<<"$out" && break
      sleep 0.1
    done
    doctor
    expect "✗ loss: packets are lost between the two devices: retransmitted_pkts" \
      "UROCE_FAULTS dropped" "fix: the loss is injected: unset UROCE_FAULTS"
    expect_rc 1
    ;;
  dpdk)
    # At the port's default MTU (DPDK 22.11's af_packet carries no jumbo frames).
    spec="$dev=dpdk(dev=net_af_packet0,iface=$veth_a;ip=10.93.$idx.3/24;"
    spec+="mac=02:00:5d:00:$(printf %02x "$idx"):03)"
    UROCE_DEVICES=$spec ip netns exec "$ns_a" timeout 100 "$run" ibv_rc_pingpong -d "$dev" -g 0 \
      -p 7473 >"$work/holder.out" 2>&1 &
    pids+=($!)
    # The device is open and its counters published (ibv_rc_pingpong modifies its QP first)
    # once it listens; DPDK's start-up takes seconds on a loaded machine: up to a minute.
    for _ in $(seq 1200); do
      ip netns exec "$ns_a" ss -ltnH "sport = :7473" | grep -q . && break
      sleep 0.05
    done
    ip netns exec "$ns_a" ss -ltnH "sport = :7473" | grep -q . ||
      { cat "$work/holder.out"; echo "FAIL: the DPDK device's ibv_rc_pingpong never listened"; exit 1; }
    out=$(UROCE_DEVICES=$spec ip netns exec "$ns_a" "$uroce" doctor -d "$dev" 2>&1)
    rc=$?
    echo "--- uroce doctor (DPDK, exit $rc)"
    echo "$out"
    expect "✓ link speed: the DPDK port net_af_packet0 as process" "reads it: 10 Gb/s, full duplex" \
      "✓ NIC errors: the DPDK port net_af_packet0" "no receive or transmit errors" \
      "– PAUSE / PFC on the NIC: the DPDK port net_af_packet0" \
      "the driver does not report its flow-control setting"
    [[ -n $fail ]] && cat "$work/holder.out"
    ;;
  ipv6)
    doctor "$ip6_b"
    expect "✗ UDP 4791: nothing listens on [$ip6_b]:4791: port unreachable from $ip6_b"
    expect_rc 1
    start_listener "$ip6_b"
    doctor "$ip6_b"
    expect "Path from $dev ($ip6_a) to $ip6_b" \
      "✓ reachable: $ip6_b answers ICMPv6 echo (5/5)" \
      "✓ UDP 4791: a RoCE CM at $ip6_b answered the SIDR REQ on QP1 (SIDR REP: service ID not supported)" \
      "✓ path MTU: echo requests of 4180 bytes unfragmented come back" \
      "✓ DSCP kept" "✓ ECN kept" \
      "✓ MTU: $veth_a MTU 9000: the device reports active MTU 4096 (RoCE packets of up to 4180 bytes over IPv6)"
    expect_rc 0
    # A name with both families (ip netns exec mounts /etc/netns/NS/hosts on /etc/hosts): the
    # IPv6 device probes its AAAA address.
    mkdir -p "/etc/netns/$ns_a"
    printf '%s peer%s\n%s peer%s\n%s peer4only%s\n' "$ip_b" "$idx" "$ip6_b" "$idx" "$ip_b" "$idx" \
      >"/etc/netns/$ns_a/hosts"
    doctor "peer$idx"
    expect "Path from $dev ($ip6_a) to $ip6_b" "✓ UDP 4791: a RoCE CM at $ip6_b answered"
    expect_rc 0
    # The other family: a clear failure, no probe from the wrong address.
    doctor "$ip_b"
    expect "✗ address family: $dev is on IPv6 ($ip6_a) and $ip_b is an IPv4 address"
    expect_rc 1
    doctor "peer4only$idx"
    expect "✗ address family: $dev is on IPv6 ($ip6_a) and peer4only$idx resolves only to $ip_b, an IPv4 address"
    expect_rc 1
    tc_rule "$ns_b" "$veth_b" ingress -DDROP_UDP_DPORT=4791
    doctor "$ip6_b"
    expect "! UDP 4791: no answer to 3 SIDR REQs to [$ip6_b]:4791 (inconclusive): a filter drops UDP 4791"
    ;;
  ipv6dscp)
    tc_rule "$ns_a" "$veth_a" egress -DTOS_MASK=0xfc -DTOS_SET=0
    doctor "$ip6_b"
    expect "✗ DSCP kept: an echo request sent with DSCP 26 came back with DSCP 0" "✓ ECN kept"
    expect_rc 1
    ;;
  ipv6ecn)
    tc_rule "$ns_a" "$veth_a" egress -DTOS_MASK=0x03 -DTOS_SET=0
    doctor "$ip6_b"
    expect "✗ ECN kept: an echo request sent ECT(0) came back Not-ECT: the path clears ECN" \
      "✓ DSCP kept"
    expect_rc 1
    ;;
  ipv6mtu)
    ip -n "$ns_b" link set "$veth_b" mtu 1500
    doctor "$ip6_b"
    expect "✗ path MTU: the largest RoCE packet that fits is of MTU 1024: 2132-byte echo requests unfragmented get" \
      "but the device reports active MTU 4096 (interface MTU 9000)"
    expect_rc 1
    ;;
  *)
    echo "unknown mode $mode"
    exit 2
    ;;
esac
if [[ -n $fail ]]; then exit 1; fi
echo PASS
