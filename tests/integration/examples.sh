#!/usr/bin/env bash
# Runs one of the examples/ programs (rdma_write, rdma_read, atomics) as server and client over
# uroce, each with its own device on its own loopback address. The examples check their own data
# and exit non-zero on any mismatch; this script passes only if both sides exit 0 and say "OK".
#
#   examples.sh UROCE_RUN SERVER_IP CLIENT_IP TCP_PORT PROGRAM [options for both sides…]
# Environment: FAULTS (UROCE_FAULTS for both sides), TIMEOUT (seconds, default 60),
#              SERVER_ARGS, CLIENT_ARGS (extra options for one side only),
#              EXPECT_MISMATCH=1: pass only if the server detects wrong data and both sides fail
#              cleanly (no timeout), which shows that the examples' checks can fail.
set -uo pipefail
run=$1 srv_ip=$2 cli_ip=$3 port=$4 program=$5
shift 5
timeout=${TIMEOUT:-60}
log=$(mktemp -d /tmp/uroce-examples.XXXXXX)
cleanup() {
  [[ -n ${srv_pid:-} ]] && kill "$srv_pid" 2>/dev/null
  wait 2>/dev/null
  rm -rf "$log"
}
trap cleanup EXIT

# shellcheck disable=SC2086 # SERVER_ARGS and CLIENT_ARGS are lists of options
UROCE_DEVICES=uroce0=$srv_ip UROCE_FAULTS=${FAULTS:-} \
  timeout "$timeout" "$run" "$program" -d uroce0 -p "$port" "$@" ${SERVER_ARGS:-} \
  >"$log/server.out" 2>&1 &
srv_pid=$!
# The client gives up if the server's TCP port is not open yet: wait for it.
for _ in $(seq 100); do
  ss -ltnH "sport = :$port" | grep -q . && break
  kill -0 "$srv_pid" 2>/dev/null || break
  sleep 0.05
done
# shellcheck disable=SC2086
UROCE_DEVICES=uroce0=$cli_ip UROCE_FAULTS=${FAULTS:-} \
  timeout "$timeout" "$run" "$program" -d uroce0 -p "$port" "$@" ${CLIENT_ARGS:-} "$srv_ip" \
  >"$log/client.out" 2>&1
cli_rc=$?
wait "$srv_pid"
srv_rc=$?
srv_pid=
echo "--- server (exit $srv_rc)"; cat "$log/server.out"
echo "--- client (exit $cli_rc)"; cat "$log/client.out"
fail=
if [[ -n ${EXPECT_MISMATCH:-} ]]; then
  # Exit 1 is the examples' own verdict; 124 (timeout) or a crash would not prove the check.
  ((srv_rc == 1 && cli_rc == 1)) || fail="expected both sides to exit 1 on a mismatch"
  grep -q "mismatch at byte" "$log/server.out" || fail="${fail:-the server reported no mismatch}"
else
  ((srv_rc != 0 || cli_rc != 0)) && fail="server exit $srv_rc, client exit $cli_rc"
  for side in server client; do
    grep -q "^OK: " "$log/$side.out" || fail="${fail:-the $side did not report OK}"
  done
fi
if [[ -n $fail ]]; then
  echo "FAIL: $fail"
  exit 1
fi
echo "PASS"
