#!/usr/bin/env bash
# libfabric (Debian's 1.17, libfabric-bin) and its verbs provider over uroce, unmodified. The verbs
# provider ignores loopback interfaces (its MSG endpoints need an interface address that is an RDMA
# device's), so each side runs in a network namespace of its own, joined by a veth pair, with a
# uroce device on its veth address. Namespaces need root: without it the test is skipped (77).
#
#   libfabric.sh UROCE_RUN INDEX PORT MODE [args…]
# MODE: fi_info                  fi_info -p verbs lists FI_EP_MSG on uroce0 (and on a device
#                                bound to the namespace's loopback address, it does not)
#       pingpong PROV EP [args…] fi_pingpong -p PROV -e EP between the namespaces (TCP PORT for
#                                its control connection), data checked (-c)
# Addresses 10.91.INDEX.1 (server) / .2 (client) exist only inside the test's namespaces.
# Environment: TIMEOUT (see lib.sh).
set -uo pipefail
# shellcheck source=tests/integration/lib.sh
source "$(dirname "$0")/lib.sh"
run=$1 idx=$2 port=$3 mode=$4
shift 4

skip() {
  echo "SKIP: $*"
  exit 77
}
command -v fi_info >/dev/null || skip "libfabric is not installed (libfabric-bin; scripts/install-deps.sh)"
[[ $(id -u) -eq 0 ]] || skip "needs root for network namespaces"
command -v ip >/dev/null || skip "needs iproute2"

ns_a=uroce-fa$idx ns_b=uroce-fb$idx veth_a=ufa$idx veth_b=ufb$idx
srv_ip=10.91.$idx.1 cli_ip=10.91.$idx.2
_fi_cleanup() {
  ip netns del "$ns_a" 2>/dev/null
  ip netns del "$ns_b" 2>/dev/null
  _pair_cleanup
}
trap _fi_cleanup EXIT
ip netns del "$ns_a" 2>/dev/null
ip netns del "$ns_b" 2>/dev/null
ip netns add "$ns_a" && ip netns add "$ns_b" || skip "cannot create network namespaces"
ip link add "$veth_a" netns "$ns_a" type veth peer name "$veth_b" netns "$ns_b" ||
  skip "cannot create a veth pair"
ip -n "$ns_a" addr add "$srv_ip/24" dev "$veth_a"
ip -n "$ns_b" addr add "$cli_ip/24" dev "$veth_b"
for ns in "$ns_a" "$ns_b"; do
  ip -n "$ns" link set lo up
done
ip -n "$ns_a" link set "$veth_a" up
ip -n "$ns_b" link set "$veth_b" up
# The kernel reports a veth's carrier through linkwatch, up to a second after both ends are up; a
# uroce device's port is DOWN until then and libfabric skips a device without an active port.
for _ in $(seq 100); do
  ip -n "$ns_a" link show "$veth_a" | grep -q LOWER_UP &&
    ip -n "$ns_b" link show "$veth_b" | grep -q LOWER_UP && break
  sleep 0.05
done

# fi_pingpong's result row for a size whose every transfer was acknowledged: bytes, #sent, =#ack.
ACKED_ROW='^[0-9]+[kmg]? +[0-9]+ +=[0-9]+ '

