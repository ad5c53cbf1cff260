#!/usr/bin/env bash
# Runs the unmodified /usr/bin/ibv_rc_pingpong (server and client) over uroce, each process with
# its own device on its own loopback address, and checks that both finish cleanly.
#
#   pingpong.sh UROCE_RUN SERVER_IP CLIENT_IP TCP_PORT [ibv_rc_pingpong options…]
# Environment: FAULTS (UROCE_FAULTS for both sides), TIMEOUT (seconds, default 120),
#              PROGRAM (default /usr/bin/ibv_rc_pingpong), CAPTURE (pcap file: capture with dumpcap).
set -uo pipefail
run=$1 srv_ip=$2 cli_ip=$3 port=$4
shift 4
program=${PROGRAM:-/usr/bin/ibv_rc_pingpong}
timeout=${TIMEOUT:-120}
log=$(mktemp -d /tmp/uroce-pingpong.XXXXXX)
cleanup() {
  [[ -n ${srv_pid:-} ]] && kill "$srv_pid" 2>/dev/null
  [[ -n ${cap_pid:-} ]] && kill "$cap_pid" 2>/dev/null
  wait 2>/dev/null
}
trap cleanup EXIT

if [[ -n ${CAPTURE:-} ]]; then
  dumpcap -q -i lo -f "udp port 4791 and host $srv_ip" -w "$CAPTURE" 2>"$log/capture.err" &
  cap_pid=$!
  for _ in $(seq 50); do [[ -s $CAPTURE ]] && break; sleep 0.1; done
fi

UROCE_DEVICES=uroce0=$srv_ip UROCE_FAULTS=${FAULTS:-} \
  timeout "$timeout" "$run" "$program" -d uroce0 -g 0 -p "$port" "$@" >"$log/server.out" 2>&1 &
srv_pid=$!
# The client gives up if the server's TCP port is not open yet: wait for it.
for _ in $(seq 100); do
  ss -ltnH "sport = :$port" | grep -q . && break
  kill -0 "$srv_pid" 2>/dev/null || break
  sleep 0.05
done
UROCE_DEVICES=uroce0=$cli_ip UROCE_FAULTS=${FAULTS:-} \
  timeout "$timeout" "$run" "$program" -d uroce0 -g 0 -p "$port" "$@" "$srv_ip" >"$log/client.out" 2>&1
cli_rc=$?
wait "$srv_pid"
srv_rc=$?
srv_pid=
if [[ -n ${cap_pid:-} ]]; then
  sleep 0.2
  kill -INT "$cap_pid" 2>/dev/null
  wait "$cap_pid" 2>/dev/null
  cap_pid=
fi
echo "--- server (exit $srv_rc)"; cat "$log/server.out"
echo "--- client (exit $cli_rc)"; cat "$log/client.out"
fail=
((srv_rc != 0 || cli_rc != 0)) && fail="server exit $srv_rc, client exit $cli_rc"
# With -c the server checks the received buffer and reports bad pages without failing its exit
# status; the pingpong programs report a completed run as "N bytes in S seconds".
grep -q "invalid data" "$log/server.out" "$log/client.out" && fail="data validation failed"
for side in server client; do
  grep -q "bytes in" "$log/$side.out" || fail="${fail:-$side reported no transfer}"
done
rm -rf "$log"
if [[ -n $fail ]]; then
  echo "FAIL: $fail"
  exit 1
fi
echo "PASS"
