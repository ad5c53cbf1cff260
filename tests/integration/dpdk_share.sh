#!/usr/bin/env bash
# One DPDK device shared by several unmodified processes (share=1: a host process owns the port,
# docs/architecture.md "One device, many processes"). Two devices joined by net_memif: A (the
# memif server, 10.91.INDEX.1) and B (its client, .2), each hosted by its own uroce-dpdk-host,
# which the first process to open the device starts.
#   dpdk_share.sh UROCE_RUN INDEX PORT same    an ibv_rc_pingpong server and client both on A,
#                                              talking through A's host; data checked (-c)
#   dpdk_share.sh UROCE_RUN INDEX PORT cross   two processes on A, each paired with one on B
#                                              (a server on each side), both pairs at once
#   dpdk_share.sh UROCE_RUN INDEX PORT kill    a pair A↔B runs while a third process on A is
#                                              killed (SIGKILL); the pair finishes clean, then
#                                              a new pair on A alone runs
#   dpdk_share.sh UROCE_RUN INDEX PORT listen  rping on A; a second rping server on the same port
#                                              of A gets EADDRINUSE; a client on B reaches the first
#   dpdk_share.sh UROCE_RUN INDEX PORT mcast   two mckey receivers on A and one on B join a group;
#                                              a sender on B: each receiver gets every message
set -uo pipefail
run=$1 idx=$2 port=$3 mode=$4
TIMEOUT=${TIMEOUT:-40}
log=$(mktemp -d /tmp/uroce-dpdkshare.XXXXXX)
sock=/tmp/uroce-memif-share-$idx.sock
memif="net_memif0,socket=$sock,socket-abstract=no"
ip_a=10.91.$idx.1 ip_b=10.91.$idx.2
dev_a="uroce0=dpdk(dev=$memif,role=server;ip=$ip_a/24;share=1)"
dev_b="uroce0=dpdk(dev=$memif,role=client;ip=$ip_b/24;share=1)"
pids=()
fail=
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  wait 2>/dev/null
  # The hosts leave by themselves a moment after their last client; these were started for this
  # test (their command line names its memif socket).
  for _ in $(seq 60); do
    pgrep -f "uroce-dpdk-host.*$sock" >/dev/null || break
    sleep 0.1
  done
  for h in $(pgrep -f "uroce-dpdk-host.*$sock"); do kill "$h" 2>/dev/null; done
  cat /tmp/uroce-dpdk.*.log 2>/dev/null | grep -a "$sock\|slot\|left\|hosting\|cannot" | tail -20
  rm -rf "$log" "$sock"
}
trap cleanup EXIT
rm -f "$sock"

# wait_listen, start_pair, check_pair, check_mckey; a pair also fails on a "Couldn't …" line.
# shellcheck source=tests/integration/share_lib.sh
. "$(dirname "$0")/share_lib.sh"
pair_errors="invalid data\|Couldn't"

