#!/usr/bin/env bash
# Runs uroce_stress as server and client over uroce, each process with its own device on its own
# loopback address, optionally with injected faults.
#
#   run.sh MODE UROCE_RUN SERVER_IP CLIENT_IP TCP_PORT UROCE_STRESS [uroce_stress options…]
# MODE run:  both sides must exit 0 and report OK (every byte, completion and counter checked).
# MODE mismatch: the client corrupts one WRITE on purpose; both sides must exit 1 and the server
#            must name the bad byte (the checks can fail).
# MODE kill: the server is killed with SIGKILL mid-run; the client must then end every QP with
#            IBV_WC_RETRY_EXC_ERR, flush the rest, and exit 3 ("PEER LOST") within KILL_BOUND
#            seconds of the kill (default 5), without any other discrepancy; the first error
#            must come within DETECT_BOUND seconds (default 1.5) of the last success.
# Environment: FAULTS (UROCE_FAULTS for both sides), SERVER_FAULTS, CLIENT_FAULTS (for one side,
#              instead of FAULTS), TIMEOUT (seconds, default 90),
#              KILL_AFTER (seconds after the client connects, default 1), KILL_BOUND,
#              MAX_RSS_KIB (run: the peak resident memory of server and client together must
#              stay below it, as each reports "memory at the end: … peak N KiB").
set -uo pipefail
mode=$1 run=$2 srv_ip=$3 cli_ip=$4 port=$5 program=$6
shift 6
timeout=${TIMEOUT:-90}
log=$(mktemp -d /tmp/uroce-stress.XXXXXX)
cleanup() {
  [[ -n ${srv_pid:-} ]] && kill "$srv_pid" 2>/dev/null
  [[ -n ${cli_pid:-} ]] && kill "$cli_pid" 2>/dev/null
  wait 2>/dev/null
  rm -rf "$log"
}
trap cleanup EXIT

# exec, so that $srv_pid is the server itself and kill -9 hits it rather than a wrapper.
UROCE_DEVICES=uroce0=$srv_ip UROCE_FAULTS=${SERVER_FAULTS:-${FAULTS:-}} \
  timeout "$timeout" "$run" "$program" -d uroce0 -p "$port" "$@" >"$log/server.out" 2>&1 &
srv_pid=$!
for _ in $(seq 100); do
  ss -ltnH "sport = :$port" | grep -q . && break
  kill -0 "$srv_pid" 2>/dev/null || break
  sleep 0.05
done
fail=
if [[ $mode == run || $mode == mismatch ]]; then
  extra=()
  [[ $mode == mismatch ]] && extra=(--inject-corruption)
  UROCE_DEVICES=uroce0=$cli_ip UROCE_FAULTS=${CLIENT_FAULTS:-${FAULTS:-}} \
    timeout "$timeout" "$run" "$program" -d uroce0 -p "$port" "$@" "${extra[@]}" "$srv_ip" \
    >"$log/client.out" 2>&1
  cli_rc=$?
  wait "$srv_pid"
  srv_rc=$?
  srv_pid=
  echo "--- server (exit $srv_rc)"; cat "$log/server.out"
  echo "--- client (exit $cli_rc)"; cat "$log/client.out"
  if [[ $mode == mismatch ]]; then
    # Exit 1 is the verdict; a timeout (124), a stall (4) or a crash would not prove the check.
    ((srv_rc == 1 && cli_rc == 1)) || fail="expected both sides to exit 1 on corrupted data"
    grep -q "WRITE (.* byte .* expected" "$log/server.out" ||
      fail="${fail:-the server did not report the corrupted byte}"
  else
    ((srv_rc != 0 || cli_rc != 0)) && fail="server exit $srv_rc, client exit $cli_rc"
    for side in server client; do
      grep -q "^OK$" "$log/$side.out" || fail="${fail:-the $side did not report OK}"
    done
    grep -q "lost=0 duplicated=0 corrupted=0 bad_status=0 other=0" "$log/client.out" ||
      fail="${fail:-the client summary shows discrepancies}"
    if [[ -n ${MAX_RSS_KIB:-} ]]; then
      peak() { sed -n 's/^memory at the end: .* peak \([0-9]*\) KiB$/\1/p' "$log/$1.out"; }
      total=$(($(peak server) + $(peak client)))
      echo "resident memory: server and client peaks together $total KiB (bound $MAX_RSS_KIB KiB)"
      ((total > 0 && total <= MAX_RSS_KIB)) ||
        fail="${fail:-peak resident memory $total KiB above $MAX_RSS_KIB KiB}"
    fi
  fi
elif [[ $mode == kill ]]; then
  UROCE_DEVICES=uroce0=$cli_ip UROCE_FAULTS=${CLIENT_FAULTS:-${FAULTS:-}} \
    timeout "$timeout" "$run" "$program" -d uroce0 -p "$port" "$@" "$srv_ip" >"$log/client.out" 2>&1 &
  cli_pid=$!
  for _ in $(seq 200); do
    grep -q "^connected" "$log/client.out" && break
    sleep 0.05
  done
  sleep "${KILL_AFTER:-1}"
  # uroce-run execs the program, but timeout forks it: kill the process that holds the QPs.
  victim=$(pgrep -P "$srv_pid" | head -n 1)
  if ! kill -0 "$cli_pid" 2>/dev/null; then
    fail="the client ended before the server was killed: use more --ops"
  elif [[ -z $victim ]]; then
    fail="no server process to kill"
  else
    kill -9 "$victim"
    killed=$(date +%s.%N)
    bound=${KILL_BOUND:-5}
    # Waits for the client, but no longer than the bound.
    for _ in $(seq $((bound * 20))); do kill -0 "$cli_pid" 2>/dev/null || break; sleep 0.05; done
    if kill -0 "$cli_pid" 2>/dev/null; then
      fail="the client was still running ${bound} s after the server was killed"
      kill -9 "$cli_pid"
    fi
    wait "$cli_pid"
    cli_rc=$?
    cli_pid=
    took=$(awk -v a="$killed" -v b="$(date +%s.%N)" 'BEGIN { printf "%.3f", b - a }')
    wait "$srv_pid" 2>/dev/null
    srv_pid=
    echo "--- server (killed)"; cat "$log/server.out"
    echo "--- client (exit $cli_rc, ${took} s after the kill)"; cat "$log/client.out"
    if [[ -z $fail ]]; then
      ((cli_rc == 3)) || fail="client exit $cli_rc, expected 3 (peer lost)"
      qps=$(sed -n 's/^PEER LOST: \([0-9]*\) of \([0-9]*\) QPs.*/\1 \2/p' "$log/client.out")
      read -r lost total <<<"$qps"
      [[ -n ${lost:-} && $lost == "$total" ]] ||
        fail="${fail:-not every QP ended with IBV_WC_RETRY_EXC_ERR (got: $qps)}"
      # The requester must give up after its retries (timeout × (retry_cnt + 1)), not later.
      detect=$(sed -n 's/.*the first error came \([0-9.]*\) s after.*/\1/p' "$log/client.out")
      awk -v d="${detect:-99}" -v b="${DETECT_BOUND:-1.5}" 'BEGIN { exit !(d <= b) }' ||
        fail="${fail:-the first RETRY_EXC_ERR came ${detect:-never} s after the last success, bound ${DETECT_BOUND:-1.5} s}"
    fi
  fi
else
  fail="unknown mode '$mode'"
fi
if [[ -n $fail ]]; then
  echo "FAIL: $fail"
  exit 1
fi
echo "PASS"
