#!/usr/bin/env bash
# Unmodified qperf, several RC tests in one client run (`qperf HOST -cm1 rc_lat rc_bw …`, as
# users run it). qperf's server forks a child per test, and that child sends its client the
# rdma_cm port between rdma_bind_addr and rdma_listen: the client's REQ may come before the
# listen (held for it: Agent::reserve), or before the child's device is even open (it opens at
# the bind). Each child exits after its test without destroying its connection's id: its DREP
# (or DREQ) goes out at exit, as the kernel's CM sends one when a process's ids go with it — a
# client waiting for one would otherwise resend its DREQ to a closed port and say "no RoCE
# endpoint". Every test must report a figure; nothing here is timed.
#
#   qperf.sh UROCE_RUN SERVER_IP CLIENT_IP TCP_PORT
set -uo pipefail
here=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=lib.sh
source "$here/lib.sh"
run=$1 srv=$2 cli=$3 port=$4
command -v qperf >/dev/null || { echo "SKIP: qperf is not installed"; exit 0; }
tests=(rc_lat rc_rdma_write_lat rc_bw rc_rdma_read_lat)
server_cmd=("$run" qperf -lp "$port")
client_cmd=("$run" qperf -lp "$port" "$srv" -cm1 -t 1 "${tests[@]}")
SERVER_STOP=1 TIMEOUT=${TIMEOUT:-60} run_pair "$srv" "$cli" "$port"
fail=
((cli_rc == 0)) || fail+="client exited $cli_rc; "
for t in "${tests[@]}"; do
  # qperf prints "TEST:" and then its figure ("latency  =  25.7 us", "bw  =  1.8 GB/sec").
  grep -A1 "^$t:" "$log/client.out" | grep -qE '(latency|bw) += ' || fail+="$t gave no figure; "
done
grep -q "unexpected event" "$log/client.out" && fail+="qperf saw an unexpected rdma_cm event; "
# A REQ that found no device open yet, or a DREQ resent to a child that exited without its DREP.
grep -q "no RoCE endpoint" "$log/client.out" && fail+="a CM message met a closed UDP port; "
verdict "$fail"
