#!/usr/bin/env bash
# Runs an unmodified rdma_cm program pair from rdmacm-utils or perftest (-R) over uroce: the
# server and the client each with their own uroce device on their own loopback address, connected
# by uroce's rdma_cm (IB CM MADs on QP1). Checks both exit statuses and what each must print.
#
#   rdma_cm.sh UROCE_RUN SERVER_IP CLIENT_IP PORT PROGRAM [options for both sides…]
# PROGRAM: rping | ucmatose | udaddy | rdma_server | rstream | riostream | ib_send_bw | ib_write_bw
#          | ib_read_lat | …
# Environment: FAULTS, TIMEOUT (see lib.sh); CAPTURE_DIR (keep each side's UROCE_PCAP there).
set -uo pipefail
# shellcheck source=tests/integration/lib.sh
source "$(dirname "$0")/lib.sh"
run=$1 srv_ip=$2 cli_ip=$3 port=$4 program=$5
shift 5

# The server says when its rdma_cm id listens (UROCE_LOG=info); the client starts then.
export UROCE_LOG=info
READY="rdma_cm: listening on"
expect_srv= expect_cli=
case $program in
  rping)
    # -V: the client checks every ping's data after the RDMA WRITE back.
    server_cmd=("$run" rping -s -v -V -a "$srv_ip" -p "$port" "$@")
    client_cmd=("$run" rping -c -v -V -a "$srv_ip" -p "$port" "$@")
    expect_cli="ping data: rdma-ping-" ;;
  ucmatose)
    server_cmd=("$run" ucmatose -p "$port" "$@")
    client_cmd=("$run" ucmatose -p "$port" -s "$srv_ip" "$@")
    expect_srv="test complete" expect_cli="test complete" ;;
  udaddy)
    # udaddy has no port option (-p is its port space): it always uses port 7174, which is
    # fine here since every test has addresses of its own.
    server_cmd=("$run" udaddy "$@")
    client_cmd=("$run" udaddy -s "$srv_ip" "$@")
    expect_srv="test complete" expect_cli="test complete" ;;
  rdma_server)
    server_cmd=("$run" rdma_server -p "$port" "$@")
    client_cmd=("$run" rdma_client -s "$srv_ip" -p "$port" "$@")
    expect_srv="rdma_server: end 0" expect_cli="rdma_client: end 0" ;;
  rstream | riostream)
    # rsockets (librdmacm's sockets over rdma_cm and RDMA WRITE with immediate); RSPRELOAD=1 runs
    # rstream's plain-socket mode (-T s) under librspreload.so, which turns the sockets into
    # rsockets underneath an unmodified TCP program.
    pre=()
    [[ -n ${RSPRELOAD:-} ]] && pre=(env "LD_PRELOAD=/usr/lib/x86_64-linux-gnu/rsocket/librspreload.so")
    server_cmd=("${pre[@]}" "$run" "$program" -b "$srv_ip" -p "$port" "$@")
    client_cmd=("${pre[@]}" "$run" "$program" -s "$srv_ip" -p "$port" "$@")
    expect_srv="custom" expect_cli="custom" ;;
  ib_*)
    # The client's test connection waits for the server's second listen (below).
    gate_lib=$(dirname "$run")/../lib/libconnect_gate.so
    [[ -f $gate_lib ]] || { echo "FAIL: $gate_lib not built (target connect_gate)"; exit 1; }
    server_cmd=("$run" "$program" -d uroce0 -R -p "$port" "$@")
    # shellcheck disable=SC2016 # $0 and $LD_PRELOAD are the inner shell's (after uroce-run's)
    client_cmd=("$run" sh -c 'LD_PRELOAD="$0:$LD_PRELOAD" exec "$@"' "$gate_lib"
                "$program" -d uroce0 -R -p "$port" "$@" "$srv_ip")
    expect_cli="#bytes" ;;
  *)
    echo "rdma_cm.sh: unknown program $program" >&2
    exit 2 ;;
esac
if [[ -n ${CAPTURE_DIR:-} ]]; then
  server_cmd=(env UROCE_PCAP="$CAPTURE_DIR/server.pcap" "${server_cmd[@]}")
  client_cmd=(env UROCE_PCAP="$CAPTURE_DIR/client.pcap" "${client_cmd[@]}")
fi

