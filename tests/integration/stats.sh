#!/usr/bin/env bash
# `uroce stats` looks at a running program from the outside: runs the unmodified ibv_rc_pingpong
# over uroce, reads the server's live counters with `uroce stats --json` while it runs, then stops
# the pair and checks that the file a killed process leaves is removed by the next reader; a
# second, short pair checks that the published file goes away when a process exits normally.
#
#   stats.sh UROCE_RUN UROCE SERVER_IP CLIENT_IP TCP_PORT
set -uo pipefail
# shellcheck source=tests/integration/lib.sh
source "$(dirname "$0")/lib.sh"
run=$1 uroce=$2 srv_ip=$3 cli_ip=$4 port=$5
fail=
# The first failure is the one reported. (A function, not fail="${fail:-…}": inside that
# double-quoted expansion bash takes an apostrophe for a quote, and the text after it for code.)
failing() { [[ -n $fail ]] || fail=$1; }

# The server's device line of one JSON document, as "pid sent_pkts", or nothing. When server and
# client share the address (tools.uroce_stats_shared_device) both are listed under it, in no set
# order: the one with the lower pid (the server, started first) is taken, so that every polling
# round looks at the same process.
server_entry() {
  python3 -c '
import json, sys
doc = json.load(open(sys.argv[1]))
mine = [d for d in doc["devices"] if d["address"] == sys.argv[2] and d["device"] == "uroce0"]
if mine:
    d = min(mine, key=lambda d: d["pid"])
    print(d["pid"], d["counters"].get("sent_pkts", 0))
' "$1" "$srv_ip"
}

# Poll while the pair runs, until one round sees the server with traffic. A round copies the
# server's file, reads the human-readable view, then the JSON; it counts only when the JSON (read
# last) shows the server alive with sent_pkts > 0 and the earlier steps saw it too, so every check
# below looked at the running process. Then the pair has served its purpose and the poller stops
# it: it runs until seen, not for a fixed time (a round — python, two `uroce stats` — can outlast
# a short run on a loaded machine; 50 000 round trips once ended before a round saw them).
# 2 000 000 round trips (a minute or more) only bound it.
pair_cmd="ibv_rc_pingpong -d uroce0 -g 0 -p $port -s 64 -n 2000000"
(
  pid=
  while [[ ! -e $log/done ]]; do
    if [[ -n $pid ]]; then
      cp "/dev/shm/uroce.$pid.uroce0" "$log/round.copy" 2>/dev/null || rm -f "$log/round.copy"
      "$uroce" stats --device uroce0 --pid "$pid" >"$log/round.txt" 2>&1
    fi
    "$uroce" stats --json >"$log/poll.json" 2>>"$log/poll.err" || { echo "rc $?" >"$log/poll.rc"; exit; }
    read -r now_pid sent < <(server_entry "$log/poll.json")
    if [[ -n $pid && ${now_pid:-} == "$pid" && ${sent:-0} -gt 0 && -s $log/round.copy ]] &&
      grep -Eq '^ +sent_pkts +[1-9]' "$log/round.txt"; then
      cp "$log/poll.json" "$log/live.json"
      mv "$log/round.txt" "$log/live.txt"
      pkill -KILL -f -- "$pair_cmd" 2>/dev/null
      exit
    fi
    pid=${now_pid:-}
    sleep 0.02
  done
) &
poller=$!

server_cmd=("$run" /usr/bin/ibv_rc_pingpong -d uroce0 -g 0 -p "$port" -s 64 -n 2000000)
client_cmd=("${server_cmd[@]}" "$srv_ip")
run_pair "$srv_ip" "$cli_ip" "$port"
touch "$log/done"
wait "$poller"
# Stopped by the poller once it saw the server: then their exit statuses are the signal's.
[[ -s $log/live.json ]] || ((srv_rc == 0 && cli_rc == 0)) ||
  failing "server exit $srv_rc, client exit $cli_rc"

