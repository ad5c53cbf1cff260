#!/usr/bin/env bash
# `uroce stats --qp` and `uroce top` look at a running program's QPs from the outside: runs the
# unmodified ibv_rc_pingpong over uroce and, while it runs, reads the server's QP with
# `uroce stats --qp --json` and `uroce top --once` until both show it with traffic; then checks
# what they said: the QP's type, state and peer (the client's QP, at the client's address), its
# counters, and that top lists it on a line of its own.
#
#   qp_stats.sh UROCE_RUN UROCE SERVER_IP CLIENT_IP TCP_PORT
set -uo pipefail
# shellcheck source=tests/integration/lib.sh
source "$(dirname "$0")/lib.sh"
run=$1 uroce=$2 srv_ip=$3 cli_ip=$4 port=$5
fail=
# The first failure is the one reported. (A function, not fail="${fail:-…}": inside that
# double-quoted expansion bash takes an apostrophe for a quote, and the text after it for code.)
failing() { [[ -n $fail ]] || fail=$1; }

# The server's RC QP in one `uroce stats --qp --json` document, as
# "pid qpn state peer_address qp_sent_pkts qp_sent_bytes", or nothing.
server_qp() {
  python3 -c '
import json, sys
doc = json.load(open(sys.argv[1]))
qps = [q for q in doc["qps"] if q["address"] == sys.argv[2] and q["type"] == "RC"
       and q["comm"] == "ibv_rc_pingpong"]
if qps:
    q = min(qps, key=lambda q: q["pid"])
    c = q["counters"]
    print(q["pid"], q["qpn"], q["state"], q["peer_address"], c["qp_sent_pkts"], c["qp_sent_bytes"])
' "$1" "$srv_ip"
}

# The pair runs until the poller has seen what it needs and stops it, not for a fixed time: a
# round (python, `uroce stats`, `uroce top`) can take longer than a short run lasts on a loaded
# machine. 2 000 000 round trips (a minute or more) only bound it.
pair_cmd="ibv_rc_pingpong -d uroce0 -g 0 -p $port -s 64 -n 2000000"
(
  while [[ ! -e $log/done ]]; do
    "$uroce" stats --qp --json >"$log/poll.json" 2>>"$log/poll.err" || { echo "rc $?" >"$log/poll.rc"; exit; }
    read -r pid qpn state peer sent bytes < <(server_qp "$log/poll.json")
    if [[ -n ${pid:-} && ${sent:-0} -gt 0 ]]; then
      "$uroce" top --once >"$log/top.txt" 2>&1 || { echo "top rc $?" >"$log/poll.rc"; exit; }
      # top read after the JSON: the server's QP line must be there with its pid and QPN.
      if grep -Eq "^$pid +ibv_rc_pingpong +uroce0 +$(printf '0x%06x' "$qpn") +RC +RTS " "$log/top.txt"; then
        cp "$log/poll.json" "$log/live.json"
        "$uroce" stats --qp --pid "$pid" >"$log/live.txt" 2>&1
        # Seen: the pair has served its purpose and is stopped (below).
        pkill -f -- "$pair_cmd" 2>/dev/null
        exit
      fi
    fi
    sleep 0.02
  done
) &
poller=$!

server_cmd=("$run" /usr/bin/ibv_rc_pingpong -d uroce0 -g 0 -p "$port" -s 64 -n 2000000)
# TCP_HOST: where the client's TCP exchange goes (the pingpong server listens on IPv4 only).
client_cmd=("${server_cmd[@]}" "${TCP_HOST:-$srv_ip}")
run_pair "$srv_ip" "$cli_ip" "$port"
touch "$log/done"
wait "$poller"
# Stopped by the poller once it saw the QP: then their exit statuses are the signal's.
[[ -s $log/live.json ]] || ((srv_rc == 0 && cli_rc == 0)) ||
  failing "server exit $srv_rc, client exit $cli_rc"
[[ -s $log/poll.rc ]] && failing "uroce failed: $(cat "$log/poll.rc")"

if [[ ! -s $log/live.json ]]; then
  failing "uroce stats --qp / top --once never showed the server's QP with traffic"
  cat "$log/top.txt" 2>/dev/null
else
  echo "--- uroce top --once while running"
  cat "$log/top.txt"
  echo "--- uroce stats --qp --pid while running"
  cat "$log/live.txt"
  read -r pid qpn state peer sent bytes < <(server_qp "$log/live.json")
  echo "server pid $pid QP $qpn $state peer $peer: qp_sent_pkts $sent qp_sent_bytes $bytes"
  [[ $state == RTS ]] || failing "the server's QP is $state, not RTS"
  [[ $peer == "$cli_ip" ]] || failing "the server's QP's peer is $peer, not $cli_ip"
  # ibv_rc_pingpong's 64-byte SENDs: each request packet is BTH + 64 bytes, each ACK BTH + AETH;
  # the QP's bytes are at least 16 per packet and at most 76.
  ((bytes >= 16 * sent && bytes <= 76 * sent)) ||
    failing "qp_sent_bytes $bytes does not fit $sent packets"
  python3 - "$log/live.json" "$pid" "$qpn" <<'PY' || failing "the JSON row lacks fields"
import json, sys
doc = json.load(open(sys.argv[1]))
q = [q for q in doc["qps"] if q["pid"] == int(sys.argv[2]) and q["qpn"] == int(sys.argv[3])][0]
for key in ("device", "comm", "type", "state", "peer_qpn", "peer_address", "counters"):
    assert key in q, key
for name in ("qp_sent_pkts", "qp_rcvd_pkts", "qp_sent_bytes", "qp_rcvd_bytes",
             "retransmitted_pkts", "local_ack_timeout_err", "rcvd_seq_err", "out_of_sequence",
             "rcvd_rnr_err", "send_rnr_err", "duplicate_request", "np_cnp_sent", "rp_cnp_handled"):
    assert name in q["counters"], name
assert q["peer_qpn"] != 0
dev = [d for d in doc["devices"] if d["pid"] == q["pid"] and d["device"] == q["device"]][0]
assert dev["qp_table"] and dev["qps_live"] >= 1
PY
  grep -Eq "^  QP $(printf '0x%06x' "$qpn")  RC  RTS  peer 0x[0-9a-f]{6} @ $cli_ip" "$log/live.txt" ||
    failing "uroce stats --qp lacks the QP line"
  grep -Eq '^    qp_sent_bytes +[1-9]' "$log/live.txt" || failing "uroce stats --qp lacks qp_sent_bytes"
fi

# Rates: two refreshes of the JSON view (whatever runs now), each a whole document.
# (Its notes go to stderr: the stopped pair's files, which the reader removes, are noted there.)
"$uroce" stats --qp --json -w 0.2 -n 2 >"$log/watch.json" 2>"$log/watch.err" || failing "uroce stats --qp -w failed"
python3 -c 'import json,sys; [json.loads(l) for l in open(sys.argv[1]) if l.strip()]' "$log/watch.json" ||
  failing "uroce stats --qp -w printed something that is not JSON"
# Options: a bad sort key is refused; top with no matching process says so.
"$uroce" top --once --sort bytes >/dev/null 2>&1 && failing "uroce top --sort bytes accepted"
"$uroce" top --once --sort errors --pid 1 >"$log/none.out" 2>&1 || failing "uroce top --pid 1 failed"
grep -q "no running uroce processes" "$log/none.out" || failing "top: no 'no running' message"
verdict "$fail"
