# Sourced by the tests of one device shared by many processes (shared_device.sh on the kernel-UDP
# port, dpdk_share.sh on DPDK): ibv_rc_pingpong pairs started and judged, and an mckey group's
# verdict. The caller sets run (uroce-run), log (a scratch directory), TIMEOUT, pids (an array:
# what its cleanup kills) and fail (empty; the first failure's message), and may set pair_errors
# after sourcing this.
# shellcheck shell=bash disable=SC2154

# A grep pattern (basic) of pingpong log lines that fail a pair besides its exit status.
pair_errors="invalid data"

# wait_listen TCP_PORT PID: until TCP_PORT listens (the pingpong server is ready) or PID exits.
wait_listen() {
  for _ in $(seq 400); do
    ss -ltnH "sport = :$1" | grep -q . && return 0
    kill -0 "$2" 2>/dev/null || return 1
    sleep 0.05
  done
  return 1
}

# start_pair NAME TCP_PORT SERVER_DEVICES CLIENT_DEVICES pingpong-options…: an ibv_rc_pingpong
# pair in the background (data checked, -c), each side with its UROCE_DEVICES, its logs
# $log/NAME.srv and $log/NAME.cli; leaves the two pids in pair_srv and pair_cli.
start_pair() {
  local name=$1 p=$2 sdev=$3 cdev=$4
  shift 4
  UROCE_DEVICES=$sdev timeout "$TIMEOUT" "$run" ibv_rc_pingpong -d uroce0 -g 0 -p "$p" -c "$@" \
    >"$log/$name.srv" 2>&1 &
  pair_srv=$!
  pids+=("$pair_srv")
  wait_listen "$p" "$pair_srv" || fail="${fail:-$name: the server never listened}"
  UROCE_DEVICES=$cdev timeout "$TIMEOUT" "$run" ibv_rc_pingpong -d uroce0 -g 0 -p "$p" -c "$@" \
    127.0.0.1 >"$log/$name.cli" 2>&1 &
  pair_cli=$!
  pids+=("$pair_cli")
}

# check_pair NAME SERVER_PID CLIENT_PID: the pair's verdict: both exit 0, both report a transfer,
# no line matches pair_errors.
check_pair() {
  local name=$1
  wait "$2"; local src=$?
  wait "$3"; local crc=$?
  echo "--- $name: server exit $src, client exit $crc"
  cat "$log/$name.srv" "$log/$name.cli"
  ((src == 0 && crc == 0)) || fail="${fail:-$name: server exit $src, client exit $crc}"
  grep -q "$pair_errors" "$log/$name.srv" "$log/$name.cli" &&
    fail="${fail:-$name: a log line matches $pair_errors}"
  grep -q "bytes in" "$log/$name.srv" && grep -q "bytes in" "$log/$name.cli" ||
    fail="${fail:-$name: no transfer reported}"
}

# check_mckey SENDER_EXIT RECEIVER_PID…: the verdict on an mckey group of 20 messages: each
# receiver (its log $log/rK, K from 1) exits 0 having got them all; the sender (log $log/s)
# exited 0.
check_mckey() {
  local src=$1 k=0 r rc
  shift
  for r in "$@"; do
    k=$((k + 1))
    wait "$r"
    rc=$?
    echo "--- receiver $k (exit $rc)"
    cat "$log/r$k"
    ((rc == 0)) && grep -q "data transfers complete" "$log/r$k" ||
      fail="${fail:-receiver $k did not get all 20 messages (exit $rc)}"
  done
  echo "--- sender (exit $src)"
  cat "$log/s"
  ((src == 0)) || fail="${fail:-the sender exited $src}"
}