# perftest -R connects twice: a control connection, then, after a handshake over it, the test
# connection, for which the server starts listening only after its side of the handshake. A
# client that is quicker gets REJECTED (reason 8, "invalid service ID": nobody listens yet), as it
# would from the kernel's CM, and perftest 4.5's retry path then reads memory it freed and
# crashes. The client's second rdma_connect therefore waits (connect_gate.c) until the server has
# said twice that an rdma_cm id of its listens (UROCE_LOG=info); any failure is then final.
gate_pid=
if [[ $program == ib_* ]]; then
  export URO_CONNECT_GATE=$log/connect-gate
  "$(dirname "$0")/open_gate_on_relisten.sh" "$log/server.out" "$URO_CONNECT_GATE" &
  gate_pid=$!
fi
# A server whose client failed waits for it for ever: 5 s of grace, not the whole TIMEOUT.
SERVER_GRACE=5
run_pair "$srv_ip" "$cli_ip" "$port"
if [[ -n $gate_pid ]]; then
  kill "$gate_pid" 2>/dev/null
  wait "$gate_pid" 2>/dev/null
fi
# rping 44.0 (Debian 12) races its own teardown: main destroys the event channel while its CM
# thread may be about to call rdma_get_cm_event again, which then fails with EBADF and the thread
# exits the process with status 255 after a successful test (rdma-core commit f3ae6534a, "rping:
# terminate CM event thread before exiting", fixed it in 2025). It shows when the last CM event
# (the client's DISCONNECTED) arrives just before that teardown, more often under injected loss.
# (uroce's CM, like the kernel's, sends the DREP when the passive side calls rdma_disconnect, so
# the active side's DISCONNECTED comes a server turn-around after its own rdma_disconnect: 1 run in
# 20 hits the window, without loss too.) That exact outcome, after every ping went through (each
# checked, -V), is rping's, not uroce's. (The text may sit inside a line: stdout is buffered.)
rping_teardown_race() {
  [[ $program == rping ]] && ((cli_rc == 255)) &&
    grep -q "rdma_get_cm_event: Bad file descriptor" "$log/client.out" &&
    ! grep -Eq "data mismatch|wait for|cq completion failed|rping client failed" "$log/client.out"
}
if rping_teardown_race; then
  echo "--- the client hit rping 44.0's teardown race (EBADF from rdma_get_cm_event after the test): counted as exit 0"
  cli_rc=0
fi
# perftest -R closes with one more exchange of messages over its rdma_cm QP (ctx_close_connection):
# the client SENDs, the server receives it, SENDs its own, and exits as soon as the client has
# ACKed that. When injected loss takes the ACK of the client's SEND, the client resends it to a
# server that is gone — no RNIC answers for a QP that no longer exists either — and its SEND ends
# in IBV_WC_RETRY_EXC_ERR (status 12) after the whole transfer went through. That outcome, with
# the result row printed and the server done, is the closing exchange's, not the transfer's.
perftest_close_race() {
  [[ $program == ib_* && -n ${FAULTS:-} ]] && ((srv_rc == 0 && cli_rc != 0)) &&
    grep -q "Bad wc status 12" "$log/client.out" &&
    grep -q "Failed to close connection between server and client" "$log/client.out" &&
    grep -A1 "#bytes" "$log/client.out" | grep -Eq "^ *[0-9]+ +[0-9]+ +[0-9.]+"
}
if perftest_close_race; then
  echo "--- the client's last SEND lost its ACK under injected loss after the server had exited (perftest's closing exchange): counted as exit 0"
  cli_rc=0
fi
fail=
((srv_rc != 0 || cli_rc != 0)) && fail="server exit $srv_rc, client exit $cli_rc"
# Every server listened through uroce's rdma_cm (for rspreload: the sockets really became
# rsockets, not TCP).
grep -q -- "$READY" "$log/server.out" || fail="${fail:-the server never listened through rdma_cm}"
[[ -n $expect_srv ]] && ! grep -q -- "$expect_srv" "$log/server.out" &&
  fail="${fail:-the server did not print \"$expect_srv\"}"
[[ -n $expect_cli ]] && ! grep -q -- "$expect_cli" "$log/client.out" &&
  fail="${fail:-the client did not print \"$expect_cli\"}"
case $program in
  rping)
    # -C N: N pings, each checked by the server (-v prints every one).
    count=$(printf '%s\n' "$@" | sed -n '/^-C$/{n;p}')
    if [[ -n $count ]]; then
      got=$(grep -c "ping data: rdma-ping-" "$log/client.out")
      ((got == count)) || fail="${fail:-the client printed $got of $count pings}"
    fi ;;
  ib_*)
    grep -A1 "#bytes" "$log/client.out" | grep -Eq "^ *[0-9]+ +[0-9]+ +[0-9.]+" ||
      fail="${fail:-the client printed no result row}" ;;
esac
verdict "$fail"
