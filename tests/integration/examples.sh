#!/usr/bin/env bash
# Runs one of the examples/ programs (rdma_write, rdma_read, atomics) as server and client over
# uroce, each with its own device on its own loopback address. The examples check their own data
# and exit non-zero on any mismatch; this script passes only if both sides exit 0 and say "OK".
#
#   examples.sh UROCE_RUN SERVER_IP CLIENT_IP TCP_PORT PROGRAM [options for both sides…]
# Environment: FAULTS, TIMEOUT (default 60; see lib.sh),
#              SERVER_ARGS, CLIENT_ARGS (extra options for one side only),
#              EXPECT_MISMATCH=1: pass only if the server detects wrong data and both sides fail
#              cleanly (no timeout), which shows that the examples' checks can fail.
set -uo pipefail
# shellcheck source=tests/integration/lib.sh
source "$(dirname "$0")/lib.sh"
run=$1 srv_ip=$2 cli_ip=$3 port=$4 program=$5
shift 5
export TIMEOUT=${TIMEOUT:-60}

# shellcheck disable=SC2206 # SERVER_ARGS and CLIENT_ARGS are lists of options
server_cmd=("$run" "$program" -d uroce0 -p "$port" "$@" ${SERVER_ARGS:-})
# shellcheck disable=SC2206
client_cmd=("$run" "$program" -d uroce0 -p "$port" "$@" ${CLIENT_ARGS:-} "$srv_ip")
run_pair "$srv_ip" "$cli_ip" "$port"

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
verdict "$fail"