# B's host has a peer to talk to only once A's is up: open A first where both are used.
case $mode in
  same)
    start_pair same "$port" "$dev_a" "$dev_a" -s 4096 -n 500
    check_pair same "$pair_srv" "$pair_cli"
    # The two processes had slots 0 and 1: their QPNs differ in the slot bits (QPN = slot<<17|n).
    qpns=$(grep -h "local address" "$log/same.srv" "$log/same.cli" | grep -o "QPN 0x[0-9a-f]*" |
      sort | uniq -d)
    [[ -z $qpns ]] || fail="${fail:-a QPN was handed out twice: $qpns}"
    ;;
  cross)
    start_pair ab "$port" "$dev_a" "$dev_b" -s 4096 -n 500
    s1=$pair_srv c1=$pair_cli
    start_pair ba $((port + 1)) "$dev_b" "$dev_a" -s 4096 -n 500
    check_pair ab "$s1" "$c1"
    check_pair ba "$pair_srv" "$pair_cli"
    ;;
  kill)
    # Without `timeout` in front: $! is then the program itself (uroce-run execs it), the process
    # the SIGKILL must reach.
    UROCE_DEVICES=$dev_a "$run" ibv_rc_pingpong -d uroce0 -g 0 -p $((port + 9)) >"$log/victim" 2>&1 &
    victim=$!
    pids+=("$victim")
    wait_listen $((port + 9)) "$victim" || fail="${fail:-the victim never opened the device}"
    start_pair long $((port + 1)) "$dev_a" "$dev_b" -s 4096 -n 1500
    sleep 0.5
    kill -9 "$victim"
    wait "$victim" 2>/dev/null
    echo "--- killed the victim (pid $victim) while the pair ran"
    # A's host frees its slot at once (its sockets closed with it): its log says so.
    seen=
    for _ in $(seq 40); do
      grep -qs "process $victim (slot [0-9]*) left" /tmp/uroce-dpdk.*.log && seen=1 && break
      sleep 0.05
    done
    [[ -n $seen ]] || fail="${fail:-the host of A did not see the victim go}"
    check_pair long "$pair_srv" "$pair_cli"
    start_pair after $((port + 2)) "$dev_a" "$dev_a" -s 4096 -n 200
    check_pair after "$pair_srv" "$pair_cli"
    ;;
  listen)
    export UROCE_LOG=info
    UROCE_DEVICES=$dev_a timeout "$TIMEOUT" "$run" rping -s -v -V -a "$ip_a" -p "$port" -C 10 \
      >"$log/s1" 2>&1 &
    s1=$!
    pids+=("$s1")
    for _ in $(seq 600); do
      grep -q "rdma_cm: listening on" "$log/s1" && break
      sleep 0.05
    done
    UROCE_DEVICES=$dev_a timeout "$TIMEOUT" "$run" rping -s -v -a "$ip_a" -p "$port" -C 1 \
      >"$log/s2" 2>&1
    s2rc=$?
    echo "--- second server on port $port (exit $s2rc)"
    cat "$log/s2"
    ((s2rc != 0)) || fail="${fail:-a second listener on port $port was accepted}"
    grep -qi "address already in use\|EADDRINUSE\|error -98\|rdma_bind_addr" "$log/s2" ||
      fail="${fail:-the second server did not fail to bind}"
    UROCE_DEVICES=$dev_b timeout "$TIMEOUT" "$run" rping -c -v -V -a "$ip_a" -p "$port" -C 10 \
      >"$log/c1" 2>&1
    rc=$?
    echo "--- client on B (exit $rc)"
    cat "$log/c1"
    got=$(grep -c "ping data: rdma-ping-" "$log/c1")
    # rping 44.0's teardown race (rdma_cm.sh) may end a complete run with 255.
    ((rc == 0 || (rc == 255 && got == 10))) || fail="${fail:-client: exit $rc}"
    ((got == 10)) || fail="${fail:-client: $got of 10 pings}"
    wait "$s1"
    ;;
  mcast)
    group=239.91.$idx.$((port % 256))
    # receivers: wait until N of them listen
    receivers_listening() {
      for _ in $(seq 400); do
        n=$(grep -l "receiving data transfers" "$log"/r? 2>/dev/null | wc -l)
        ((n >= $1)) && return 0
        sleep 0.05
      done
    }
    for k in 1 2 3; do
      dev=$dev_a
      # A's host (the memif server) first: B's, its client, needs the server's socket there when
      # it starts (started together, B's host now and then came up first and never connected).
      if ((k == 3)); then
        receivers_listening 2
        dev=$dev_b
      fi
      # Line-buffered: the wait reads what it printed.
      UROCE_DEVICES=$dev timeout "$TIMEOUT" stdbuf -oL "$run" mckey -m "$group" \
        -b "$([[ $dev == "$dev_a" ]] && echo "$ip_a" || echo "$ip_b")" -C 20 >"$log/r$k" 2>&1 &
      pids+=("$!")
    done
    rcv=("${pids[@]: -3}")
    receivers_listening 3
    # B's host started with receiver 3, a moment ago: its memif connection to A's may still be
    # coming up (the port reports ACTIVE before a memif peer first connects), and UD multicast
    # sent before it is lost on the way to A. A sleep was not enough on a loaded host (two runs
    # in six lost every datagram to A): an RC pair A↔B, which retransmits until the path
    # carries it, shows the path is up before the first datagram.
    start_pair link $((port + 2)) "$dev_a" "$dev_b" -s 64 -n 5
    check_pair link "$pair_srv" "$pair_cli"
    UROCE_DEVICES=$dev_b timeout "$TIMEOUT" "$run" mckey -m "$group" -b "$ip_b" -s -C 20 \
      >"$log/s" 2>&1
    check_mckey $? "${rcv[@]}"
    ;;
  *)
    echo "unknown mode $mode" >&2
    exit 2
    ;;
esac

if [[ -n $fail ]]; then
  echo "FAIL: $fail"
  exit 1
fi
echo PASS
