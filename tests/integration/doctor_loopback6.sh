#!/usr/bin/env bash
# `uroce doctor` for a device on ::1 (no root needed): the path checks over IPv6 on loopback —
# ICMPv6 echo and the path MTU in 4180-byte packets where an ICMPv6 socket can be had (root, or
# net.ipv4.ping_group_range including this group; else they say why they skip), an IPv4 peer
# named from the IPv6 device (✗ address family, exit 1), and the SIDR probe over UDP/IPv6
# answered by an rdma_cm listener on ::1 (rping -s): as root through a raw socket, since the
# listener's process holds [::1]:4791; otherwise doctor says it cannot hear the answer.
# (Without a listener the probe to ::1 from ::1 meets doctor's own socket on [::1]:4791: no
# "port unreachable" on loopback, so that case is the veth test's, doctor.sh ipv6.)
#
#   doctor_loopback6.sh UROCE UROCE_RUN TCP_PORT
set -uo pipefail
uroce=$1 run=$2 port=$3
dev=dl6
work=$(mktemp -d /tmp/uroce-doctor6.XXXXXX)
pid=
cleanup() {
  [[ -n $pid ]] && kill "$pid" 2>/dev/null
  wait 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
if ! ip -6 addr show dev lo 2>/dev/null | grep -q "inet6 ::1/"; then
  echo "SKIP: lo has no ::1"
  exit 77
fi

fail=
doctor() {  # doctor ARGS…: output in $out, status in $rc
  out=$(UROCE_DEVICES=$dev=::1 "$uroce" doctor -d "$dev" --wait-ms 300 "$@" 2>&1)
  rc=$?
  echo "--- uroce doctor $* (exit $rc)"
  echo "$out"
}
expect() {  # expect TEXT…: each TEXT must be in the last doctor output (fixed string)
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

doctor ::1
expect "Path from $dev (::1) to ::1"
if grep -qF "no ICMPv6 socket" <<<"$out"; then
  expect "– reachable: no ICMPv6 socket: needs net.ipv4.ping_group_range" "– path MTU: no ICMPv6 socket"
else
  expect "✓ reachable: ::1 answers ICMPv6 echo (5/5)" \
    "✓ path MTU: echo requests of 4180 bytes unfragmented come back" "✓ DSCP kept" "✓ ECN kept"
fi

# The other family: a clear failure, nothing probed.
doctor 127.0.0.1
expect "✗ address family: $dev is on IPv6 (::1) and 127.0.0.1 is an IPv4 address"
expect_rc 1
grep -qE "^  . reachable:" <<<"$out" && { echo "FAIL: probed an IPv4 peer from an IPv6 device"; fail=1; }

# An rdma_cm listener on ::1: its CM answers the SIDR REQ over UDP/IPv6 (the ICRC with the IPv6
# masking rules: a wrong one would be dropped and counted, rcvd_icrc_err).
UROCE_DEVICES=$dev=::1 UROCE_LOG=info timeout 60 "$run" rping -s -a ::1 -p "$port" \
  >"$work/peer.out" 2>&1 &
pid=$!
for _ in $(seq 200); do
  grep -q "rdma_cm: listening" "$work/peer.out" && break
  sleep 0.05
done
grep -q "rdma_cm: listening" "$work/peer.out" || {
  cat "$work/peer.out"
  echo "FAIL: rping did not start listening on ::1"
  exit 1
}
doctor ::1
if [[ $(id -u) -eq 0 ]]; then
  expect "✓ UDP 4791: a RoCE CM at ::1 answered the SIDR REQ on QP1 (SIDR REP: service ID not supported)" \
    "✓ packet integrity: no corrupted packet (rcvd_icrc_err 0)"
  expect_rc 0
  doctor --json ::1 >/dev/null
  python3 -c 'import json,sys; r=json.loads(sys.argv[1]); c={k["id"]:k["status"] for s in r["sections"] for k in s["checks"]}; assert r["ok"] and c["path.udp4791"]=="pass", c' "$out" || {
    echo "FAIL: doctor --json"
    fail=1
  }
else
  expect "– UDP 4791: cannot hear the answer: [::1]:4791 is taken"
fi

if [[ -n $fail ]]; then
  cat "$work/peer.out"
  exit 1
fi
echo PASS
