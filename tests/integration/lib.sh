# shellcheck shell=bash disable=SC2154 # server_cmd and client_cmd are set by the caller
# Shared by the integration scripts: runs an unmodified two-process program (server and client,
# each with its own uroce device on its own address) and collects both exit statuses and outputs.
#
# The caller sets the arrays server_cmd and client_cmd, then calls
#   run_pair SERVER_IP CLIENT_IP TCP_PORT
# which leaves srv_rc, cli_rc and the outputs in $log/server.out and $log/client.out, and prints
# both. Environment: FAULTS (UROCE_FAULTS for both sides), TIMEOUT (seconds per side);
# SERVER_DEVICES / CLIENT_DEVICES (UROCE_DEVICES of each side; default uroce0=SERVER_IP /
# uroce0=CLIENT_IP), SERVER_NETNS / CLIENT_NETNS (run that side in a network namespace); READY
# (text the server prints when it is ready for the client; default: its TCP port is open),
# SERVER_GRACE (seconds a server may go on after its client failed; default: TIMEOUT),
# SERVER_STOP (set: the server serves until stopped, as io_demo's does: once the client is done it
# is stopped, and counts as exit 0 if it was still running then).
# Finish with `verdict "$fail"`: PASS when empty, else FAIL and exit 1.

log=$(mktemp -d /tmp/uroce-integration.XXXXXX)
srv_pid=
_pair_cleanup() {
  [[ -n $srv_pid ]] && kill "$srv_pid" 2>/dev/null
  wait 2>/dev/null
  rm -rf "$log"
}
trap _pair_cleanup EXIT

run_pair() {
  local srv_ip=$1 cli_ip=$2 port=$3 timeout=${TIMEOUT:-120}
  # `ip netns exec` execs its command, so srv_pid is the server's timeout and killing it works.
  local srv_ns=() cli_ns=()
  [[ -n ${SERVER_NETNS:-} ]] && srv_ns=(ip netns exec "$SERVER_NETNS")
  [[ -n ${CLIENT_NETNS:-} ]] && cli_ns=(ip netns exec "$CLIENT_NETNS")
  UROCE_DEVICES=${SERVER_DEVICES:-uroce0=$srv_ip} UROCE_FAULTS=${FAULTS:-} \
    "${srv_ns[@]}" timeout -k 10 "$timeout" "${server_cmd[@]}" >"$log/server.out" 2>&1 &
  srv_pid=$!
  # A client gives up if the server is not ready yet: wait for its TCP port to open (a DPDK
  # device takes a moment longer to open), or (READY set) for the server to print READY —
  # rdma_cm programs open no TCP port; with UROCE_LOG=info uroce says when an rdma_cm id starts
  # listening.
  local tries=200
  [[ -n ${READY:-} ]] && tries=600
  for _ in $(seq "$tries"); do
    if [[ -n ${READY:-} ]]; then
      grep -q "$READY" "$log/server.out" && break
    else
      "${srv_ns[@]}" ss -ltnH "sport = :$port" | grep -q . && break
    fi
    kill -0 "$srv_pid" 2>/dev/null || break
    sleep 0.05
  done
  UROCE_DEVICES=${CLIENT_DEVICES:-uroce0=$cli_ip} UROCE_FAULTS=${FAULTS:-} \
    "${cli_ns[@]}" timeout -k 10 "$timeout" "${client_cmd[@]}" >"$log/client.out" 2>&1
  cli_rc=$?
  # SERVER_GRACE=N: when the client failed, a server still waiting for it gets N more seconds, not
  # the whole TIMEOUT (a failed attempt that will be run again should not cost TIMEOUT).
  if ((cli_rc != 0)) && [[ -n ${SERVER_GRACE:-} ]]; then
    for _ in $(seq $((SERVER_GRACE * 20))); do
      kill -0 "$srv_pid" 2>/dev/null || break
      sleep 0.05
    done
    kill "$srv_pid" 2>/dev/null
  fi
  if [[ -n ${SERVER_STOP:-} ]] && kill -0 "$srv_pid" 2>/dev/null; then
    kill "$srv_pid" 2>/dev/null
    wait "$srv_pid"
    srv_rc=0
  else
    wait "$srv_pid"
    srv_rc=$?
  fi
  srv_pid=
  echo "--- server (exit $srv_rc)"
  cat "$log/server.out"
  echo "--- client (exit $cli_rc)"
  cat "$log/client.out"
}

verdict() {
  if [[ -n $1 ]]; then
    echo "FAIL: $1"
    exit 1
  fi
  echo "PASS"
}
