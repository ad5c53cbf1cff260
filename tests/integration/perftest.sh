#!/usr/bin/env bash
# Runs an unmodified perftest program (ib_send_bw, ib_write_lat, …) as server and client over
# uroce, each with its own device on its own loopback address, and checks that both finish and
# report a result line.
#   perftest.sh UROCE_RUN SERVER_IP CLIENT_IP TCP_PORT PROGRAM [perftest options…]
# Environment: FAULTS, TIMEOUT (see lib.sh); TCP_HOST (where the client's TCP exchange goes;
# default SERVER_IP: perftest's server listens on 0.0.0.0, so a run over ::1 uses 127.0.0.1).
set -uo pipefail
# shellcheck source=tests/integration/lib.sh
source "$(dirname "$0")/lib.sh"
run=$1 srv_ip=$2 cli_ip=$3 port=$4 program=$5
shift 5

server_cmd=("$run" "$program" -d uroce0 -x 0 -p "$port" "$@")
client_cmd=("$run" "$program" -d uroce0 -x 0 -p "$port" "$@" "${TCP_HOST:-$srv_ip}")
# perftest converts cycles to microseconds with a CPU frequency it calibrates at start-up; on a
# loaded machine that calibration can fail ("Correlation coefficient r^2 < 0.9") and the latency
# row then reads "inf". That says nothing about the transport, so such a run is repeated (at most
# three attempts); any other failure is final.
for attempt in 1 2 3; do
  run_pair "$srv_ip" "$cli_ip" "$port"
  fail=
  ((srv_rc != 0 || cli_rc != 0)) && fail="server exit $srv_rc, client exit $cli_rc"
  # perftest prints one result row per size under a "#bytes" header: a number of bytes, then the
  # iterations, then the figures.
  grep -A1 "#bytes" "$log/client.out" | grep -Eq "^ *[0-9]+ +[0-9]+ +[0-9.]+" ||
    fail="${fail:-the client printed no result row}"
  [[ -z $fail ]] && break
  [[ -n ${fail%%the client printed no result row} ]] && break
  grep -q "Correlation coefficient" "$log/client.out" || break
  echo "--- attempt $attempt: perftest's clock calibration failed; running again"
done
verdict "$fail"