echo "--- uroce stats while running"
cat "$log/live.txt" 2>/dev/null
[[ -s $log/poll.rc ]] && failing "uroce stats --json failed: $(cat "$log/poll.rc")"
if [[ ! -s $log/live.json ]]; then
  failing "uroce stats never showed the server ($srv_ip) with sent_pkts > 0"
else
  read -r pid sent < <(server_entry "$log/live.json")
  echo "server pid $pid, sent_pkts $sent"
  grep -Eq "^uroce0  pid $pid \(ibv_rc_pingpong\)  $srv_ip  netdev lo  mtu 4096  port ACTIVE" \
    "$log/live.txt" || failing "human-readable stats lack the server device line"
  # Killed with its device open (SIGKILL: no exit handler ran), the server left its file: the
  # next reader removes it, with a note — unless a device that opened meanwhile (a test beside
  # this one) removed it first (stats_shm::remove_dead_files): then there is nothing to note,
  # and it is gone all the same.
  for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.05; done
  kill -0 "$pid" 2>/dev/null && failing "the stopped server $pid still runs"
  "$uroce" stats >"$log/stale.out" 2>&1 || failing "uroce stats failed on a stale file"
  cat "$log/stale.out"
  grep -q "no longer runs" "$log/stale.out" || grep -q "pid $pid " "$log/stale.out" ||
    echo "note: a device opened meanwhile removed the stale file before uroce stats saw it"
  grep -q "pid $pid " "$log/stale.out" && failing "a dead process was listed"
  [[ -e /dev/shm/uroce.$pid.uroce0 ]] && { rm -f "/dev/shm/uroce.$pid.uroce0"; failing "stale file not removed"; }
fi

# A normal exit removes the published file itself. A short pair to completion; the server's pid
# is the shell's that execs uroce-run, which execs the program (the same process).
echo "--- a short run, exiting normally"
server_cmd=(sh -c 'echo $$ >"$0"; exec "$@"' "$log/server.pid" "$run" /usr/bin/ibv_rc_pingpong
  -d uroce0 -g 0 -p "$port" -s 64 -n 2000)
client_cmd=("$run" /usr/bin/ibv_rc_pingpong -d uroce0 -g 0 -p "$port" -s 64 -n 2000 "$srv_ip")
run_pair "$srv_ip" "$cli_ip" "$port"
((srv_rc != 0 || cli_rc != 0)) && failing "short run: server exit $srv_rc, client exit $cli_rc"
spid=$(cat "$log/server.pid" 2>/dev/null)
if [[ -z $spid ]]; then
  failing "the short run's server did not record its pid"
else
  grep -q "2000 iters" "$log/server.out" || failing "the short run's server did not finish its iterations"
  [[ -e /dev/shm/uroce.$spid.uroce0 ]] && failing "/dev/shm/uroce.$spid.uroce0 outlives its process"
  "$uroce" stats --json >"$log/after.json" || failing "uroce stats failed after the run"
  python3 -c '
import json, sys
doc = json.load(open(sys.argv[1]))
sys.exit(any(d["pid"] == int(sys.argv[2]) for d in doc["devices"]))' "$log/after.json" "$spid" ||
    failing "the short run's server is still listed after exit"
fi

# Bad arguments are an error; no matching process is not.
"$uroce" stats --watch 0 >/dev/null 2>&1 && failing "uroce stats --watch 0 accepted"
"$uroce" frobnicate >/dev/null 2>&1 && failing "unknown subcommand accepted"
"$uroce" stats --pid 1 >"$log/none.out" 2>&1 || failing "no matching process is an error"
grep -q "no running uroce processes" "$log/none.out" || failing "no 'no running' message"
UROCE_DEVICES=uroce0=$srv_ip "$uroce" devices >"$log/devices.out" 2>&1 || failing "uroce devices failed"
cat "$log/devices.out"
grep -Eq "^uroce0 +$srv_ip .* ACTIVE" "$log/devices.out" || failing "uroce devices lacks uroce0"
verdict "$fail"