# teardown_race_only: the pingpong failed only in libfabric 1.17's rxm teardown race. fi_pingpong
# -e rdm ends without a handshake: each side sends "fin", waits for that SEND's completion and
# closes. When the peer's disconnect (its rdma_cm DREQ) reaches a side that has not yet read the
# completion of its own fin — the SEND was ACKed, its completion sits in the CQ, the program did
# not get the core in time on a loaded host — rxm closes the connection on the DISCONNECTED event
# first and reads the CQ after, by which time destroying the QP has taken the completion along
# (as mlx5 does; rxe and siw would leave it, and 1.17's rxm then crashes on a leftover receive),
# so the verbs provider reports the fin as flushed and that side exits 125. When what it had not
# read yet was the peer's fin (received and ACKed), the provider flushes the receive buffer it
# landed in, rxm drops that silently, and the side — Debian's fi_pingpong waits for the peer's
# fin after its own — waits until its timeout (124): its table still appears, as libfabric's psm3
# provider, loaded with the others, ends the program with exit(1) on SIGTERM. Upstream rxm drains
# the CQ before it closes. Beside three busy loops on two cores: 12 runs in 80, 8 in 294 once
# uroce's polls looked at the CQ again after their receive pass (src/verbs/cq.cc); never idle.
# Accepted only when that is all: one side exit 125 on exactly that error or 124 without one, the
# other exit 0, and both printed the same full table with every transfer acknowledged (-c checked
# their data).
teardown_race_only() {
  local bad good bad_rc rows_bad rows_good
  [[ $ep == rdm ]] || return 1
  if ((cli_rc == 0 && (srv_rc == 125 || srv_rc == 124))); then
    bad=server good=client bad_rc=$srv_rc
  elif ((srv_rc == 0 && (cli_rc == 125 || cli_rc == 124))); then
    bad=client good=server bad_rc=$cli_rc
  else
    return 1
  fi
  if ((bad_rc == 124)); then # waited for the peer's fin; its table is printed at SIGTERM (above)
    grep -q "cq_readerr" "$log/$bad.out" && return 1
  else
    [[ $(grep -c "cq_readerr: Work Request Flushed Error" "$log/$bad.out") == 1 ]] || return 1
  fi
  grep -Eq "^[0-9]+[kmg]? +[0-9]+ +[-+][0-9]" "$log/$bad.out" "$log/$good.out" && return 1
  rows_bad=$(grep -Ec "$ACKED_ROW" "$log/$bad.out")
  rows_good=$(grep -Ec "$ACKED_ROW" "$log/$good.out")
  ((rows_good > 0 && rows_bad == rows_good)) || return 1
  if ((bad_rc == 124)); then
    echo "NOTE: every transfer completed on both sides; the $bad then waited for the $good's fin," \
      "which libfabric 1.17's rxm dropped at teardown (it closes on the peer's disconnect before" \
      "reading its CQ)"
  else
    echo "NOTE: every transfer completed on both sides; the $bad's final SEND was reported" \
      "flushed at teardown (libfabric 1.17's rxm closes on the peer's disconnect before reading" \
      "its CQ)"
  fi
}

fail=
case $mode in
  fi_info)
    UROCE_DEVICES=uroce0=$srv_ip ip netns exec "$ns_a" timeout "${TIMEOUT:-60}" \
      "$run" fi_info -p verbs >"$log/info.out" 2>&1
    cat "$log/info.out"
    # fi_info prints one block per fi_info: provider, fabric, domain, version, type, protocol.
    grep -A3 "domain: uroce0\$" "$log/info.out" | grep -q "type: FI_EP_MSG" ||
      fail="fi_info -p verbs lists no FI_EP_MSG endpoint on uroce0"
    grep -A3 "domain: uroce0-dgram\$" "$log/info.out" | grep -q "type: FI_EP_DGRAM" ||
      fail="${fail:-fi_info -p verbs lists no FI_EP_DGRAM endpoint on uroce0-dgram}"
    # The check can fail: on the loopback interface the verbs provider offers no MSG endpoint.
    UROCE_DEVICES=uroce0=127.0.0.1 ip netns exec "$ns_a" timeout "${TIMEOUT:-60}" \
      "$run" fi_info -p verbs >"$log/info_lo.out" 2>&1
    grep -q "type: FI_EP_MSG" "$log/info_lo.out" &&
      fail="${fail:-fi_info listed an FI_EP_MSG endpoint for a device on the loopback address}"
    verdict "$fail" ;;
  pingpong)
    prov=$1 ep=$2
    shift 2
    export SERVER_NETNS=$ns_a CLIENT_NETNS=$ns_b SERVER_DEVICES=uroce0=$srv_ip
    export CLIENT_DEVICES=uroce0=$cli_ip
    # A server whose client failed waits for it for ever: 5 s of grace, not the whole TIMEOUT.
    export SERVER_GRACE=5
    # UROCE_LOG=info: the server says when uroce's rdma_cm listens (MSG endpoints connect with it).
    server_cmd=(env UROCE_LOG=info "$run" fi_pingpong -p "$prov" -e "$ep" -c -B "$port" "$@")
    client_cmd=("$run" fi_pingpong -p "$prov" -e "$ep" -c -P "$port" "$@" "$srv_ip")
    run_pair "$srv_ip" "$cli_ip" "$port"
    if ((srv_rc != 0 || cli_rc != 0)); then
      teardown_race_only || fail="server exit $srv_rc, client exit $cli_rc"
    fi
    # One row per size, every transfer acknowledged.
    for f in server client; do
      grep -Eq "$ACKED_ROW" "$log/$f.out" ||
        fail="${fail:-the $f printed no result row}"
    done
    grep -q "rdma_cm: listening on $srv_ip" "$log/server.out" ||
      fail="${fail:-the server never listened through the rdma_cm of uroce}"
    verdict "$fail" ;;
  *)
    echo "libfabric.sh: unknown mode $mode" >&2
    exit 2 ;;
esac
