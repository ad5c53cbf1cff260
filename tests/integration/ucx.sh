#!/usr/bin/env bash
# UCX (Debian's 1.13, ucx-utils) over uroce, unmodified: its device list, ucx_perftest between two
# processes over rc_verbs and ud_verbs, and a sockaddr connection through UCX's rdmacm connection
# manager (io_demo). Each test has a device name of its own and runs with no /dev/infiniband node
# for it: UCX finds the device through liburoce's answers to its /dev/infiniband and sysfs
# look-ups (src/verbs/discovery.cc, docs/middleware.md), no root step. A marker node left by
# `uroce dev-nodes` is removed first (root); one that cannot be removed skips the test (exit 77).
#
#   ucx.sh UROCE_RUN UROCE_CLI SERVER_IP CLIENT_IP PORT DEVICE MODE [args…]
# MODE: info                          ucx_info -d lists DEVICE with rc_verbs and ud_verbs, and
#                                     does not without its node
#       perftest TLS TEST [options…]  ucx_perftest TEST with UCX_TLS=TLS (TCP PORT for its set-up)
#       rdmacm [io_demo options…]     io_demo connects by address through the rdmacm CM (PORT)
# Environment: TIMEOUT (see lib.sh).
set -uo pipefail
# shellcheck source=tests/integration/lib.sh
source "$(dirname "$0")/lib.sh"
run=$1 cli=$2 srv_ip=$3 cli_ip=$4 port=$5 dev=$6 mode=$7
shift 7

skip() {
  echo "SKIP: $*"
  exit 77
}
command -v ucx_info >/dev/null || skip "UCX is not installed (ucx-utils; scripts/install-deps.sh)"

export SERVER_DEVICES=$dev=$srv_ip CLIENT_DEVICES=$dev=$cli_ip
node=/dev/infiniband/$dev
if [[ -e $node ]]; then
  UROCE_DEVICES=$SERVER_DEVICES "$cli" dev-nodes --remove >/dev/null 2>&1
  [[ -e $node ]] && skip "$node exists and cannot be removed here: this test proves UCX needs none"
fi
for f in /sys/class/infiniband/$dev /sys/class/infiniband_verbs; do
  [[ -e $f ]] && echo "note: $f exists in the real sysfs (the real one wins where it has the path)"
done
# Only this test's uroce device: no other transport may carry the traffic.
export UCX_NET_DEVICES=$dev:1

fail=
case $mode in
  info)
    UROCE_DEVICES=$SERVER_DEVICES timeout "${TIMEOUT:-60}" "$run" ucx_info -d >"$log/info.out" 2>&1
    cat "$log/info.out"
    # Each transport is printed as "Transport: TL" followed by "Device: DEV:1".
    for tl in rc_verbs ud_verbs; do
      grep -A1 "Transport: $tl\$" "$log/info.out" | grep -q "Device: $dev:1\$" ||
        fail="${fail:-ucx_info -d lists no $tl on $dev:1}"
    done
    grep -q "Memory domain: $dev\$" "$log/info.out" || fail="${fail:-no memory domain $dev}"
    grep -q "Connection manager: rdmacm" "$log/info.out" ||
      fail="${fail:-no rdmacm connection manager}"
    [[ -e $node ]] && fail="${fail:-$node appeared in the real file system}"
    # UCX read the GID's netdev from sysfs (it reads the GID's RoCE version beside it).
    UROCE_DEVICES=$SERVER_DEVICES UCX_LOG_LEVEL=debug timeout "${TIMEOUT:-60}" "$run" ucx_info -d \
      >"$log/debug.out" 2>&1
    grep -q "RoCE LAG level on $dev:1 (lo)" "$log/debug.out" ||
      fail="${fail:-UCX did not read the netdev of the GID (lo) from sysfs}"
    # The check can fail: with liburoce's answers turned off UCX does not list the device at all.
    UROCE_DEVICES=$SERVER_DEVICES UROCE_DISCOVERY=0 timeout "${TIMEOUT:-60}" "$run" ucx_info -d \
      >"$log/info2.out" 2>&1
    grep -q "Device: $dev:1" "$log/info2.out" &&
      fail="${fail:-ucx_info listed $dev with UROCE_DISCOVERY=0}"
    verdict "$fail" ;;
  perftest)
    tls=$1 test=$2
    shift 2
    export UCX_TLS=$tls
    server_cmd=("$run" ucx_perftest -p "$port")
    # UCX_LOG_LEVEL=debug on the client prints each endpoint's lanes at set-up (a few hundred
    # lines, nothing per message): the test checks which transport carried the data.
    client_cmd=(env UCX_LOG_LEVEL=debug UROCE_STATS=1 "$run" ucx_perftest "$srv_ip" -p "$port"
                -t "$test" "$@")
    run_pair "$srv_ip" "$cli_ip" "$port"
    ((srv_rc != 0 || cli_rc != 0)) && fail="server exit $srv_rc, client exit $cli_rc"
    grep -Eq "^Final: +[0-9]+ " "$log/client.out" || fail="${fail:-the client printed no Final row}"
    # The first transport of UCX_TLS carries the data: rc_verbs,ud_verbs means RC with UD for
    # the wire-up only.
    grep -Eq "lane\[0\]: +[0-9]+:${tls%%,*}/$dev:1" "$log/client.out" ||
      fail="${fail:-lane 0 is not ${tls%%,*} on $dev:1}"
    grep -Eq "^ +sent_pkts +[1-9]" "$log/client.out" ||
      fail="${fail:-the uroce device of the client sent nothing}"
    verdict "$fail" ;;
  rdmacm)
    # io_demo's server listens on a socket address and serves until stopped; its client
    # connects by address — through UCX's connection managers, of which only rdmacm is allowed.
    export UCX_TLS=rc_verbs,ud_verbs UCX_SOCKADDR_TLS_PRIORITY=rdmacm
    export UROCE_LOG=info READY="rdma_cm: listening on" SERVER_STOP=1
    server_cmd=("$run" io_demo -p "$port" -q)
    client_cmd=("$run" io_demo "$srv_ip" -p "$port" -q "$@")
    run_pair "$srv_ip" "$cli_ip" "$port"
    ((srv_rc != 0 || cli_rc != 0)) && fail="server exit $srv_rc, client exit $cli_rc"
    grep -q "Client exit with status 'OK'" "$log/client.out" ||
      fail="${fail:-the client did not end OK}"
    grep -q "got new connection request" "$log/server.out" ||
      fail="${fail:-the server saw no connection request}"
    verdict "$fail" ;;
  *)
    echo "ucx.sh: unknown mode $mode" >&2
    exit 2 ;;
esac
