#!/usr/bin/env bash
# Runs the unmodified /usr/bin/ibv_rc_pingpong (server and client) over uroce, each process with
# its own device on its own loopback address, and checks that both finish cleanly.
#
#   pingpong.sh UROCE_RUN SERVER_IP CLIENT_IP TCP_PORT [pingpong options…]
# Environment: FAULTS (UROCE_FAULTS for both sides), TIMEOUT (seconds, default 120),
#              PROGRAM (default /usr/bin/ibv_rc_pingpong; any *_pingpong of ibverbs-utils),
#              CAPTURE (pcap file: capture the run on lo with dumpcap),
#              DONE (what each side prints when it completed; default "bytes in", the
#              pingpongs' "N bytes in S seconds"; ibv_xsrq_pingpong prints "success"),
#              TCP_HOST (where the client's TCP exchange goes; default SERVER_IP: the pingpong
#              server listens on 0.0.0.0 only, so a run over ::1 exchanges over 127.0.0.1).
set -uo pipefail
# shellcheck source=tests/integration/lib.sh
source "$(dirname "$0")/lib.sh"
run=$1 srv_ip=$2 cli_ip=$3 port=$4
shift 4
program=${PROGRAM:-/usr/bin/ibv_rc_pingpong}
# Each side prints its device's counters when it exits (retransmissions, drops by cause, injected
# faults), so that a failed run's log says what the transport saw.
export UROCE_STATS=${UROCE_STATS:-1}

cap_pid=
if [[ -n ${CAPTURE:-} ]]; then
  dumpcap -q -i lo -f "udp port 4791 and host $srv_ip" -w "$CAPTURE" 2>"$log/capture.err" &
  cap_pid=$!
  for _ in $(seq 50); do [[ -s $CAPTURE ]] && break; sleep 0.1; done
fi

server_cmd=("$run" "$program" -d uroce0 -g 0 -p "$port" "$@")
client_cmd=("$run" "$program" -d uroce0 -g 0 -p "$port" "$@" "${TCP_HOST:-$srv_ip}")

# The pingpong programs end without a final handshake: a side exits as soon as its own sends are
# acknowledged and its receives are in. Under injected loss the ACK of the other side's last SEND
# can be lost just as the acknowledging side exits; the other side then retransmits to nobody and
# fails with "transport retry counter exceeded" although the peer received every message (it
# could not have finished otherwise). A real RNIC does the same. That one outcome, and only with
# FAULTS set, is run again (at most three attempts); any other failure is final.
peer_exited_before_last_ack() {
  [[ -n ${FAULTS:-} ]] || return 1
  local failed ok
  if ((srv_rc != 0 && cli_rc == 0)); then failed=server ok=client
  elif ((cli_rc != 0 && srv_rc == 0)); then failed=client ok=server
  else return 1; fi
  grep -q "retry counter exceeded" "$log/$failed.out" && grep -q "iters in" "$log/$ok.out"
}

# Each attempt draws its own losses: with the same seed the run is replayed packet for packet, and
# a seed that loses the last ACK loses it every time (seen: three identical failures in a row). So
# attempt k runs with seed + k - 1; each attempt is an independent draw of the same fault rates.
faults0=${FAULTS:-}
for attempt in 1 2 3; do
  if [[ $faults0 =~ (^|,)seed=([0-9]+) ]]; then
    FAULTS=${faults0/seed=${BASH_REMATCH[2]}/seed=$((BASH_REMATCH[2] + attempt - 1))}
  fi
  run_pair "$srv_ip" "$cli_ip" "$port"
  peer_exited_before_last_ack && ((attempt < 3)) || break
  echo "--- attempt $attempt ($FAULTS): the peer exited before its last ACK arrived; running again with the next seed"
done

if [[ -n $cap_pid ]]; then
  sleep 0.2
  kill -INT "$cap_pid" 2>/dev/null
  wait "$cap_pid" 2>/dev/null
fi
fail=
((srv_rc != 0 || cli_rc != 0)) && fail="server exit $srv_rc, client exit $cli_rc"
# With -c the server checks the received buffer and reports bad pages without failing its exit
# status; the pingpong programs report a completed run as "N bytes in S seconds".
grep -q "invalid data" "$log/server.out" "$log/client.out" && fail="data validation failed"
for side in server client; do
  grep -q "${DONE:-bytes in}" "$log/$side.out" || fail="${fail:-$side reported no transfer}"
done
verdict "$fail"
