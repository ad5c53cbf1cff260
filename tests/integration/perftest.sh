#!/usr/bin/env bash
# Runs an unmodified perftest program (ib_send_bw, ib_write_lat, …) as server and client over
# uroce, each with its own device on its own loopback address, and checks that both finish and
# report a result line.
#   perftest.sh UROCE_RUN SERVER_IP CLIENT_IP TCP_PORT PROGRAM [perftest options…]
set -uo pipefail
run=$1 srv_ip=$2 cli_ip=$3 port=$4 program=$5
shift 5
timeout=${TIMEOUT:-120}
log=$(mktemp -d /tmp/uroce-perftest.XXXXXX)
cleanup() {
  [[ -n ${srv_pid:-} ]] && kill "$srv_pid" 2>/dev/null
  wait 2>/dev/null
  rm -rf "$log"
}
trap cleanup EXIT

UROCE_DEVICES=uroce0=$srv_ip UROCE_FAULTS=${FAULTS:-} \
  timeout "$timeout" "$run" "$program" -d uroce0 -x 0 -p "$port" "$@" >"$log/server.out" 2>&1 &
srv_pid=$!
for _ in $(seq 100); do
  ss -ltnH "sport = :$port" | grep -q . && break
  kill -0 "$srv_pid" 2>/dev/null || break
  sleep 0.05
done
UROCE_DEVICES=uroce0=$cli_ip UROCE_FAULTS=${FAULTS:-} \
  timeout "$timeout" "$run" "$program" -d uroce0 -x 0 -p "$port" "$@" "$srv_ip" >"$log/client.out" 2>&1
cli_rc=$?
wait "$srv_pid"
srv_rc=$?
srv_pid=
echo "--- server (exit $srv_rc)"; cat "$log/server.out"
echo "--- client (exit $cli_rc)"; cat "$log/client.out"
fail=
((srv_rc != 0 || cli_rc != 0)) && fail="server exit $srv_rc, client exit $cli_rc"
# perftest prints one result row per size under a "#bytes" header: a number of bytes, then the
# iterations, then the figures.
grep -A1 "#bytes" "$log/client.out" | grep -Eq "^ *[0-9]+ +[0-9]+ +[0-9.]+" ||
  fail="${fail:-the client printed no result row}"
if [[ -n $fail ]]; then
  echo "FAIL: $fail"
  exit 1
fi
echo "PASS"
